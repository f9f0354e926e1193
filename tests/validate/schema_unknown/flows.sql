-- no schema => and no landing files yet: planning is skipped with a note, not an error
CREATE OR REFRESH STREAMING TABLE bronze AS SELECT * FROM STREAM read_files('landing', format => 'json');
CREATE OR REFRESH STREAMING TABLE silver;
CREATE FLOW f AS AUTO CDC INTO silver FROM STREAM(bronze) KEYS (id) SEQUENCE BY seq;
