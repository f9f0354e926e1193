-- Silver: every version of every order. A change log can commit several changes in
-- one transaction, so the log position breaks ties of the commit timestamp.
CREATE OR REFRESH STREAMING TABLE silver_orders_history
COMMENT 'Order versions with __START_AT/__END_AT';

CREATE FLOW orders_changes AS AUTO CDC INTO silver_orders_history
FROM STREAM(bronze_order_changes)
KEYS (order_id)
APPLY AS DELETE WHEN operation = 'DELETE'
SEQUENCE BY (commit_ts, log_position)
COLUMNS * EXCEPT (operation, commit_ts, log_position)
STORED AS SCD TYPE 2
TRACK HISTORY ON (status, amount);
