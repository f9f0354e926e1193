-- Names ignore case and keep their declared case: the columns are declared
-- `userId, operation, sequenceNum`; the flows name them in other cases, as Spark allows,
-- and the stored tables keep the declared names.
CREATE OR REFRESH STREAMING TABLE users_cdc
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'userId BIGINT, Name STRING, operation STRING, sequenceNum BIGINT');

CREATE OR REFRESH STREAMING TABLE users;

APPLY CHANGES INTO LIVE.users FROM STREAM(LIVE.users_cdc)
  KEYS (USERID)
  WHERE USERID > 0
  APPLY AS DELETE WHEN OPERATION = 'DELETE'
  SEQUENCE BY SEQUENCENUM
  COLUMNS * EXCEPT (OPERATION, sequencenum);

CREATE OR REFRESH MATERIALIZED VIEW user_names
AS SELECT U.USERID, lower(NAME) AS lower_name FROM LIVE.Users u WHERE UserId < 10 ORDER BY userid;
