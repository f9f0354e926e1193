-- Databricks notebook source
-- MAGIC %md
-- MAGIC ## Users bronze (Auto Loader, JSON)

-- COMMAND ----------

CREATE OR REFRESH STREAMING LIVE TABLE users_bronze
COMMENT "Raw user change feed"
TBLPROPERTIES (quality = bronze, pipelines.reset.allowed = false)
AS SELECT * FROM cloud_files("${corpus.landing}/users", "json", map("cloudFiles.inferColumnTypes", "true"));
