CREATE OR REFRESH STREAMING TABLE deliveries AS
SELECT DISTINCT ON (id) id, ts, payload
FROM STREAM read_files('landing/events', format => 'json', schema => 'id STRING, ts TIMESTAMP, payload STRING')
  WATERMARK ts DELAY OF INTERVAL 1 MINUTE AS e;
