CREATE OR REFRESH STREAMING TABLE prices AS
SELECT k, window.start AS window_start, avg(price) AS mean_price, sum(price) AS total, count(*) AS n
FROM STREAM read_files('landing/events', format => 'json', schema => 'k STRING, ts TIMESTAMP, price DECIMAL(10,2)')
  WATERMARK ts DELAY OF INTERVAL 30 SECONDS AS e
GROUP BY k, window(ts, '1 minute');
