CREATE OR REFRESH STREAMING TABLE two_rows;

CREATE FLOW two_rows_cdc AS AUTO CDC INTO two_rows
FROM SNAPSHOT (
  SELECT id, city FROM read_files('landing/snapshots', format => 'csv', header => true,
    schema => 'id INT, city STRING')
  WHERE _metadata.file_name = (SELECT version FROM current_snapshot_version())
)
WITH VERSION (
  SELECT file_name AS version FROM (
    SELECT DISTINCT _metadata.file_name AS file_name FROM read_files('landing/snapshots',
      format => 'csv', header => true, schema => 'id INT, city STRING'))
)
KEYS (id);

CREATE OR REFRESH STREAMING TABLE null_version;

CREATE FLOW null_version_cdc AS AUTO CDC INTO null_version
FROM SNAPSHOT (
  SELECT id, city FROM read_files('landing/snapshots', format => 'csv', header => true,
    schema => 'id INT, city STRING')
  WHERE _metadata.file_name = (SELECT version FROM current_snapshot_version())
)
WITH VERSION (
  SELECT max(_metadata.file_name) AS version
  FROM read_files('landing/snapshots', format => 'csv', header => true,
    schema => 'id INT, city STRING')
  WHERE _metadata.file_name > 'z'
)
KEYS (id);
