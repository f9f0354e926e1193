CREATE OR REFRESH STREAMING TABLE customers (
  id BIGINT NOT NULL PRIMARY KEY,
  region_id INT FOREIGN KEY REFERENCES main.ref.regions (id),
  owner STRING REFERENCES users,
  CONSTRAINT valid_id EXPECT (id > 0) ON VIOLATION DROP ROW
)
COMMENT 'no AS before the query'
SELECT * FROM STREAM(customers_raw);
CREATE MATERIALIZED VIEW m
WITH big AS (SELECT * FROM customers WHERE id > 10) SELECT count(*) AS n FROM big;
