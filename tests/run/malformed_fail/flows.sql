CREATE OR REFRESH STREAMING TABLE events
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, amount DECIMAL(10,2), note STRING');
