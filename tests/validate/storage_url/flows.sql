-- A landing folder is a local folder or an object-store prefix, which the run fetches.
CREATE OR REFRESH STREAMING TABLE orders
AS SELECT * FROM STREAM read_files('s3://lake/landing/orders', format => 'json', schema => 'id BIGINT');

-- Any other URL would be taken for a local folder.
CREATE OR REFRESH STREAMING TABLE returns
AS SELECT * FROM STREAM read_files('hdfs://lake/landing/returns', format => 'json', schema => 'id BIGINT');

-- list_files lists folders of this machine only.
CREATE OR REFRESH MATERIALIZED VIEW exports AS SELECT path FROM list_files('s3://lake/exports');

-- Columns are not inferred from a bucket: they are declared.
CREATE OR REFRESH STREAMING TABLE refunds
AS SELECT * FROM STREAM read_files('gs://lake/landing/refunds', format => 'json');
