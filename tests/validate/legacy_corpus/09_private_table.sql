CREATE OR REFRESH PRIVATE MATERIALIZED VIEW orders_scratch
AS SELECT customer_id, sum(amount) AS total FROM LIVE.orders_bronze GROUP BY customer_id;
