CREATE OR REFRESH STREAMING TABLE per_minute AS
SELECT k, window.start AS window_start, count(*) AS n
FROM STREAM read_files('landing/events', format => 'json', schema => 'k STRING, ts TIMESTAMP, v BIGINT') WATERMARK ts DELAY OF INTERVAL 30 SECONDS AS e
GROUP BY k, window(ts, '1 minute');

CREATE OR REFRESH MATERIALIZED VIEW per_key AS
SELECT k, sum(n) AS events, count(*) AS windows FROM per_minute GROUP BY k;
