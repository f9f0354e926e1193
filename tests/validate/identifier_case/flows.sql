-- Names ignore case, as in Spark, and keep the case they were declared with: every
-- reference below resolves, except the two that match two columns differing only in case.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'userId BIGINT, name STRING, operation STRING, sequenceNum BIGINT, Addr STRUCT<City: STRING>');

CREATE OR REFRESH STREAMING TABLE users;
APPLY CHANGES INTO LIVE.users FROM STREAM(LIVE.bronze)
  KEYS (USERID)
  WHERE UserID IS NOT NULL
  APPLY AS DELETE WHEN OPERATION = 'DELETE'
  SEQUENCE BY SEQUENCENUM
  COLUMNS * EXCEPT (OPERATION, SEQUENCENUM);

CREATE OR REFRESH MATERIALIZED VIEW names
AS SELECT B.USERID, upper(Name) AS NAME, addr.city AS city FROM LIVE.Bronze b WHERE SequenceNum > 0 ORDER BY userid;

-- Two columns differing only in case: a reference written as neither is ambiguous
-- (and a table cannot store both: duplicate_output_column).
CREATE OR REFRESH STREAMING TABLE twins
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, Id BIGINT, seq BIGINT');

CREATE OR REFRESH MATERIALIZED VIEW twin_ids AS SELECT id, Id AS other, ID AS which FROM twins;

CREATE OR REFRESH STREAMING TABLE twin_state;
CREATE FLOW twins_cdc AS AUTO CDC INTO twin_state FROM STREAM(twins) KEYS (iD) SEQUENCE BY seq;
