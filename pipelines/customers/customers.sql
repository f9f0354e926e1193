-- Bronze: customer change events exactly as landed (a full load, then daily changes).
CREATE OR REFRESH STREAMING TABLE bronze_customer_changes
COMMENT 'Customer change events as landed'
AS SELECT * FROM STREAM read_files(
  '${landing}/customers',
  format => 'csv',
  header => true,
  schema => 'customer_id BIGINT, name STRING, email STRING, city STRING, op STRING, updated_at TIMESTAMP'
);

-- Silver: the current state of every customer.
CREATE OR REFRESH STREAMING TABLE silver_customers
COMMENT 'One row per live customer';

CREATE FLOW customers_cdc AS AUTO CDC INTO silver_customers
FROM STREAM(bronze_customer_changes)
KEYS (customer_id)
APPLY AS DELETE WHEN op = 'D'
SEQUENCE BY updated_at
COLUMNS * EXCEPT (op)
STORED AS SCD TYPE 1;
