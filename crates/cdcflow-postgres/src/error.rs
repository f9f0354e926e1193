//! The PostgreSQL source's errors: a server that is not ready (named setting or
//! privilege, with what to do), a slot that is gone, data the source cannot represent,
//! and the driver's own errors.

/// What went wrong reading from PostgreSQL.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The server or the role lacks something logical replication needs.
    #[error("{message}")]
    NotReady { message: String, help: String },
    /// The server could not be reached: the connection was refused or broke.
    #[error("{message}")]
    Unreachable { message: String, help: String },
    /// The slot the checkpoint continues from is missing or unusable.
    #[error("{message}")]
    Slot { message: String, help: String },
    /// A value or change the source cannot turn into rows.
    #[error("{message}")]
    Data { message: String, help: String },
    /// The stream since the committed position lacks some of the table's changes (an
    /// operator's DDL or publication change): only a new snapshot of `refresh` recovers.
    #[error("{message}")]
    Gap { message: String, refresh: Refresh },
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

/// What a new snapshot must cover to close a [`PgError::Gap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// The table alone.
    Table,
    /// Every table read through the connection (they share the slot).
    Connection,
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
            Self::NotReady { help, .. }
            | Self::Unreachable { help, .. }
            | Self::Slot { help, .. }
            | Self::Data { help, .. } => Some(help),
            Self::Sql(e) => Some(sql_help(e)),
            Self::Replication(e) => Some(replication_help(&e.to_string())),
            Self::Gap { .. } => None,
            Self::Protocol(_) => None,
        }
    }

    /// The SQLSTATE of the server's answer, when the server answered with an error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Self::Sql(e) => e.as_db_error().map(|d| d.code().code()),
            _ => None,
        }
    }

    /// Whether the server could not be reached or went away (a connection refused or
    /// broken, a server starting or shutting down), as opposed to a server that
    /// answered and refused: the same request may succeed later.
    pub fn unreachable(&self) -> bool {
        match self {
            Self::Sql(e) => match e.as_db_error() {
                Some(db) => unreachable_state(db.code().code()),
                None => is_io(e),
            },
            Self::Unreachable { .. }
            | Self::Replication(pgwire_replication::PgWireError::Io(_)) => true,
            Self::Replication(pgwire_replication::PgWireError::Server(text)) => {
                text.contains("shutting down") || text.contains("starting up")
            }
            _ => false,
        }
    }
}

/// SQLSTATEs of a server that cannot take the connection now.
fn unreachable_state(code: &str) -> bool {
    matches!(code, "57P01" | "57P02" | "57P03") || code.starts_with("08")
}

/// Whether an I/O error is in the driver error's causes (connecting, or a connection
/// that broke).
pub(crate) fn is_io(e: &tokio_postgres::Error) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.is::<std::io::Error>() {
            return true;
        }
        cause = c.source();
    }
    e.is_closed()
}

const CHECK_CONNECTION: &str = "check the connection in pipeline.yaml (host, port, database, user, the password's environment variable) and that the server is up";

/// What to do about an error of the SQL connection: the server's answer says why (by
/// its SQLSTATE); only an error without one is about reaching the server.
fn sql_help(e: &tokio_postgres::Error) -> &'static str {
    let Some(db) = e.as_db_error() else {
        return CHECK_CONNECTION;
    };
    state_help(db.code().code())
}

/// What to do about an error of the replication connection, from its text (the
/// replication client gives the server's message, not its SQLSTATE).
fn replication_help(text: &str) -> &'static str {
    if text.contains("replication slots are in use") || text.contains("all replication slots") {
        return state_help("53400");
    }
    if text.contains("password authentication failed") || text.contains("no pg_hba.conf entry") {
        return state_help("28P01");
    }
    if text.contains("does not exist") {
        return state_help("42704");
    }
    if text.contains("remaining connection slots") || text.contains("too many clients") {
        return state_help("53300");
    }
    CHECK_CONNECTION
}

fn state_help(code: &str) -> &'static str {
    match code {
        "53400" => {
            "the server has no free replication slot (max_replication_slots): drop slots no pipeline uses (`cdcflow status` lists cdcflow's) or raise max_replication_slots and restart the server"
        }
        "53300" => {
            "the server refused a new connection (max_connections reached): close idle sessions or raise max_connections"
        }
        "28000" | "28P01" => {
            "the server refused the login: check the user, the password's environment variable and pg_hba.conf"
        }
        "3D000" => {
            "the database does not exist: check `database:` of the connection in pipeline.yaml"
        }
        "42501" => {
            "the role lacks a privilege: the message names it (docs/sources.md lists what cdcflow needs)"
        }
        "57P01" | "57P02" | "57P03" => {
            "the server is shutting down or starting: the next run (or --continuous, after a back-off) tries again"
        }
        c if c.starts_with("08") => CHECK_CONNECTION,
        // The server understood the connection but refused a statement cdcflow sent.
        _ => {
            "the server refused a statement cdcflow sent (the message says why); if the server looks right, this is a cdcflow bug: please report it with the message"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_names_the_server_s_reason_not_the_connection() {
        // The replication connection gives the server's message only.
        let full = replication_help(
            "server error: ERROR: all replication slots are in use (HINT: Free one or increase max_replication_slots.)",
        );
        assert!(full.contains("max_replication_slots"), "{full}");
        assert!(!full.contains("check the connection"), "{full}");
        assert!(
            replication_help("password authentication failed for user \"x\"").contains("login")
        );
        // By SQLSTATE: a statement refused is not a connection problem.
        for (state, says) in [
            ("42601", "refused a statement"),
            ("53300", "max_connections"),
            ("53400", "max_replication_slots"),
            ("28P01", "login"),
            ("3D000", "database does not exist"),
            ("57P01", "shutting down"),
            ("08006", "check the connection"),
        ] {
            assert!(
                state_help(state).contains(says),
                "{state}: {}",
                state_help(state)
            );
        }
        assert!(unreachable_state("57P03") && unreachable_state("08001"));
        assert!(!unreachable_state("42601") && !unreachable_state("28P01"));
    }
}
