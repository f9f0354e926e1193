-- Declared columns: validate plans the flows over them and the change metadata.
CREATE OR REFRESH STREAMING TABLE order_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'shop.orders',
                                schema => 'id INT NOT NULL, status STRING, amount DECIMAL(10,2)');

CREATE OR REFRESH STREAMING TABLE orders;
CREATE FLOW orders_cdc AS AUTO CDC INTO orders FROM STREAM(order_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  APPLY AS TRUNCATE WHEN _change_type = 'truncate'
  SEQUENCE BY struct(_binlog_position, _change_seq)
  COLUMNS * EXCEPT (_change_type, _binlog_position, _change_seq, _commit_timestamp, _binlog_file);

-- PostgreSQL's metadata columns are not MySQL's.
CREATE OR REFRESH STREAMING TABLE orders_by_lsn;
CREATE FLOW orders_by_lsn_cdc AS AUTO CDC INTO orders_by_lsn FROM STREAM(order_changes)
  KEYS (id) SEQUENCE BY _commit_lsn;

-- Without schema =>: the columns are known at run time only (a note, no error); a
-- table named without its database is in the connection's.
CREATE OR REFRESH STREAMING TABLE items_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => '`order items`');

-- A PostgreSQL connection, and one pipeline.yaml does not declare.
CREATE OR REFRESH STREAMING TABLE a AS
SELECT * FROM STREAM read_mysql(connection => 'crm', table => 'public.a');
CREATE OR REFRESH STREAMING TABLE b AS
SELECT * FROM STREAM read_mysql(connection => 'shp', table => 'b');

-- No table, an option read_mysql does not take, and a table name that is none.
CREATE OR REFRESH STREAMING TABLE c AS
SELECT * FROM STREAM read_mysql(connection => 'shop', tabel => 'c');
CREATE OR REFRESH STREAMING TABLE d AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'x.y.z');

-- Not a stream; a declared column named like the metadata; a batch size that is none.
CREATE MATERIALIZED VIEW e AS SELECT * FROM read_mysql(connection => 'shop', table => 'e');
CREATE OR REFRESH STREAMING TABLE f AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'f', schema => 'id INT, _binlog_file STRING');
CREATE OR REFRESH STREAMING TABLE g AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'g', max_changes_per_batch => 0);

-- A materialized view reading the changes itself.
CREATE MATERIALIZED VIEW h AS SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'h');
