-- Databricks notebook source
CREATE OR REFRESH STREAMING TABLE reviews
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, review STRING, owner STRING');

-- COMMAND ----------
CREATE OR REFRESH MATERIALIZED VIEW classified
AS SELECT id, ai_classify(review, ARRAY('good', 'bad')) AS verdict FROM LIVE.reviews;

-- COMMAND ----------
CREATE OR REFRESH MATERIALIZED VIEW mine
AS SELECT id FROM LIVE.reviews WHERE owner = session_user();

-- COMMAND ----------
CREATE OR REFRESH MATERIALIZED VIEW for_admins
AS SELECT id, CASE WHEN is_member('admins') THEN review END AS review FROM LIVE.reviews;

-- COMMAND ----------
CREATE OR REFRESH MATERIALIZED VIEW with_key
AS SELECT id, secret('crm', 'api-key') AS api_key FROM LIVE.reviews;

-- COMMAND ----------
-- A variant path is planned by validate too, so a bad call beside it is found here.
CREATE OR REFRESH MATERIALIZED VIEW bad_path
AS SELECT id, unknown_fn(review:rating::int) AS r FROM LIVE.reviews;
