-- Every change of public.customers, as it was committed: the table's columns, then
-- _change_type (snapshot, insert, update, delete, truncate), _commit_lsn, _change_seq,
-- _commit_timestamp and _xid. The schema is declared so that `cdcflow validate` checks
-- the flows below without a server; without it the run asks the server.
CREATE OR REFRESH STREAMING TABLE customer_changes
COMMENT 'Changes of crm.public.customers (snapshot plus logical replication)'
AS SELECT * FROM STREAM read_postgres(
  connection => 'crm',
  table => 'public.customers',
  schema => 'id INT NOT NULL, name STRING, email STRING, city STRING, updated_at TIMESTAMP'
);

-- The current customers, ordered by the log position: no wall-clock sequencing.
CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_current AS AUTO CDC INTO customers
FROM STREAM(customer_changes)
KEYS (id)
APPLY AS DELETE WHEN _change_type = 'delete'
APPLY AS TRUNCATE WHEN _change_type = 'truncate'
SEQUENCE BY struct(_commit_lsn, _change_seq)
COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid)
STORED AS SCD TYPE 1;

-- Every version of every customer, from and to the log position that made it.
CREATE OR REFRESH STREAMING TABLE customers_history;
CREATE FLOW customers_versions AS AUTO CDC INTO customers_history
FROM STREAM(customer_changes)
KEYS (id)
APPLY AS DELETE WHEN _change_type = 'delete'
SEQUENCE BY struct(_commit_lsn, _change_seq)
COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid)
STORED AS SCD TYPE 2;
