-- The source has no change log: each run reads the whole export and keeps `target`
-- equal to it, with the history of every key.
CREATE OR REFRESH STREAMING TABLE target;

CREATE FLOW target_snapshots AS AUTO CDC INTO target
FROM SNAPSHOT (
  SELECT * FROM read_files('landing/mytable', format => 'csv', header => true,
    schema => 'Key INT, Value STRING')
)
KEYS (Key)
STORED AS SCD TYPE 2;
