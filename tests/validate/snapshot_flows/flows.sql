CREATE OR REFRESH MATERIALIZED VIEW exports AS
SELECT 1 AS snapshot, 1 AS id, 'a' AS name;
CREATE OR REFRESH STREAMING TABLE changes
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, name STRING, seq BIGINT');

-- Valid: periodic, and versioned.
CREATE OR REFRESH STREAMING TABLE good;
CREATE FLOW good_snapshots AS AUTO CDC INTO good
FROM SNAPSHOT (SELECT id, name FROM exports) KEYS (id) STORED AS SCD TYPE 2;
CREATE OR REFRESH STREAMING TABLE versioned;
CREATE FLOW versioned_snapshots AS AUTO CDC INTO versioned
FROM SNAPSHOT (SELECT id, name FROM exports WHERE snapshot = (SELECT version FROM current_snapshot_version()))
WITH VERSION (SELECT min(snapshot) AS version FROM exports
  WHERE NOT EXISTS (SELECT 1 FROM last_snapshot_version()) OR snapshot > (SELECT version FROM last_snapshot_version())
  HAVING count(*) > 0)
KEYS (id);

-- last_snapshot_version() outside WITH VERSION.
CREATE OR REFRESH STREAMING TABLE t1;
CREATE FLOW f1 AS AUTO CDC INTO t1
FROM SNAPSHOT (SELECT * FROM exports WHERE snapshot > (SELECT version FROM last_snapshot_version()))
KEYS (id);

-- current_snapshot_version() without WITH VERSION.
CREATE OR REFRESH STREAMING TABLE t2;
CREATE FLOW f2 AS AUTO CDC INTO t2
FROM SNAPSHOT (SELECT * FROM exports WHERE snapshot = (SELECT version FROM current_snapshot_version()))
KEYS (id);

-- A snapshot read as a stream.
CREATE OR REFRESH STREAMING TABLE t3;
CREATE FLOW f3 AS AUTO CDC INTO t3
FROM SNAPSHOT (SELECT id, name FROM STREAM(changes))
KEYS (id);

-- A version query of two columns.
CREATE OR REFRESH STREAMING TABLE t4;
CREATE FLOW f4 AS AUTO CDC INTO t4
FROM SNAPSHOT (SELECT id, name FROM exports)
WITH VERSION (SELECT snapshot, id FROM exports)
KEYS (id);

-- Another flow into a snapshot target; an unknown key.
CREATE FLOW f5 AS AUTO CDC INTO good
FROM STREAM(changes) KEYS (id) SEQUENCE BY seq STORED AS SCD TYPE 2;
CREATE OR REFRESH STREAMING TABLE t6;
CREATE FLOW f6 AS AUTO CDC INTO t6
FROM SNAPSHOT (SELECT id, name FROM exports) KEYS (idd);

-- last_snapshot_version() in an ordinary query.
CREATE OR REFRESH MATERIALIZED VIEW m7 AS SELECT * FROM last_snapshot_version();
