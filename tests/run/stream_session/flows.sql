CREATE OR REFRESH STREAMING TABLE sessions AS
SELECT k, session_window.start AS session_start, session_window.end AS session_end, count(*) AS n, sum(v) AS total
FROM STREAM read_files('landing/events', format => 'json', schema => 'k STRING, ts TIMESTAMP, v BIGINT')
  WATERMARK ts DELAY OF INTERVAL 2 MINUTES AS e
GROUP BY k, session_window(ts, '5 minutes');
