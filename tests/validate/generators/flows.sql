CREATE OR REFRESH MATERIALIZED VIEW orders AS
SELECT * FROM VALUES (1, 10, array('a', 'b')) AS t(id, cust, items);
CREATE OR REFRESH MATERIALIZED VIEW customers AS SELECT * FROM VALUES (10, 'Ada') AS t(cid, name);

-- Fine: the generator names its relation, which the join keeps.
CREATE OR REFRESH MATERIALIZED VIEW joined AS
SELECT o.id, c.name, p, item FROM orders o LEFT JOIN customers c ON o.cust = c.cid
LATERAL VIEW posexplode(o.items) t AS p, item;

-- Over a join, an unqualified generator does not say which relation it reads.
CREATE OR REFRESH MATERIALIZED VIEW unqualified AS
SELECT id, item FROM orders o JOIN customers c ON o.cust = c.cid LATERAL VIEW explode(items) t AS item;

-- The side of a LEFT JOIN that the join makes null.
CREATE OR REFRESH MATERIALIZED VIEW null_side AS
SELECT c.name, item FROM customers c LEFT JOIN orders o ON o.cust = c.cid LATERAL VIEW explode(o.items) t AS item;
