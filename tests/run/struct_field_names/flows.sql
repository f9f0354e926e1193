CREATE OR REFRESH MATERIALIZED VIEW people AS
SELECT * FROM VALUES (1, 'Ada', 'London'), (2, 'Alan', 'Wilmslow') AS t(id, name, city);

CREATE OR REFRESH MATERIALIZED VIEW fields AS
SELECT e.id, e.name, t.e.city, p.id AS person
FROM (SELECT named_struct('id', id, 'name', name, 'city', city) AS e, id FROM people) t
JOIN people p ON t.id = p.id;

-- A view's names are those its readers see: `id` and `name` here are the fields'.
CREATE TEMPORARY VIEW decoded AS
SELECT r.id, r.name FROM (SELECT from_json('{"id": 7, "name": "Grace"}', 'id INT, name STRING') AS r);

CREATE OR REFRESH MATERIALIZED VIEW from_view AS SELECT id, name FROM decoded;
