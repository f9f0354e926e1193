-- Landing folders are local folders.
CREATE OR REFRESH STREAMING TABLE orders
AS SELECT * FROM STREAM read_files('s3://lake/landing/orders', format => 'json', schema => 'id BIGINT');

-- list_files lists folders of this machine too.
CREATE OR REFRESH MATERIALIZED VIEW exports AS SELECT path FROM list_files('s3://lake/exports');
