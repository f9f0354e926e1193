-- A table in a bucket, its columns declared: validate reads no bucket, and plans.
CREATE OR REFRESH MATERIALIZED VIEW names AS SELECT id, naem FROM lake.customers;

-- Validate does not read object storage: the columns must be declared.
CREATE OR REFRESH MATERIALIZED VIEW undeclared AS SELECT * FROM lake.undeclared;

-- Only object stores (s3://, gs://, az://, abfss://) are read.
CREATE OR REFRESH MATERIALIZED VIEW gcs AS SELECT * FROM lake.gcs;

-- Credentials come from the environment, never from a URL.
CREATE OR REFRESH MATERIALIZED VIEW secret AS SELECT * FROM lake.secret;

-- Files other than a Delta table are read from local folders only.
CREATE OR REFRESH MATERIALIZED VIEW regions AS SELECT * FROM lake.regions;
