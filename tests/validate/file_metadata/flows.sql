CREATE OR REFRESH STREAMING TABLE raw
AS SELECT *, _metadata.file_name AS file, input_file_name() AS path
FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT');

-- Valid: a direct file reference, its schema from the declaration-free read.
CREATE OR REFRESH MATERIALIZED VIEW direct AS SELECT * FROM parquet.`landing/p`;

-- The column has no field `file_owner`.
CREATE OR REFRESH MATERIALIZED VIEW owners AS
SELECT _metadata.file_owner FROM read_files('landing', format => 'json', schema => 'id BIGINT');

-- A dataset is no file source: it has no _metadata.
CREATE OR REFRESH MATERIALIZED VIEW from_table AS SELECT id, _metadata.file_name FROM raw;
CREATE OR REFRESH MATERIALIZED VIEW from_table_fn AS SELECT id, input_file_name() AS f FROM raw;

-- Kept as a column by the table that read the files, it is that table's column.
CREATE OR REFRESH MATERIALIZED VIEW kept
AS SELECT *, _metadata FROM read_files('landing', format => 'json', schema => 'id BIGINT');
CREATE OR REFRESH MATERIALIZED VIEW from_kept AS SELECT id, _metadata.file_name FROM kept;
