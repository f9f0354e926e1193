CREATE OR REFRESH STREAMING LIVE TABLE raw
TBLPROPERTIES (pipelines.reset.allowed = false)
AS SELECT * FROM cloud_files('landing', 'json', map('cloudFiles.inferColumnTypes', 'true'));

CREATE OR REFRESH PRIVATE MATERIALIZED VIEW per_id
AS SELECT id, count(*) AS n FROM LIVE.raw GROUP BY id;

CREATE OR REFRESH LIVE TABLE summary AS SELECT count(*) AS ids, sum(n) AS rows_seen FROM LIVE.per_id;
