-- Databricks notebook source
-- Spark's built-in functions and expressions, as public pipelines write them; every
-- flow here is planned by `validate`, so none of them may be reported.

-- COMMAND ----------
CREATE OR REFRESH STREAMING TABLE events_raw
AS SELECT * FROM STREAM read_files('${landing}', format => 'json',
  schema => 'id BIGINT, event_time STRING, ts TIMESTAMP, amount DOUBLE, tags STRING, items ARRAY<BIGINT>, payload STRING')

-- COMMAND ----------
CREATE OR REFRESH STREAMING TABLE events_clean
AS SELECT
  id,
  date(event_time) AS event_date,
  timestamp(event_time) AS event_ts,
  bigint(amount) AS amount_long,
  int(id) AS id_int,
  year(ts) AS y, month(ts) AS m, day(ts) AS d, hour(ts) AS h, minute(ts) AS mi,
  quarter(ts) AS q, dayofweek(ts) AS dow, weekofyear(ts) AS woy, dayofyear(ts) AS doy,
  datediff(date(ts), date(event_time)) AS age_days,
  date_add(date(ts), 7) AS next_week,
  add_months(date(ts), 1) AS next_month,
  unix_timestamp(event_time, 'yyyy-MM-dd HH:mm:ss') AS epoch,
  unix_millis(ts) AS epoch_ms,
  if(amount > 100, 'big', 'small') AS size,
  isnull(tags) AS no_tags,
  isnotnull(payload) AS has_payload,
  split(tags, ',') AS tag_list,
  array(id, id + 1) AS pair,
  sequence(1, 3) AS three,
  base64(tags) AS tags_b64,
  sha1(tags) AS tags_sha1,
  len(tags) AS tags_len,
  regexp_extract(tags, '([a-z]+)', 1) AS first_tag,
  get_json_object(payload, '$.device.os') AS os,
  parse_json(payload) AS payload_v,
  try_parse_json(payload) AS payload_try,
  payload:device.os::string AS os_path,
  payload:device.version::int AS os_version
FROM STREAM(LIVE.events_raw)

-- COMMAND ----------
CREATE OR REFRESH STREAMING TABLE event_items
AS SELECT id, item FROM STREAM(LIVE.events_raw) LATERAL VIEW explode(items) t AS item

-- COMMAND ----------
CREATE OR REFRESH STREAMING TABLE event_tags
AS SELECT id, explode(split(tags, ',')) AS tag FROM STREAM(LIVE.events_raw)

-- COMMAND ----------
CREATE OR REFRESH MATERIALIZED VIEW event_stats
AS SELECT
  date(event_time) AS event_date,
  first(id) AS first_id,
  max_by(id, amount) AS biggest,
  min_by(id, amount) AS smallest,
  mode(tags) AS usual_tags,
  percentile_approx(amount, 0.5) AS median_amount
FROM LIVE.events_raw
GROUP BY date(event_time)
