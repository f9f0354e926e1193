CREATE OR REFRESH MATERIALIZED VIEW src AS SELECT 1 AS id, 'x' AS name, 2.5 AS amount;
-- A condition on the rows, and two that are none.
CREATE OR REFRESH MATERIALIZED VIEW checked (
  CONSTRAINT positive EXPECT (amount > 0) ON VIOLATION DROP ROW,
  CONSTRAINT not_a_condition EXPECT (amount + 1),
  CONSTRAINT misspelt EXPECT (amuont > 0) ON VIOLATION FAIL UPDATE
)
AS SELECT * FROM src;
CREATE OR REFRESH STREAMING TABLE kept (id BIGINT, name STRING)
TBLPROPERTIES ('pipelines.cdc.tombstoneGCThresholdInSeconds' = '2 days', 'pipelines.reset.allowed' = 'flase');
CREATE FLOW kept_cdc AS AUTO CDC INTO kept FROM STREAM(src) KEYS (id) SEQUENCE BY id COLUMNS id, name;
CREATE OR REFRESH STREAMING TABLE fine (id BIGINT, name STRING)
TBLPROPERTIES ('pipelines.cdc.tombstoneGCThresholdInSeconds' = '3600', 'delta.enableDeletionVectors' = 'FALSE');
CREATE FLOW fine_cdc AS AUTO CDC INTO fine FROM STREAM(src) KEYS (id) SEQUENCE BY id COLUMNS id, name;
