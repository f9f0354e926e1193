CREATE OR REFRESH STREAMING TABLE changes
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, name STRING, code STRING, seq BIGINT');
CREATE OR REFRESH MATERIALIZED VIEW codes AS SELECT 'a' AS code, 'Alpha' AS label;

-- Valid: a stream joined with a table read whole.
CREATE OR REFRESH STREAMING TABLE good;
CREATE FLOW good_cdc AS AUTO CDC INTO good
FROM (SELECT c.id, k.label, c.seq FROM STREAM(changes) c JOIN codes k USING (code))
KEYS (id) SEQUENCE BY seq;

-- An unknown column inside the query, where it is written.
CREATE OR REFRESH STREAMING TABLE t1;
CREATE FLOW f1 AS AUTO CDC INTO t1
FROM (SELECT id, nmae, seq FROM STREAM(changes))
KEYS (id) SEQUENCE BY seq;

-- An unknown dataset inside the query.
CREATE OR REFRESH STREAMING TABLE t2;
APPLY CHANGES INTO t2
FROM (SELECT * FROM STREAM(chnages))
KEYS (id) SEQUENCE BY seq;

-- KEYS against the query's columns.
CREATE OR REFRESH STREAMING TABLE t3;
CREATE FLOW f3 AS AUTO CDC INTO t3
FROM (SELECT id AS customer_id, seq FROM STREAM(LIVE.changes))
KEYS (id) SEQUENCE BY seq;

-- A QUALIFY over a stream would dedup each batch on its own.
CREATE OR REFRESH STREAMING TABLE t4;
CREATE FLOW f4 AS AUTO CDC INTO t4
FROM (SELECT * FROM STREAM(changes)
      QUALIFY row_number() OVER (PARTITION BY id ORDER BY seq DESC) = 1)
KEYS (id) SEQUENCE BY seq;

-- A join of two streams.
CREATE OR REFRESH STREAMING TABLE t5;
CREATE FLOW f5 AS AUTO CDC INTO t5
FROM (SELECT a.id, b.name, a.seq FROM STREAM(changes) a JOIN STREAM(changes) b ON a.id = b.id)
KEYS (id) SEQUENCE BY seq;

-- The query's parenthesis left open.
CREATE OR REFRESH STREAMING TABLE t6;
CREATE FLOW f6 AS AUTO CDC INTO t6
FROM (SELECT * FROM STREAM(changes)
KEYS (id) SEQUENCE BY seq;
