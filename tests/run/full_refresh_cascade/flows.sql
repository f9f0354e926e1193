-- A full refresh of `bronze` rewrites it: `users` (AUTO CDC from STREAM(bronze)) and
-- `names` (through a view over STREAM(bronze)) then fail until they are refreshed too;
-- `per_name` (a materialized view) recomputes. `--cascade` refreshes them in one run.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, name STRING, seq BIGINT');

CREATE OR REFRESH STREAMING TABLE users;
CREATE FLOW users_cdc AS AUTO CDC INTO users FROM STREAM(bronze) KEYS (id) SEQUENCE BY seq;

CREATE TEMPORARY VIEW named AS SELECT id, upper(name) AS name FROM STREAM(bronze);
CREATE OR REFRESH STREAMING TABLE names AS SELECT * FROM STREAM(named);

CREATE OR REFRESH MATERIALIZED VIEW per_name AS SELECT name, count(*) AS n FROM names GROUP BY name;
