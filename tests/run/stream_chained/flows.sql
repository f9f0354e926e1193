CREATE OR REFRESH STREAMING TABLE per_minute AS
SELECT k, window.start AS window_start, count(*) AS n
FROM STREAM read_files('landing/events', format => 'json', schema => 'k STRING, ts TIMESTAMP')
  WATERMARK ts DELAY OF INTERVAL 30 SECONDS AS e
GROUP BY k, window(ts, '1 minute');

CREATE OR REFRESH STREAMING TABLE busy_minutes AS
SELECT k, window_start, n FROM STREAM(per_minute) WHERE n >= 2;

CREATE OR REFRESH STREAMING TABLE per_two_minutes;

CREATE FLOW two_minute_totals AS INSERT INTO per_two_minutes BY NAME
SELECT window.start AS window_start, sum(n) AS n
FROM STREAM(per_minute) WATERMARK window_start DELAY OF INTERVAL 0 SECONDS AS m
GROUP BY window(window_start, '2 minutes');
