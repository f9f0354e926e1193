CREATE OR REFRESH STREAMING TABLE customers;

CREATE FLOW customers_cdc AS AUTO CDC INTO customers
FROM SNAPSHOT (
  SELECT id, name, city
  FROM read_files('landing/customers', format => 'csv', header => true,
    schema => 'id INT, name STRING, city STRING')
  WHERE _metadata.file_path
    LIKE concat('%/', (SELECT CAST(day AS STRING) FROM current_snapshot_version()), '/%')
)
WITH VERSION (
  SELECT CAST(substr(path, length(path) - 10, 10) AS DATE) AS day
  FROM list_files('landing/customers', recursive => false)
  WHERE NOT EXISTS (SELECT 1 FROM last_snapshot_version())
    OR CAST(substr(path, length(path) - 10, 10) AS DATE)
      > (SELECT day FROM last_snapshot_version())
  ORDER BY day
  LIMIT 1
)
KEYS (id)
STORED AS SCD TYPE 2;
