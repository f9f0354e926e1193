//! The Kafka source, beside the data path: `STREAM read_kafka(bootstrapServers => …,
//! subscribe => …)` in a streaming table's query reads the records of topics as Arrow
//! rows with Databricks' columns, keeping the offset of each partition in the flow's
//! checkpoint. The runtime calls it through its source interface; only the binary that
//! runs pipelines compiles this crate and its client (docs/sources.md says why
//! librdkafka).
//!
//! - [`client`]: connecting, with the `kafka.*` options;
//! - [`offsets`]: which offsets of each partition a read takes, and data loss;
//! - [`records`]: records to Arrow rows; [`source`]: the read, the status.

pub mod client;
pub mod offsets;
pub mod records;
pub mod source;
pub mod validate;

/// The client, so that tests and tools can produce records with the same one.
pub use rdkafka;
pub use source::{KafkaSource, KafkaSources};
