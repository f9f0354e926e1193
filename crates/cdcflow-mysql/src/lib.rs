//! The MySQL and MariaDB change source, beside the data path: `read_mysql(connection =>
//! …, table => …)` in a flow reads a table's snapshot and then its changes from the
//! server's binary log (row events), as Arrow rows with change metadata. The runtime
//! calls it through its source interface; only the binary that runs pipelines compiles
//! this crate and its driver (docs/sources.md).
//!
//! - [`connection`]: where to connect, TLS, and the error type (`read_query` shares it);
//! - [`server`]: what the server must log, where its log ends, which files it keeps;
//! - [`columns`]: the table's columns and their Arrow types; [`values`]: a value as
//!   the snapshot and the log give it, to one text form; [`rows`]: the rows and their
//!   change metadata;
//! - [`snapshot`]: the copy, in key-ordered chunks, each in a consistent snapshot at a
//!   known log place; [`binlog`]: the log's transactions of the table;
//!   [`statement`]: what a logged statement does to the table; [`shared_log`]: one
//!   reader of a connection's log for all its tables;
//! - [`position`]: log places and what the checkpoint keeps; [`source`]: one read;
//!   [`runtime`]: the source interface; [`validate`]: what `cdcflow validate` asks the
//!   server; [`tables`]: the tables a sync (`syncs:` of pipeline.yaml) may capture.

pub mod binlog;
pub mod columns;
pub mod connection;
pub mod position;
pub mod rows;
pub mod runtime;
pub mod server;
pub mod shared_log;
pub mod snapshot;
pub mod source;
pub mod statement;
pub mod tables;
pub mod validate;
pub mod values;

pub use connection::{MysqlConnection, MysqlError, resolve};
pub use runtime::MysqlSources;
