-- Databricks notebook source
USE SCHEMA bronze;

CREATE OR REFRESH STREAMING TABLE orders
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, status STRING, seq BIGINT');

-- COMMAND ----------

USE SCHEMA silver;

-- main.silver.orders, fed by main.bronze.orders: two datasets, no cycle.
CREATE OR REFRESH STREAMING TABLE orders;
CREATE FLOW orders_cdc AS AUTO CDC INTO orders
FROM STREAM(main.bronze.orders) KEYS (id) SEQUENCE BY seq;

-- COMMAND ----------

-- `orders` here is main.silver.orders (USE SCHEMA silver); columns qualified by the
-- table's last name part, as Spark allows.
CREATE OR REFRESH MATERIALIZED VIEW main.gold.open_orders
AS SELECT orders.id, orders.status FROM orders WHERE orders.status <> 'closed';

USE CATALOG main;
USE SCHEMA gold;
CREATE OR REFRESH MATERIALIZED VIEW change_counts
AS SELECT (SELECT count(*) FROM bronze.orders) AS changes,
          (SELECT count(*) FROM LIVE.orders) AS current_orders;
