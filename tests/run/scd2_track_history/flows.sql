-- The Databricks AUTO CDC documentation example: users change feed as JSON lines.
CREATE OR REFRESH STREAMING TABLE users_cdc
AS SELECT * FROM STREAM read_files('landing/users', format => 'json',
  schema => 'userId BIGINT, name STRING, city STRING, operation STRING, sequenceNum BIGINT');

CREATE OR REFRESH STREAMING TABLE users;

CREATE FLOW users_flow AS AUTO CDC INTO users
FROM STREAM(users_cdc)
KEYS (userId)
APPLY AS DELETE WHEN operation = 'DELETE'
SEQUENCE BY sequenceNum
COLUMNS * EXCEPT (operation, sequenceNum)
STORED AS SCD TYPE 2
TRACK HISTORY ON * EXCEPT (city);
