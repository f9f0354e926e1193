CREATE OR REFRESH STREAMING TABLE orders;

CREATE FLOW orders_cdc
AS AUTO CDC INTO orders
FROM SNAPSHOT (
  SELECT order_id, status, amount
  FROM read_files('landing/orders/', format => 'json',
    schema => 'order_id BIGINT, status STRING, amount DECIMAL(10,2)')
  WHERE _metadata.file_path = (SELECT version.path FROM current_snapshot_version())
)
WITH VERSION (
  SELECT struct(modification_time, path) AS version
  FROM list_files('landing/orders/')
  WHERE (
    NOT EXISTS (SELECT 1 FROM last_snapshot_version())
    OR struct(modification_time, path) > (SELECT version FROM last_snapshot_version())
  )
  ORDER BY modification_time, path
  LIMIT 1
)
KEYS (order_id);
