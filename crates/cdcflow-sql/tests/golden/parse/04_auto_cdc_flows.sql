-- The CDC example of the Databricks documentation, SCD type 1 and 2.
CREATE OR REFRESH STREAMING TABLE target;
CREATE FLOW flowname AS AUTO CDC INTO target
FROM stream(cdc_data.users)
KEYS (userId)
APPLY AS DELETE WHEN operation = "DELETE"
APPLY AS TRUNCATE WHEN operation = "TRUNCATE"
SEQUENCE BY sequenceNum
COLUMNS * EXCEPT (operation, sequenceNum)
STORED AS SCD TYPE 1;
CREATE FLOW scd2 AS AUTO CDC INTO target
FROM STREAM(users)
KEYS (userId)
APPLY AS DELETE WHEN operation = "DELETE"
SEQUENCE BY sequenceNum
COLUMNS * EXCEPT (operation, sequenceNum)
STORED AS SCD TYPE 2
TRACK HISTORY ON * EXCEPT (city);
-- Clauses after FROM and KEYS in any order; tuple and STRUCT sequencing.
CREATE FLOW orders_changes COMMENT 'orders from the log' AS AUTO CDC INTO silver_orders
FROM STREAM(bronze_order_changes)
KEYS (order_id, line_no)
SEQUENCE BY (commit_ts, log_position)
STORED AS SCD TYPE 2
COLUMNS (order_id, line_no, status, amount)
TRACK HISTORY ON (status)
IGNORE NULL UPDATES ON (amount)
APPLY AS DELETE WHEN operation = 'DELETE';
CREATE FLOW f2 AS AUTO CDC INTO t2 FROM STREAM b2 KEYS(id) IGNORE NULL UPDATES SEQUENCE BY STRUCT(ts, id) COLUMNS id, name;
CREATE FLOW f3 AS AUTO CDC INTO t3 FROM b3 KEYS (id) IGNORE NULL UPDATES ON * EXCEPT (name) SEQUENCE BY ts;
CREATE FLOW backfill AS AUTO CDC ONCE INTO target FROM snapshot_table KEYS (userId) SEQUENCE BY sequenceNum;
