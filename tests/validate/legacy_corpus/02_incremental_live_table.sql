CREATE INCREMENTAL LIVE TABLE orders_bronze
AS SELECT * FROM cloud_files('${corpus.landing}/orders', 'csv', map('header', 'true', 'cloudFiles.schemaHints', 'order_id BIGINT, customer_id BIGINT, amount DOUBLE, ts BIGINT'));
