-- Errors inside a SELECT are placed on the identifier or call they are about, and
-- an unknown name comes with the nearest known one.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, name STRING, city STRING, op STRING, seq BIGINT');
CREATE MATERIALIZED VIEW users AS SELECT id, name FROM bronze;
CREATE MATERIALIZED VIEW in_select AS SELECT nmae FROM bronze;
CREATE MATERIALIZED VIEW qualified AS SELECT b.nmae FROM bronze b;
CREATE MATERIALIZED VIEW in_where AS SELECT id FROM bronze WHERE citty = 'x';
CREATE MATERIALIZED VIEW in_group_by AS SELECT city, count(*) AS n FROM bronze GROUP BY cty;
CREATE MATERIALIZED VIEW in_order_by AS SELECT id FROM bronze ORDER BY nme;
CREATE MATERIALIZED VIEW in_join AS SELECT a.id FROM bronze a JOIN bronze b ON a.id = b.idd;
CREATE MATERIALIZED VIEW in_subquery AS SELECT id FROM bronze WHERE id NOT IN (SELECT idd FROM bronze);
CREATE MATERIALIZED VIEW no_signature AS SELECT city, sum(name) AS s FROM bronze GROUP BY city;
CREATE MATERIALIZED VIEW misspelt_function AS SELECT uper(name) AS n FROM bronze;
CREATE MATERIALIZED VIEW misspelt_dataset AS SELECT id FROM cdc_data.user;
CREATE OR REFRESH STREAMING TABLE files_group_by AS SELECT city, count(*) AS n FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, city STRING') GROUP BY id;
