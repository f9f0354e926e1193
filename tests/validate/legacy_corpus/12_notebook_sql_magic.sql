-- Databricks notebook source
-- MAGIC %md
-- MAGIC Readings per device, from a `%sql` magic cell.

-- COMMAND ----------

-- MAGIC %sql
-- MAGIC CREATE OR REFRESH LIVE TABLE readings_per_device
-- MAGIC AS SELECT device, avg(reading) AS avg_reading
-- MAGIC FROM LIVE.events_clean
-- MAGIC GROUP BY device;

-- COMMAND ----------

-- MAGIC %python
-- MAGIC spark.table("LIVE.readings_per_device").show()
