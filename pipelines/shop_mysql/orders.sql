-- Every change of cdcflow_example_shop.orders, as it was committed: the table's
-- columns, then _change_type (snapshot, insert, update, delete, truncate),
-- _binlog_position, _change_seq, _commit_timestamp and _binlog_file. The schema is
-- declared so that `cdcflow validate` checks the flows below without a server; without
-- it the run asks the server.
CREATE OR REFRESH STREAMING TABLE order_changes
COMMENT 'Changes of shop.orders (snapshot plus the binary log)'
AS SELECT * FROM STREAM read_mysql(
  connection => 'shop',
  table => 'orders',
  schema => 'id INT NOT NULL, customer STRING, status STRING, amount DECIMAL(10,2), placed_at TIMESTAMP_NTZ'
);

-- The current orders, ordered by the log position: no wall-clock sequencing.
CREATE OR REFRESH STREAMING TABLE orders;
CREATE FLOW orders_current AS AUTO CDC INTO orders
FROM STREAM(order_changes)
KEYS (id)
APPLY AS DELETE WHEN _change_type = 'delete'
APPLY AS TRUNCATE WHEN _change_type = 'truncate'
SEQUENCE BY struct(_binlog_position, _change_seq)
COLUMNS * EXCEPT (_change_type, _binlog_position, _change_seq, _commit_timestamp, _binlog_file)
STORED AS SCD TYPE 1;

-- Every version of every order, from and to the log position that made it.
CREATE OR REFRESH STREAMING TABLE orders_history;
CREATE FLOW orders_versions AS AUTO CDC INTO orders_history
FROM STREAM(order_changes)
KEYS (id)
APPLY AS DELETE WHEN _change_type = 'delete'
SEQUENCE BY struct(_binlog_position, _change_seq)
COLUMNS * EXCEPT (_change_type, _binlog_position, _change_seq, _commit_timestamp, _binlog_file)
STORED AS SCD TYPE 2;
