CREATE OR REFRESH STREAMING TABLE customer_events
AS SELECT value FROM STREAM read_files('landing/customers', format => 'text');

-- Flat columns from each event; tombstones (null events) give a null struct.
CREATE TEMPORARY VIEW customer_changes AS
SELECT e.id, e.name, e.city, e._rescued_data, e._op AS op, e._position AS position, e._commit_timestamp AS committed_at
FROM (SELECT debezium(value, 'id INT, name STRING, city STRING') AS e FROM STREAM(customer_events))
WHERE e IS NOT NULL;

CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customer_changes)
  KEYS (id)
  APPLY AS DELETE WHEN op = 'd'
  APPLY AS TRUNCATE WHEN op = 't'
  SEQUENCE BY position
  COLUMNS * EXCEPT (op, position, committed_at)
  STORED AS SCD TYPE 1;

CREATE OR REFRESH STREAMING TABLE customers_history;
CREATE FLOW customers_history_cdc AS AUTO CDC INTO customers_history
  FROM (SELECT * FROM STREAM(customer_changes) WHERE op <> 't')
  KEYS (id)
  APPLY AS DELETE WHEN op = 'd'
  SEQUENCE BY position
  COLUMNS * EXCEPT (op, position, committed_at)
  STORED AS SCD TYPE 2;
