CREATE OR REFRESH STREAMING TABLE per_minute AS
SELECT k, window.start AS window_start, window.end AS window_end,
       count(*) AS n, sum(v) AS total, min(v) AS least, max(v) AS most, avg(v) AS mean
FROM STREAM read_files('landing/events', format => 'json', schema => 'k STRING, ts TIMESTAMP, v BIGINT')
  WATERMARK ts DELAY OF INTERVAL 30 SECONDS AS e
GROUP BY k, window(ts, '1 minute');
