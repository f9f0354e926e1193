CREATE OR REFRESH STREAMING TABLE unique_events AS
SELECT DISTINCT k, ts
FROM STREAM read_files('landing/events', format => 'json', schema => 'k STRING, ts TIMESTAMP, v BIGINT') WATERMARK ts DELAY OF INTERVAL 1 MINUTE e;
