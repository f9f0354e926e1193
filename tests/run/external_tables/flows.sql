-- Databricks notebook source
-- Each batch reads the commits of prod.crm.customers after the last one read.
CREATE OR REFRESH STREAMING TABLE customer_feed
AS SELECT id, name, region_code FROM STREAM(prod.crm.customers);

-- COMMAND ----------

USE CATALOG prod;
USE SCHEMA erp;
CREATE OR REFRESH STREAMING TABLE main.sales.orders;
APPLY CHANGES INTO main.sales.orders
FROM STREAM(order_events)
KEYS (order_id)
SEQUENCE BY seq;

-- COMMAND ----------

CREATE OR REFRESH MATERIALIZED VIEW main.sales.customers_by_region
AS SELECT r.region, count(*) AS customers
FROM prod.crm.customers c JOIN crm.regions r ON c.region_code = r.code
GROUP BY r.region;
