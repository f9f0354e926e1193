-- Spark generators as Databricks reads them: posexplode gives each element with its
-- 0-based position; LATERAL VIEW applies to a join too.
CREATE OR REFRESH MATERIALIZED VIEW orders AS
SELECT * FROM VALUES (1, 10, array('a', 'b')), (2, 20, array()), (3, 10, CAST(NULL AS ARRAY<STRING>)) AS t(id, cust, items);
CREATE OR REFRESH MATERIALIZED VIEW customers AS SELECT * FROM VALUES (10, 'Ada'), (20, 'Bo') AS t(cid, name);
CREATE OR REFRESH MATERIALIZED VIEW pos_items AS SELECT id, posexplode(items) FROM orders;
CREATE OR REFRESH MATERIALIZED VIEW pos_named AS SELECT id, posexplode(items) AS (p, item) FROM orders;
CREATE OR REFRESH MATERIALIZED VIEW lv_pos AS SELECT o.id, t.p, t.item FROM orders o LATERAL VIEW posexplode(o.items) t AS p, item;
CREATE OR REFRESH MATERIALIZED VIEW lv_pos_outer AS SELECT o.id, p, item FROM orders o LATERAL VIEW OUTER posexplode(o.items) t AS p, item;
CREATE OR REFRESH MATERIALIZED VIEW lv_join AS SELECT o.id, c.name, item FROM orders o JOIN customers c ON o.cust = c.cid LATERAL VIEW explode(o.items) t AS item;
CREATE OR REFRESH MATERIALIZED VIEW lv_join_pos AS SELECT o.id, c.name, p, item FROM customers c JOIN orders o ON o.cust = c.cid LATERAL VIEW posexplode(o.items) t AS p, item;
