CREATE OR REFRESH STREAMING TABLE target;

CREATE FLOW target_history AS AUTO CDC INTO target
FROM SNAPSHOT (
  SELECT Key, TrackingColumn, NonTrackingColumn
  FROM read_files('landing/snapshots', format => 'csv', header => true,
    schema => 'Key INT, TrackingColumn STRING, NonTrackingColumn STRING')
  WHERE CAST(replace(_metadata.file_name, '.csv', '') AS INT)
    = (SELECT version FROM current_snapshot_version())
)
WITH VERSION (
  SELECT DISTINCT CAST(replace(_metadata.file_name, '.csv', '') AS INT) AS version
  FROM read_files('landing/snapshots', format => 'csv', header => true,
    schema => 'Key INT, TrackingColumn STRING, NonTrackingColumn STRING')
  WHERE NOT EXISTS (SELECT 1 FROM last_snapshot_version())
    OR CAST(replace(_metadata.file_name, '.csv', '') AS INT)
      > (SELECT version FROM last_snapshot_version())
  ORDER BY version
  LIMIT 1
)
KEYS (Key)
STORED AS SCD TYPE 2
TRACK HISTORY ON (TrackingColumn);
