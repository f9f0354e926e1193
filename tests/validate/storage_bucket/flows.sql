-- Landing files into a table kept in the bucket: fine.
CREATE OR REFRESH STREAMING TABLE orders
AS SELECT * FROM STREAM read_files('landing/orders', format => 'json', schema => 'id BIGINT, status STRING');

-- A database's change log: its slot's records are kept in the bucket too.
CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_postgres(connection => 'crm', table => 'public.customers',
                                   schema => 'id INT NOT NULL, name STRING');
