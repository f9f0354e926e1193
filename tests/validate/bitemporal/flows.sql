-- Bitemporal targets (Databricks Beta) are named and refused, not a syntax error.
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('landing', format => 'json',
  schema => 'id BIGINT, name STRING, valid_from TIMESTAMP, recorded_at TIMESTAMP');

CREATE OR REFRESH STREAMING TABLE people;
CREATE FLOW people_cdc AS AUTO CDC INTO people FROM STREAM(bronze)
  KEYS (id)
  SEQUENCE BY valid_from
  SYSTEM SEQUENCE BY recorded_at
  STORED AS BITEMPORAL;

CREATE OR REFRESH STREAMING TABLE places;
CREATE FLOW places_cdc AS AUTO CDC INTO places FROM STREAM(bronze)
  KEYS (id)
  SEQUENCE BY valid_from
  SYSTEM SEQUENCE BY recorded_at;

-- The targets still exist: reading them is no second error.
CREATE OR REFRESH MATERIALIZED VIEW names AS SELECT name FROM people;
