CREATE OR REFRESH STREAMING TABLE users;

CREATE FLOW users_cdc AS AUTO CDC INTO users
FROM SNAPSHOT (
  SELECT userId, city
  FROM read_files('landing/users', format => 'csv', header => true,
    schema => 'userId INT, city STRING')
)
KEYS (userId);
