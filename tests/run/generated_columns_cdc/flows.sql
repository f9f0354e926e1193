CREATE OR REFRESH STREAMING TABLE changes
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, price DECIMAL(10,2), qty INT, seq BIGINT');

CREATE OR REFRESH STREAMING TABLE lines (
  id BIGINT, price DECIMAL(10,2), qty INT, seq BIGINT,
  total DECIMAL(12,2) GENERATED ALWAYS AS (price * qty)
);
CREATE FLOW lines_cdc AS AUTO CDC INTO lines FROM STREAM(changes)
KEYS (id) IGNORE NULL UPDATES SEQUENCE BY seq;

CREATE OR REFRESH STREAMING TABLE line_history (
  id BIGINT, price DECIMAL(10,2), qty INT, seq BIGINT, __START_AT BIGINT, __END_AT BIGINT,
  total DECIMAL(12,2) GENERATED ALWAYS AS (price * qty),
  open BOOLEAN GENERATED ALWAYS AS (__END_AT IS NULL)
);
CREATE FLOW line_history_cdc AS AUTO CDC INTO line_history FROM STREAM(changes)
KEYS (id) SEQUENCE BY seq STORED AS SCD TYPE 2;

-- A reader sees the computed column as any other.
CREATE OR REFRESH MATERIALIZED VIEW revenue AS SELECT sum(total) AS revenue FROM lines;
