-- Databricks notebook source
-- MAGIC %md
-- MAGIC # Orders: cells end statements without `;`

-- COMMAND ----------

USE CATALOG main;
USE SCHEMA bronze

-- COMMAND ----------

SET pipelines.landing = 'data/orders'
-- COMMAND ----------
SET spark.sql.shuffle.partitions=8;
set verbose

-- COMMAND ----------

CREATE OR REFRESH STREAMING TABLE orders_raw
AS SELECT * FROM STREAM read_files('data', format => 'json')

-- COMMAND ----------

USE main.silver;
CREATE OR REFRESH STREAMING TABLE orders
