-- `orders` was the pipeline's only dataset so named, stored in tables/orders. With
-- `bronze.orders` beside it, it is known (and stored) as `silver.orders`: the old
-- folder is pointed out, not silently left behind.
CREATE OR REFRESH MATERIALIZED VIEW silver.orders AS SELECT 1 AS id;
CREATE OR REFRESH MATERIALIZED VIEW bronze.orders AS SELECT 2 AS id;
