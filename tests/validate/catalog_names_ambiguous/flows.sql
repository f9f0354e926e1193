-- Without a default catalog and schema, `orders` may name either dataset.
CREATE OR REFRESH MATERIALIZED VIEW bronze.orders AS SELECT 1 AS id;
CREATE OR REFRESH MATERIALIZED VIEW silver.orders AS SELECT id FROM bronze.orders;
CREATE OR REFRESH MATERIALIZED VIEW counted AS SELECT count(*) AS n FROM orders;
-- Qualified enough, or LIVE.name when only one is named so: fine.
CREATE OR REFRESH MATERIALIZED VIEW silver_copy AS SELECT * FROM main.silver.orders;
