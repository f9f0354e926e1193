CREATE OR REFRESH STREAMING TABLE per_minute AS
SELECT window.start AS window_start, count(*) AS n
FROM STREAM read_files('landing/raw', format => 'json', schema => 'k STRING, ts_text STRING')
  WATERMARK to_timestamp(ts_text) AS ts DELAY OF INTERVAL 1 MINUTE r
GROUP BY window(ts, '1 minute');
