CREATE OR REFRESH STREAMING TABLE bronze AS
SELECT value FROM STREAM read_kafka(bootstrapServers => 'broker:9092', subscribe => 'customers');

-- Valid: registry-framed values read with the flow's schema, options in Spark's map form;
-- a schema that is not a record; plain records.
CREATE OR REFRESH STREAMING TABLE customers AS
SELECT c.id, c.name
FROM (SELECT from_avro(value, '{"type": "record", "name": "customer", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}',
        map('schemaRegistryAddress', 'http://registry:8081', 'mode', 'PERMISSIVE')) AS c
      FROM STREAM(bronze));
CREATE OR REFRESH STREAMING TABLE names AS
SELECT from_avro(value, '"string"') AS name FROM STREAM(bronze);

-- A field the schema does not have.
CREATE OR REFRESH STREAMING TABLE wrong_field AS
SELECT c.nme FROM (SELECT from_avro(value, '{"type": "record", "name": "r", "fields": [{"name": "name", "type": "string"}]}') AS c FROM STREAM(bronze));

-- A type Avro does not have; text that is not JSON; a schema that is not a literal.
CREATE OR REFRESH STREAMING TABLE bad_type AS
SELECT from_avro(value, '{"type": "record", "name": "r", "fields": [{"name": "id", "type": "lng"}]}') AS c FROM STREAM(bronze);
CREATE OR REFRESH STREAMING TABLE not_json AS
SELECT from_avro(value, '{type: record}') AS c FROM STREAM(bronze);
CREATE OR REFRESH STREAMING TABLE not_literal AS
SELECT from_avro(value, CAST(value AS STRING)) AS c FROM STREAM(bronze);

-- debezium()'s options come after its key.
CREATE OR REFRESH STREAMING TABLE options_first AS
SELECT debezium(CAST(value AS STRING), 'id INT', map('mode', 'QUARANTINE'), 'k') AS e FROM STREAM(bronze);
