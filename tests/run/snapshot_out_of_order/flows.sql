CREATE OR REFRESH STREAMING TABLE accounts;

CREATE TEMPORARY VIEW exports AS
SELECT *, _metadata.file_name AS file
FROM read_files('landing/exports', format => 'csv', header => true,
  schema => 'snapshot BIGINT, id INT, balance INT');

CREATE FLOW accounts_snapshots AS AUTO CDC INTO accounts
FROM SNAPSHOT (
  SELECT id, balance FROM exports
  WHERE snapshot = (SELECT version FROM current_snapshot_version())
)
WITH VERSION (
  SELECT snapshot AS version FROM exports
  WHERE file = (SELECT max(file) FROM exports)
    AND (NOT EXISTS (SELECT 1 FROM last_snapshot_version())
      OR snapshot <> (SELECT version FROM last_snapshot_version()))
  LIMIT 1
)
KEYS (id);
