CREATE OR REFRESH STREAMING TABLE events
AS SELECT value FROM STREAM read_files('landing/events', format => 'text');

CREATE TEMPORARY VIEW changes AS
SELECT e.id, e.name, e._op AS op, e._position AS position
FROM (SELECT debezium(value, 'id INT, name STRING', map('mode', 'QUARANTINE')) AS e FROM STREAM(events))
WHERE e IS NOT NULL;

CREATE OR REFRESH STREAMING TABLE current;
CREATE FLOW current_cdc AS AUTO CDC INTO current FROM STREAM(changes)
  KEYS (id)
  APPLY AS DELETE WHEN op = 'd'
  SEQUENCE BY position
  COLUMNS * EXCEPT (op, position)
  STORED AS SCD TYPE 1;
