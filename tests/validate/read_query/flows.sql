-- Declared columns: validate plans the flows over them.
CREATE OR REFRESH STREAMING TABLE customers_raw AS
SELECT * FROM STREAM read_query(connection => 'shop', query => 'SELECT * FROM customers',
                                watermark => 'updated_at',
                                schema => 'id INT NOT NULL, name STRING, updated_at TIMESTAMP');

CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customers_raw)
  KEYS (id) SEQUENCE BY updated_at;

-- A column the declared result does not have.
CREATE OR REFRESH STREAMING TABLE by_city;
CREATE FLOW by_city_cdc AS AUTO CDC INTO by_city FROM STREAM(customers_raw)
  KEYS (city) SEQUENCE BY updated_at;

-- Without schema =>: the columns are known at run time only (a note, no error).
CREATE OR REFRESH STREAMING TABLE orders_raw AS
SELECT * FROM STREAM read_query(connection => 'erp', query => 'SELECT * FROM orders', watermark => 'changed_at', overlap_seconds => 0,
                                keys => 'order_id, line_no', max_rows_per_batch => 5000);

-- No watermark; an option read_query does not take; an overlap that is none.
CREATE OR REFRESH STREAMING TABLE a AS
SELECT * FROM STREAM read_query(connection => 'erp', query => 'SELECT 1');
CREATE OR REFRESH STREAMING TABLE b AS
SELECT * FROM STREAM read_query(connection => 'erp', query => 'SELECT 1', watermark => 'x', overlapp => 5);
CREATE OR REFRESH STREAMING TABLE c AS
SELECT * FROM STREAM read_query(connection => 'erp', query => 'SELECT 1', watermark => 'x', overlap_seconds => 'soon');

-- A watermark the declared result does not have; an unknown connection.
CREATE OR REFRESH STREAMING TABLE d AS
SELECT * FROM STREAM read_query(connection => 'shop', query => 'SELECT 1', watermark => 'ts', schema => 'id INT');
CREATE OR REFRESH STREAMING TABLE e AS
SELECT * FROM STREAM read_query(connection => 'shpo', query => 'SELECT 1', watermark => 'x');

-- Not a stream; read_postgres on a MariaDB connection.
CREATE MATERIALIZED VIEW f AS SELECT * FROM read_query(connection => 'erp', query => 'SELECT 1', watermark => 'x');
CREATE OR REFRESH STREAMING TABLE g AS
SELECT * FROM STREAM read_postgres(connection => 'shop', table => 'customers');

-- A batch bound that is none; keys that are not a list of names, or name one twice; a
-- key the declared result does not have.
CREATE OR REFRESH STREAMING TABLE h AS
SELECT * FROM STREAM read_query(connection => 'erp', query => 'SELECT 1', watermark => 'x', max_rows_per_batch => 0);
CREATE OR REFRESH STREAMING TABLE i AS
SELECT * FROM STREAM read_query(connection => 'erp', query => 'SELECT 1', watermark => 'x', max_rows_per_batch => '1e3');
CREATE OR REFRESH STREAMING TABLE j AS
SELECT * FROM STREAM read_query(connection => 'erp', query => 'SELECT 1', watermark => 'x', keys => 'id name');
CREATE OR REFRESH STREAMING TABLE k AS
SELECT * FROM STREAM read_query(connection => 'erp', query => 'SELECT 1', watermark => 'x', keys => 'id, ID');
CREATE OR REFRESH STREAMING TABLE l AS
SELECT * FROM STREAM read_query(connection => 'shop', query => 'SELECT 1', watermark => 'id', keys => 'id, code', schema => 'id INT');
