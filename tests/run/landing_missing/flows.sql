-- The landing folder does not exist (yet): each run says so in its summary instead of
-- reading 0 rows in silence; once it exists, its files are read.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landng', format => 'json', schema => 'id BIGINT, name STRING');
