-- Databricks notebook source
CREATE OR REFRESH STREAMING TABLE customer_changes
AS SELECT * FROM STREAM read_files('landing/customers', format => 'json',
  schema => 'id BIGINT, name STRING, city_code STRING, op STRING, seq BIGINT');

CREATE OR REFRESH MATERIALIZED VIEW cities
AS SELECT * FROM read_files('landing/cities', format => 'csv', header => true,
  schema => 'code STRING, city STRING');

-- COMMAND ----------

-- A stream joined with a table read whole: each batch meets all of `cities`.
CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers
FROM (
  SELECT c.id, c.name, t.city, c.op, c.seq
  FROM STREAM(LIVE.customer_changes) c
  JOIN LIVE.cities t ON c.city_code = t.code
)
KEYS (id)
APPLY AS DELETE WHEN op = 'D'
SEQUENCE BY seq
COLUMNS * EXCEPT (op);

-- COMMAND ----------

-- Two streams, one flow: a UNION ALL keeps no state.
CREATE OR REFRESH STREAMING TABLE account_changes_a
AS SELECT * FROM STREAM read_files('landing/accounts_a', format => 'json',
  schema => 'account_id BIGINT, balance BIGINT, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE account_changes_b
AS SELECT * FROM STREAM read_files('landing/accounts_b', format => 'json',
  schema => 'account_id BIGINT, amount BIGINT, seq BIGINT');

CREATE OR REFRESH STREAMING TABLE accounts;
APPLY CHANGES INTO LIVE.accounts
FROM (
  SELECT account_id, balance, seq, 'a' AS origin FROM STREAM(account_changes_a)
  UNION ALL
  SELECT account_id, amount AS balance, seq, 'b' AS origin FROM STREAM(account_changes_b)
)
KEYS (account_id)
SEQUENCE BY seq
STORED AS SCD TYPE 2;

-- COMMAND ----------

-- QUALIFY over a table read whole: the latest price per product, re-applied each run.
CREATE OR REFRESH MATERIALIZED VIEW price_list
AS SELECT * FROM read_files('landing/prices', format => 'json',
  schema => 'product STRING, price DOUBLE, listed BIGINT');
CREATE OR REFRESH STREAMING TABLE prices;
APPLY CHANGES INTO prices
FROM (SELECT product, price, listed FROM price_list
      QUALIFY row_number() OVER (PARTITION BY product ORDER BY listed DESC) = 1)
KEYS (product)
SEQUENCE BY listed;
