CREATE OR REFRESH STREAMING TABLE snapshot
AS SELECT * FROM STREAM read_files('landing/snapshot', format => 'csv', header => true, schema => 'id BIGINT, name STRING, ts BIGINT');
CREATE OR REFRESH STREAMING TABLE changes
AS SELECT * FROM STREAM read_files('landing/changes', format => 'json', schema => 'id BIGINT, name STRING, op STRING, ts BIGINT');
CREATE OR REFRESH STREAMING TABLE accounts;
CREATE FLOW backfill AS AUTO CDC ONCE INTO accounts FROM snapshot KEYS (id) SEQUENCE BY ts;
CREATE FLOW live AS AUTO CDC INTO accounts FROM STREAM(changes) KEYS (id)
APPLY AS DELETE WHEN op = 'D' SEQUENCE BY ts COLUMNS * EXCEPT (op);
