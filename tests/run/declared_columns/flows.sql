CREATE OR REFRESH STREAMING TABLE people (
  id BIGINT NOT NULL,
  age INT,
  city STRING COMMENT 'home town',
  note STRING
)
AS SELECT city, age, id FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, age STRING, city STRING');

CREATE OR REFRESH STREAMING TABLE strict (id BIGINT NOT NULL, city STRING)
AS SELECT id, city FROM STREAM read_files('strict', format => 'json', schema => 'id BIGINT, city STRING');

CREATE OR REFRESH STREAMING TABLE changes
AS SELECT * FROM STREAM read_files('cdc', format => 'json', schema => 'id BIGINT, name STRING, op STRING, seq BIGINT');

CREATE OR REFRESH STREAMING TABLE hist (id BIGINT, name STRING, __START_AT BIGINT, __END_AT BIGINT);
CREATE FLOW hist_cdc AS AUTO CDC INTO hist FROM STREAM(changes) KEYS (id) SEQUENCE BY seq
COLUMNS * EXCEPT (op, seq) STORED AS SCD TYPE 2;
