CREATE OR REFRESH STREAMING TABLE changes
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT NOT NULL COMMENT "the customer", city STRING COMMENT "where they live", op STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE people;
CREATE FLOW people_cdc AS AUTO CDC INTO people FROM STREAM(changes) KEYS (id)
APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op, seq);
CREATE OR REFRESH MATERIALIZED VIEW per_city AS SELECT city, count(*) AS n FROM people GROUP BY city;
