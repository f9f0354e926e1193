CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json');
