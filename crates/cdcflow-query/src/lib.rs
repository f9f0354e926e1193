//! High-watermark extraction, beside the data path: `STREAM read_query(connection =>
//! …, query => …, watermark => …)` runs a query on a database the pipeline has no
//! replication rights on and yields the rows whose watermark column is above the
//! highest value an earlier batch committed, less an overlap window (docs/sources.md).
//! The runtime calls it through its source interface; only the binary compiles it and
//! its drivers (tokio-postgres through `cdcflow-postgres`, and mysql_async).
//!
//! - [`watermark`]: the query a read runs and the position it keeps;
//! - [`postgres`], [`mysql`]: the two kinds of server;
//! - [`runtime`]: the source interface.

pub mod mysql;
pub mod postgres;
pub mod runtime;
pub mod watermark;

pub use runtime::QuerySources;
