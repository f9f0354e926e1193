-- CREATE STREAMING TABLE forms from the Databricks pipelines SQL reference.
CREATE OR REFRESH STREAMING TABLE silver_orders;
CREATE STREAMING TABLE customers_bronze
AS SELECT * FROM STREAM read_files('/landing/customers', format => 'json');
CREATE OR REFRESH STREAMING TABLE raw_data
COMMENT 'Raw orders, as landed'
AS SELECT * FROM STREAM(read_files('landing/orders', format => 'csv', header => true));
CREATE OR REFRESH STREAMING TABLE customers_silver (
  id BIGINT NOT NULL COMMENT 'customer id',
  name STRING,
  age INT,
  CONSTRAINT valid_age EXPECT (age BETWEEN 0 AND 120),
  CONSTRAINT valid_id EXPECT (id IS NOT NULL) ON VIOLATION DROP ROW,
  CONSTRAINT valid_name EXPECT (name IS NOT NULL) ON VIOLATION FAIL UPDATE
)
PARTITIONED BY (age)
TBLPROPERTIES ('quality' = 'silver', 'pipelines.reset.allowed' = 'false')
AS SELECT * FROM STREAM(customers_bronze);
/* a block comment */
create or refresh streaming table lower_case cluster by (id) as select id from stream live.customers_bronze where id > 0;
CREATE STREAMING TABLE `quoted name` USING DELTA LOCATION '/tmp/x';
CREATE OR REFRESH PRIVATE STREAMING TABLE private_st AS SELECT * FROM STREAM customers_bronze;
CREATE STREAMING TABLE with_schema AS SELECT * FROM STREAM read_files('in', format => 'parquet', schema => 'id BIGINT, ts TIMESTAMP');
