-- No schema =>: the schema is inferred from the landing files, so column checks run.
CREATE OR REFRESH STREAMING TABLE bronze AS SELECT * FROM STREAM read_files('landing', format => 'json');
CREATE OR REFRESH STREAMING TABLE silver;
CREATE FLOW f AS AUTO CDC INTO silver FROM STREAM(bronze)
  KEYS (userid)
  APPLY AS DELETE WHEN operation = 'DELETE'
  SEQUENCE BY sequence_num
  COLUMNS * EXCEPT (operation, sequenceNum);
