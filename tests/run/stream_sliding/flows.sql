CREATE OR REFRESH STREAMING TABLE sliding AS
SELECT window.start AS window_start, window.end AS window_end, count(*) AS n, sum(v) AS total
FROM STREAM read_files('landing/events', format => 'json', schema => 'k STRING, ts TIMESTAMP, v BIGINT') WATERMARK ts DELAY OF INTERVAL 10 SECONDS e
GROUP BY window(ts, '1 minute', '30 seconds');
