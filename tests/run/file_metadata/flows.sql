-- `*` leaves the hidden _metadata column out, as on Databricks.
CREATE OR REFRESH STREAMING TABLE raw
AS SELECT *,
  _metadata.file_name AS file,
  _metadata.file_size AS size,
  _metadata.file_path LIKE 'file:///%/landing/%.json' AS path_is_url,
  _metadata.file_modification_time IS NOT NULL AS has_time,
  input_file_name() = _metadata.file_path AS same_path
FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING');

CREATE OR REFRESH MATERIALIZED VIEW per_file
AS SELECT f._metadata.file_name AS file, count(*) AS n
FROM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING') f
GROUP BY f._metadata.file_name;

CREATE OR REFRESH MATERIALIZED VIEW direct_json AS SELECT id, v FROM json.`landing`;
CREATE OR REFRESH MATERIALIZED VIEW direct_delta AS SELECT * FROM delta.`copies/customers`;
