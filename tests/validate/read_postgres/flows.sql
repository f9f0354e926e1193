-- Declared columns: validate plans the flows over them and the change metadata.
CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'public.customers',
                                   schema => 'id INT NOT NULL, name STRING, city STRING');

CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customers_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  APPLY AS TRUNCATE WHEN _change_type = 'truncate'
  SEQUENCE BY struct(_commit_lsn, _change_seq)
  COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid);

-- A column the declared table does not have.
CREATE OR REFRESH STREAMING TABLE customers_by_city;
CREATE FLOW customers_by_city_cdc AS AUTO CDC INTO customers_by_city FROM STREAM(customers_changes)
  KEYS (customer_id) SEQUENCE BY _commit_lsn;

-- Without schema =>: the columns are known at run time only (a note, no error).
CREATE OR REFRESH STREAMING TABLE orders_changes AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'sales.orders');

-- A connection pipeline.yaml does not declare.
CREATE OR REFRESH STREAMING TABLE a AS
SELECT * FROM STREAM read_postgres(connection => 'crn', table => 'public.a');

-- An option read_postgres does not take, and a table name that is none.
CREATE OR REFRESH STREAMING TABLE b AS
SELECT * FROM STREAM read_postgres(connection => 'crm', tabel => 'b');
CREATE OR REFRESH STREAMING TABLE c AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'x.y.z');

-- Not a stream; and a declared column named like the metadata.
CREATE MATERIALIZED VIEW d AS SELECT * FROM read_postgres(connection => 'crm', table => 'd');
CREATE OR REFRESH STREAMING TABLE e AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'e', schema => 'id INT, _xid BIGINT');

-- A batch size that is none.
CREATE OR REFRESH STREAMING TABLE f AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'f', max_changes_per_batch => 0);

-- A materialized view reading the changes itself (never acknowledged).
CREATE MATERIALIZED VIEW g AS SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'g');
