-- Views between bronze and the flows that read it as a stream: each batch runs the
-- view's query over the rows bronze appended since that flow's last batch, and a run
-- that finds nothing new commits nothing.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, name STRING, seq BIGINT');

CREATE TEMPORARY VIEW keyed AS SELECT * FROM STREAM(bronze) WHERE id IS NOT NULL;
CREATE OR REFRESH STREAMING TABLE users;
CREATE FLOW users_cdc AS AUTO CDC INTO users FROM STREAM(keyed) KEYS (id) SEQUENCE BY seq;

CREATE PRIVATE VIEW named AS SELECT id, upper(name) AS name FROM STREAM(bronze);
CREATE OR REFRESH STREAMING TABLE names AS SELECT * FROM STREAM(named);
