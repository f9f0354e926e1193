-- Bronze: the change events as landed (the kit's columns; declared, so no run infers them).
CREATE OR REFRESH STREAMING TABLE bronze_customer_changes
AS SELECT * FROM STREAM read_files(
  '${landing}/changes',
  format => 'parquet',
  schema => 'customer_id BIGINT, name STRING, city STRING, tier STRING, balance DOUBLE, updated_at TIMESTAMP, op STRING, seq BIGINT'
);

-- Silver: the customers table the benchmark measures, SCD type 1 or 2 (`scd_type`).
CREATE OR REFRESH STREAMING TABLE customers;

CREATE FLOW customers_cdc AS AUTO CDC INTO customers
FROM STREAM(bronze_customer_changes)
KEYS (customer_id)
APPLY AS DELETE WHEN op = 'D'
SEQUENCE BY seq
COLUMNS * EXCEPT (op, seq)
STORED AS SCD TYPE ${scd_type};
