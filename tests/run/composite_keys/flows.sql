CREATE OR REFRESH STREAMING TABLE lines_raw
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'order_id BIGINT, line INT, qty INT, note STRING, commit_ts TIMESTAMP, pos BIGINT');
CREATE OR REFRESH STREAMING TABLE order_lines;
CREATE FLOW lines_cdc AS AUTO CDC INTO order_lines FROM STREAM(lines_raw)
KEYS (order_id, line) SEQUENCE BY (commit_ts, pos) COLUMNS (order_id, line, qty);
