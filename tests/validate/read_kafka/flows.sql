-- A valid read: the columns are Databricks' (key, value, topic, partition, offset, …).
CREATE OR REFRESH STREAMING TABLE events AS
SELECT CAST(value AS STRING) AS v, topic, partition, offset, timestamp
FROM STREAM read_kafka(bootstrapServers => 'broker:9092', subscribe => 'orders', startingOffsets => 'earliest');
CREATE OR REFRESH STREAMING TABLE ok_flow AS SELECT v, offst FROM STREAM(events);

-- An unknown option (the nearest is named), and a client option not supported.
CREATE OR REFRESH STREAMING TABLE a AS
SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:9092', subscribe => 't', startingOffset => 'earliest', `kafka.interceptor.classes` => 'x');

-- No topics; a server without a port; both subscriptions.
CREATE OR REFRESH STREAMING TABLE b AS SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:9092');
CREATE OR REFRESH STREAMING TABLE c AS SELECT * FROM STREAM read_kafka(bootstrapServers => 'broker', subscribe => 't');
CREATE OR REFRESH STREAMING TABLE d AS
SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:1', subscribe => 't', subscribePattern => 't.*');

-- Bad values: offsets, a limit, a flag, a pattern, a topic name.
CREATE OR REFRESH STREAMING TABLE e AS
SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:1', subscribe => 't', startingOffsets => 'first', maxOffsetsPerTrigger => 0, failOnDataLoss => 'maybe');
CREATE OR REFRESH STREAMING TABLE f AS SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:1', subscribePattern => '(');
CREATE OR REFRESH STREAMING TABLE g AS SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:1', subscribe => 'a b');

-- A JAAS config (it would hold the password), a truststore that is not PEM; not a stream;
-- a materialized view reading the topic itself.
CREATE OR REFRESH STREAMING TABLE h AS
SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:1', subscribe => 't', `kafka.sasl.jaas.config` => 'x', `kafka.ssl.truststore.type` => 'JKS');
CREATE MATERIALIZED VIEW i AS SELECT * FROM read_kafka(bootstrapServers => 'b:1', subscribe => 't');
CREATE MATERIALIZED VIEW j AS SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:1', subscribe => 't');

-- Kafka's Java client options: one passed on, one that is no number, one that only tunes
-- the Java consumer (a warning: it does nothing), a host name check neither https nor off.
CREATE OR REFRESH STREAMING TABLE k AS
SELECT * FROM STREAM read_kafka(bootstrapServers => 'b:1', subscribe => 't', `kafka.fetch.max.bytes` => '1048576', `kafka.fetch.min.bytes` => 'lots', `kafka.max.poll.records` => '500', `kafka.ssl.endpoint.identification.algorithm` => 'dns');
