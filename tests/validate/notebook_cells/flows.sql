-- Databricks notebook source
-- MAGIC %md
-- MAGIC # Orders, as Databricks exports a notebook: no `;` at the end of a cell

-- COMMAND ----------

USE CATALOG main;
USE SCHEMA bronze

-- COMMAND ----------

SET landing = 'landing/orders';
SET min_id = 0

-- COMMAND ----------

CREATE OR REFRESH STREAMING TABLE orders_raw
AS SELECT * FROM STREAM read_files(${landing}, format => 'json', schema => 'id BIGINT, seq BIGINT, op STRING, amount DOUBLE')

-- COMMAND ----------

CREATE OR REFRESH STREAMING TABLE orders

-- COMMAND ----------

CREATE FLOW orders_cdc AS AUTO CDC INTO orders
FROM STREAM(orders_raw) KEYS (id)
APPLY AS DELETE WHEN op = 'D'
SEQUENCE BY seq
COLUMNS * EXCEPT (op)

-- COMMAND ----------

CREATE MATERIALIZED VIEW big_orders AS SELECT * FROM orders WHERE id > ${min_id} AND amount > 10
