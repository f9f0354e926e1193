CREATE OR REFRESH STREAMING TABLE main.bronze.orders
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, seq BIGINT');

-- main.silver.orders: another dataset than main.bronze.orders, so no duplicate, no cycle.
CREATE OR REFRESH STREAMING TABLE orders;
APPLY CHANGES INTO LIVE.orders FROM STREAM(bronze.orders) KEYS (id) SEQUENCE BY seq;

-- The same dataset twice: main.silver.orders.
CREATE OR REFRESH STREAMING TABLE silver.orders;

-- Outside the pipeline: prod.crm.customers, and orders in another catalog.
CREATE OR REFRESH MATERIALIZED VIEW joined
AS SELECT * FROM prod.crm.customers c JOIN dev.silver.orders o ON c.id = o.id;

-- After USE SCHEMA bronze, `orders` is main.bronze.orders; `gold.orders` is nothing.
USE SCHEMA bronze;
CREATE OR REFRESH MATERIALIZED VIEW bronze_copy AS SELECT * FROM orders;
CREATE OR REFRESH MATERIALIZED VIEW gold_copy AS SELECT * FROM gold.orders;
