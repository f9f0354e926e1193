-- A landing path that does not exist is a warning (files may land there later): the
-- misspelt `ordrs` would read nothing, run after run.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landing/ordrs', format => 'json', schema => 'id BIGINT, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE legacy
AS SELECT * FROM cloud_files('landing/legacy', 'json', map('cloudFiles.schemaHints', 'id BIGINT'));
CREATE OR REFRESH STREAMING TABLE present
AS SELECT * FROM STREAM read_files('landing/orders', format => 'json', schema => 'id BIGINT, seq BIGINT');
