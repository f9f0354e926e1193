//! The PostgreSQL change source, beside the data path: `read_postgres(connection =>
//! …, table => …)` in a flow reads a table's initial snapshot and then its changes
//! through logical replication (the `pgoutput` plugin), as Arrow rows with change
//! metadata. The runtime calls it through its source interface; only the crates that
//! run pipelines compile this one and its drivers (docs/sources.md).
//!
//! - [`connection`]: where to connect, and the two connections made from it;
//!   [`tls`]: how they encrypt and verify; [`client_cert`]: the certificate they
//!   authenticate with;
//! - [`source`]: slot, publication, streaming and acknowledgement; [`parking`]: a
//!   session kept from one read to the next of a run; [`notices`]: what a read says
//!   while it waits; [`identity`]: the
//!   table and publication a position was read from, checked before each read; [`snapshot`]:
//!   the initial copy, in chunks ([`tid_copy`] for a table without a primary key), each
//!   read by COPY (`copy_text`);
//! - [`pgoutput`]: the replication messages; [`types`]: values to Arrow;
//!   [`stream`]: the slot's stream, read for one table or for several at once
//!   ([`shared_slot`]: what it read for the others, until they take it);
//!   [`changes`]: the rows and their metadata columns; [`rejected`]: rows with a value
//!   their column's type has none of, set apart for the quarantine table.

pub mod changes;
pub mod client_cert;
pub mod connection;
mod copy_text;
pub mod error;
pub mod identity;
pub mod notices;
pub mod parking;
pub mod pgoutput;
pub mod position;
pub mod rejected;
pub mod runtime;
pub mod shared_client;
pub mod shared_slot;
pub mod slots;
pub mod snapshot;
pub mod source;
mod stream;
pub mod tables;
pub mod tid_copy;
pub mod tls;
pub mod types;
pub mod validate;

pub use changes::ChangeKind;
pub use connection::PgConnection;
pub use error::PgError;
pub use notices::Notices;
pub use parking::Parking;
pub use runtime::PostgresSources;
pub use snapshot::CopyProgress;
pub use source::{Changes, ReadFrom, TableRef, TableSource, lsn_text};
/// The SQL driver, so that callers can name the types of [`PgConnection::connect`]'s client.
pub use tokio_postgres;
