CREATE OR REFRESH STREAMING TABLE positive AS
SELECT s.k, window.start AS window_start, sum(s.v) AS total
FROM (SELECT k, ts, v FROM STREAM read_files('landing/events', format => 'json', schema => 'k STRING, ts TIMESTAMP, v BIGINT') WHERE k <> 'skip')
  WATERMARK ts DELAY OF INTERVAL 30 SECONDS AS s
WHERE s.v > 0 AND s.ts > TIMESTAMP '2026-01-01 00:00:05'
GROUP BY s.k, window(s.ts, '1 minute');
