-- Databricks notebook source
-- MAGIC %md
-- MAGIC # Orders (older DLT syntax)
-- MAGIC Change-log records land as JSON; silver keeps every version of every order.

-- COMMAND ----------

CREATE OR REFRESH STREAMING LIVE TABLE bronze_order_changes
COMMENT "Order change-log records as landed"
TBLPROPERTIES (quality = bronze, pipelines.reset.allowed = true)
AS SELECT * FROM cloud_files(
  "${my_pipeline.landing}/orders",
  "json",
  map(
    "cloudFiles.inferColumnTypes", "true",
    "cloudFiles.schemaHints", "order_id BIGINT, customer_id BIGINT, amount DECIMAL(12,2), commit_ts TIMESTAMP, log_position BIGINT",
    "cloudFiles.maxFilesPerTrigger", "100"
  )
);

-- COMMAND ----------

CREATE OR REFRESH STREAMING LIVE TABLE silver_orders_history
COMMENT "Order versions with __START_AT/__END_AT";

APPLY CHANGES INTO LIVE.silver_orders_history
FROM STREAM(LIVE.bronze_order_changes)
KEYS(order_id)
APPLY AS DELETE WHEN operation = "DELETE"
SEQUENCE BY STRUCT(commit_ts, log_position)
COLUMNS * EXCEPT (operation, commit_ts, log_position)
STORED AS SCD TYPE 2
TRACK HISTORY ON (status, amount);

-- COMMAND ----------

-- MAGIC %python
-- MAGIC # Python cells are comments to cdcflow.
-- MAGIC display(spark.table("LIVE.silver_orders_history"))

-- COMMAND ----------

-- MAGIC %sql
-- MAGIC CREATE OR REFRESH LIVE TABLE gold_orders_by_status
-- MAGIC AS SELECT status, count(*) AS orders, sum(amount) AS total_amount
-- MAGIC FROM LIVE.silver_orders_history
-- MAGIC WHERE __END_AT IS NULL
-- MAGIC GROUP BY status;
