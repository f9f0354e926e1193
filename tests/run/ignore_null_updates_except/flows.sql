-- IGNORE NULL UPDATES ON * EXCEPT (…) selects among the target's columns: `op` and
-- `seq`, left out by COLUMNS, are not among them. A null `city` keeps the stored city;
-- a null `name` (excepted) overwrites it.
CREATE OR REFRESH STREAMING TABLE changes
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, name STRING, city STRING, op STRING, seq BIGINT');

CREATE OR REFRESH STREAMING TABLE people;

CREATE FLOW people_cdc AS AUTO CDC INTO people FROM STREAM(changes)
  KEYS (id)
  IGNORE NULL UPDATES ON * EXCEPT (name)
  APPLY AS DELETE WHEN op = 'D'
  SEQUENCE BY seq
  COLUMNS * EXCEPT (op, seq);
