CREATE OR REFRESH MATERIALIZED VIEW base AS SELECT 1 AS id, 'x' AS name, 2 AS n;
CREATE OR REFRESH MATERIALIZED VIEW paren AS SELECT b1.id, b2.name FROM (base) b1 JOIN (LIVE.base) b2 USING (id);
CREATE OR REFRESH MATERIALIZED VIEW except_qualified AS SELECT b.* EXCEPT (b.n) FROM base b;
CREATE OR REFRESH MATERIALIZED VIEW structs AS
SELECT struct(id AS i, name nm, n * 10 tens, CASE WHEN n > 1 THEN 'big' ELSE 'small' END size) AS s
FROM base;
CREATE OR REFRESH MATERIALIZED VIEW ranged AS SELECT * FROM range(1, 4);
CREATE OR REFRESH MATERIALIZED VIEW ranged_step AS SELECT id * 2 AS twice FROM range(-2, 5, 3);
CREATE OR REFRESH STREAMING TABLE landed
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT NOT NULL COMMENT "the customer", city STRING COMMENT "home"');
