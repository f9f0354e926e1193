CREATE OR REFRESH STREAMING TABLE prices
AS SELECT * FROM STREAM read_files('landing', format => 'csv', header => true, schema => 'sku STRING, price DOUBLE, day DATE');
