CREATE TEMPORARY VIEW changes
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, name STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE users;
CREATE FLOW users_cdc AS AUTO CDC INTO users FROM STREAM(changes) KEYS (id) SEQUENCE BY seq;
