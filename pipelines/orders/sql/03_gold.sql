-- Gold: open orders per status, from the current versions only.
CREATE OR REFRESH MATERIALIZED VIEW gold_orders_by_status
AS SELECT status, count(*) AS orders, sum(amount) AS total_amount
FROM silver_orders_history
WHERE __END_AT IS NULL
GROUP BY status;
