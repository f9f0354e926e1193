//! High-watermark extraction, beside the data path: `STREAM read_query(connection =>
//! …, query => …, watermark => …)` runs a query on a database the pipeline has no
//! replication rights on and yields the rows whose watermark column reaches the highest
//! value an earlier batch committed, less an overlap window, page by page in the order
//! of the watermark and the keys (docs/sources.md). The runtime calls it through its
//! source interface; only the binary compiles it and its drivers (tokio-postgres
//! through `cdcflow-postgres`, and mysql_async).
//!
//! - [`watermark`]: the overlap, and which rows a pass reads again;
//! - [`order`]: the order a read pages in, and the rows after a place in it;
//! - [`page`]: a batch, page by page, and what it does to the position;
//! - [`position`]: what the checkpoint keeps;
//! - [`dialect`]: how each kind of server is written to;
//! - [`postgres`], [`mysql`]: the two kinds of server;
//! - [`runtime`]: the source interface.

pub mod dialect;
pub mod mysql;
pub mod order;
pub mod page;
pub mod position;
pub mod postgres;
pub mod runtime;
pub mod watermark;

pub use runtime::QuerySources;
