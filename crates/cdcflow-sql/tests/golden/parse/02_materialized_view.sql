CREATE OR REFRESH MATERIALIZED VIEW daily_totals
COMMENT "Totals per day"
AS SELECT order_date, sum(amount) AS total FROM silver_orders GROUP BY order_date;
CREATE MATERIALIZED VIEW mv_with_expectation (
  CONSTRAINT positive EXPECT (total > 0) ON VIOLATION DROP ROW
) CLUSTER BY (order_date)
AS SELECT * FROM daily_totals;
CREATE OR REFRESH PRIVATE MATERIALIZED VIEW joined AS
SELECT o.order_id, c.name FROM LIVE.silver_orders o JOIN silver_customers c ON o.customer_id = c.id;
CREATE MATERIALIZED VIEW with_cte AS WITH t AS (SELECT 1 AS x) SELECT * FROM t;
