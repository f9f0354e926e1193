CREATE OR REFRESH MATERIALIZED VIEW base AS SELECT 1 AS id, 'x' AS name, 2 AS n;
CREATE OR REFRESH MATERIALIZED VIEW paren AS SELECT b1.id, b2.name FROM (base) b1 JOIN (LIVE.base) b2 USING (id);
CREATE OR REFRESH MATERIALIZED VIEW except_qualified AS SELECT b.* EXCEPT (b.n) FROM base b;
CREATE OR REFRESH MATERIALIZED VIEW structs AS
SELECT struct(id AS i, name nm, n * 10 tens, CASE WHEN n > 1 THEN 'big' ELSE 'small' END size) AS s
FROM base;
CREATE OR REFRESH MATERIALIZED VIEW ranged AS SELECT * FROM range(1, 4);
CREATE OR REFRESH MATERIALIZED VIEW ranged_step AS SELECT id * 2 AS twice FROM range(-2, 5, 3);
CREATE OR REFRESH MATERIALIZED VIEW mapped (id BIGINT, attrs MAP<STRING, INT>, nested MAP<STRING, ARRAY<INT>>)
AS SELECT 1 AS id, map('a', 1) AS attrs, map('b', array(1, 2)) AS nested;
CREATE OR REFRESH MATERIALIZED VIEW divided
AS SELECT 7 DIV 2 AS q, -7 div 2 AS neg, 7.9 DIV 2 AS dec, 1 + 9 DIV 4 * 2 AS prec, n DIV 2 AS col FROM base;
CREATE OR REFRESH MATERIALIZED VIEW nested_maps
  (id BIGINT, a ARRAY<MAP<STRING, INT>>, s STRUCT<x: MAP<STRING, BIGINT>, y: INT>)
AS SELECT 1 AS id, array(map('a', 1)) AS a, named_struct('x', map('k', 2), 'y', 3) AS s;
