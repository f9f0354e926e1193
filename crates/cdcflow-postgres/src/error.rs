//! The PostgreSQL source's errors: a server that is not ready (named setting or
//! privilege, with what to do), a slot that is gone, data the source cannot represent,
//! and the driver's own errors.

/// What went wrong reading from PostgreSQL.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The server or the role lacks something logical replication needs.
    #[error("{message}")]
    NotReady { message: String, help: String },
    /// The slot the checkpoint continues from is missing or unusable.
    #[error("{message}")]
    Slot { message: String, help: String },
    /// A value or change the source cannot turn into rows.
    #[error("{message}")]
    Data { message: String, help: String },
    /// The replication stream broke its protocol.
    #[error("logical replication protocol: {0}")]
    Protocol(String),
    /// An error of the SQL connection (connecting, a query).
    #[error("PostgreSQL: {}", sql_message(.0))]
    Sql(#[from] tokio_postgres::Error),
    /// An error of the replication connection.
    #[error("PostgreSQL replication connection: {0}")]
    Replication(#[from] pgwire_replication::PgWireError),
}

fn sql_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        // "error connecting to server" says why only in its source.
        None => match std::error::Error::source(e) {
            Some(why) => format!("{e}: {why}"),
            None => e.to_string(),
        },
    }
}

impl PgError {
    /// What the user can do about it, when there is something to say.
    pub fn help(&self) -> Option<&str> {
        match self {
            Self::NotReady { help, .. } | Self::Slot { help, .. } | Self::Data { help, .. } => {
                Some(help)
            }
            Self::Sql(_) | Self::Replication(_) => Some(
                "check the connection in pipeline.yaml (host, port, database, user, the password's environment variable) and that the server is up",
            ),
            Self::Protocol(_) => None,
        }
    }
}
