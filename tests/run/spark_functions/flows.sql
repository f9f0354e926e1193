-- Databricks notebook source
CREATE OR REFRESH STREAMING TABLE orders_raw
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, placed STRING, amount DOUBLE, tags STRING, items ARRAY<BIGINT>, payload STRING')

-- COMMAND ----------
CREATE OR REFRESH STREAMING TABLE orders
AS SELECT
  id,
  date(placed) AS placed_on,
  year(placed) AS placed_year,
  dayofweek(placed) AS weekday,
  if(amount >= 100, 'large', 'small') AS size,
  isnull(tags) AS untagged,
  get_json_object(payload, '$.customer.country') AS country,
  payload:customer.tier::int AS tier
FROM STREAM(LIVE.orders_raw)

-- COMMAND ----------
CREATE OR REFRESH STREAMING TABLE order_tags
AS SELECT id, explode(split(tags, ',')) AS tag FROM STREAM(LIVE.orders_raw)

-- COMMAND ----------
CREATE OR REFRESH STREAMING TABLE order_items
AS SELECT o.id, item FROM STREAM(LIVE.orders_raw) o LATERAL VIEW explode(o.items) t AS item

-- COMMAND ----------
CREATE OR REFRESH MATERIALIZED VIEW top_order_per_year
AS SELECT year(placed) AS y, max_by(id, amount) AS top_id, count(*) AS orders
FROM LIVE.orders_raw GROUP BY year(placed)
