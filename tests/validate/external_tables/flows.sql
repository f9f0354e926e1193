-- The Delta table's columns come from its log: `emial` is not one of them.
CREATE OR REFRESH MATERIALIZED VIEW contacts AS SELECT id, emial FROM prod.crm.customers;

-- CSV files declare no types: the declaration needs a schema.
CREATE OR REFRESH MATERIALIZED VIEW regions AS SELECT * FROM prod.crm.regions;

-- No Delta table where the declaration points.
CREATE OR REFRESH MATERIALIZED VIEW missing AS SELECT * FROM prod.crm.missing;

-- Not declared: the help shows how.
CREATE OR REFRESH STREAMING TABLE account_history;
CREATE FLOW accounts_cdc AS AUTO CDC INTO account_history FROM STREAM(prod.crm.accounts)
KEYS (id) SEQUENCE BY seq;

-- Declared and fine: AUTO CDC straight from it, keyed by a column of its log's schema.
CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(crm.customers)
KEYS (id) SEQUENCE BY id;
