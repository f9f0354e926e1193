-- Databricks notebook source
-- MAGIC %md
-- MAGIC # Users

-- COMMAND ----------

-- MAGIC %sql
-- MAGIC CREATE STREAMING TABLE src (id BIGINT, seq BIGINT);
-- MAGIC CREATE STREAMING TABLE t;
-- MAGIC CREATE FLOW f AS AUTO CDC INTO t FROM STREAM(src) KEYS (idd) SEQUENCE BY seq;
