-- Bronze: change-log records as landed, one JSON object per line.
CREATE OR REFRESH STREAMING TABLE bronze_order_changes
AS SELECT * FROM STREAM read_files(
  '${landing}/orders',
  format => 'json',
  schema => 'order_id BIGINT, customer_id BIGINT, status STRING, amount DECIMAL(12,2), operation STRING, commit_ts TIMESTAMP, log_position BIGINT'
);
