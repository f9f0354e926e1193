-- A definition that does not parse is reported once, where it breaks: the
-- datasets reading it are not reported as unknown on top.
CREATE OR REFRESH STREAMING TABLE changes
AS SELECT * FROM STREAM read_files('landing', format => 'json') WHERE;
CREATE OR REFRESH MATERIALIZED VIEW counts AS SELECT count(*) AS n FROM changes;
CREATE OR REFRESH MATERIALIZED VIEW other AS SELECT * FROM nowhere;
CREATE OR REFRESH STREAMING TABLE people;
CREATE FLOW people_cdc AS AUTO CDC INTO people FROM STREAM(changes) KEYS (id)
SEQUENCE BY seq;
