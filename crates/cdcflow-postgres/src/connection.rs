//! Where a PostgreSQL source connects: host, port, database, user and password, from
//! `connections:` in pipeline.yaml (the password, or a whole DSN, from an environment
//! variable). Both connections a source opens (SQL for the snapshot and the catalog,
//! replication for the change stream) are made from it, with the same session settings
//! so that values arrive as the same text on both.

use std::time::Duration;

use cdcflow_plan::connections::SslMode;
use pgwire_replication::ReplicationConfig;

use crate::error::PgError;
use crate::tls::Tls;

/// Session settings that fix how values are printed as text: ISO dates, instants in
/// UTC, hex bytea, UTF-8, and floats that round-trip.
const SESSION_OPTIONS: &str = "-c DateStyle=ISO,YMD -c TimeZone=UTC -c IntervalStyle=iso_8601 -c bytea_output=hex -c extra_float_digits=1 -c client_encoding=UTF8";

/// How often a replication session tells the server the position acknowledged (the
/// session sends one only when it has news, or while the stream runs). A run's end
/// waits for the server to take the last one before it closes the session, so this is
/// time added to every run that read changes; a report costs the walsender a few
/// microseconds.
pub(crate) const STATUS_INTERVAL: Duration = Duration::from_millis(20);

/// A PostgreSQL server and the role cdcflow connects as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgConnection {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub password: Option<String>,
    pub tls: Tls,
}

impl PgConnection {
    /// From a libpq-style DSN (`postgresql://user:pw@host:5432/db` or
    /// `host=… port=… dbname=… user=…`).
    pub fn from_dsn(dsn: &str) -> Result<Self, PgError> {
        let config: tokio_postgres::Config = dsn.parse().map_err(|e| PgError::NotReady {
            message: format!("the DSN cannot be read: {e}"),
            help: "write it as postgresql://user:password@host:5432/database".into(),
        })?;
        // A path is the directory of the server's Unix-domain socket, as in libpq.
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(name)) => name.clone(),
            #[cfg(unix)]
            Some(tokio_postgres::config::Host::Unix(dir)) => dir.to_string_lossy().into_owned(),
            None => "localhost".into(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let user = config.get_user().unwrap_or("postgres").to_string();
        let database = config.get_dbname().unwrap_or(&user).to_string();
        let password = config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        let mode = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => SslMode::Disable,
            tokio_postgres::config::SslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        if host.starts_with('/') && mode == SslMode::Require {
            return Err(PgError::NotReady {
                message: format!("the DSN names the Unix-domain socket in {host}, which carries no TLS, and sslmode=require"),
                help: "remove sslmode=require from the DSN (the socket never leaves this machine) or connect by host name".into(),
            });
        }
        Ok(Self {
            host,
            port,
            database,
            user,
            password,
            tls: Tls {
                mode,
                ..Tls::default()
            },
        })
    }

    /// The same server and role, another database.
    pub fn with_database(&self, database: &str) -> Self {
        Self {
            database: database.into(),
            ..self.clone()
        }
    }

    fn sql_config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .dbname(&self.database)
            .user(&self.user)
            .application_name("cdcflow")
            .options(SESSION_OPTIONS)
            .ssl_mode(self.tls.sql_mode())
            .connect_timeout(Duration::from_secs(10));
        if let Some(p) = &self.password {
            c.password(p);
        }
        c
    }

    /// An SQL connection; its driver task runs on the current tokio runtime.
    pub async fn connect(&self) -> Result<tokio_postgres::Client, PgError> {
        let (client, connection) = self
            .sql_config()
            .connect(self.tls.sql_connector()?)
            .await
            .map_err(|e| match e.as_db_error() {
                Some(_) => PgError::Sql(e),
                None => self.not_connected(
                    &e.to_string(),
                    std::error::Error::source(&e).map(ToString::to_string),
                    crate::error::is_io(&e),
                ),
            })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PostgreSQL connection ended");
            }
        });
        Ok(client)
    }

    /// The error for a server that could not be reached (`io`: the connection itself
    /// failed, refused or broken) or refused the connection (TLS, a certificate).
    pub(crate) fn not_connected(&self, error: &str, cause: Option<String>, io: bool) -> PgError {
        let why = match cause {
            Some(cause) => format!("{error}: {cause}"),
            None => error.to_string(),
        };
        let help = match self.tls.mode {
            SslMode::Disable => "check the connection in pipeline.yaml (host, port, database, user, the password's environment variable) and that the server is up".to_string(),
            mode => format!("check the connection in pipeline.yaml (host, port, database, user, the password's environment variable) and that the server is up; with sslmode: {} the server must offer TLS{}", mode.as_str(), match mode {
                SslMode::VerifyCa | SslMode::VerifyFull => " with a certificate the CAs of `sslrootcert:` sign (and, for verify-full, for this host name)",
                _ => "",
            }),
        };
        let message = format!(
            "cannot connect to PostgreSQL at {}:{} (database `{}`, user `{}`, sslmode {}): {why}",
            self.host,
            self.port,
            self.database,
            self.user,
            self.tls.mode.as_str()
        );
        match io {
            true => PgError::Unreachable { message, help },
            false => PgError::NotReady { message, help },
        }
    }

    /// The replication connection's settings for `slot` and `publication`.
    pub(crate) fn replication_config(&self, slot: &str, publication: &str) -> ReplicationConfig {
        ReplicationConfig::new(
            self.host.clone(),
            self.user.clone(),
            self.password.clone().unwrap_or_default(),
            self.database.clone(),
            slot,
            publication,
        )
        .with_port(self.port)
        .with_tls(self.tls.replication_config())
        .with_options(SESSION_OPTIONS)
        .with_application_name("cdcflow")
        .with_status_interval(STATUS_INTERVAL)
    }
}

/// `name` as an SQL identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as an SQL string literal.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsn_in_both_forms() {
        let c = PgConnection::from_dsn("postgresql://crm:secret@db.local:6543/sales").unwrap();
        assert_eq!(
            c,
            PgConnection {
                host: "db.local".into(),
                port: 6543,
                database: "sales".into(),
                user: "crm".into(),
                password: Some("secret".into()),
                tls: Tls::default(),
            }
        );
        let c = PgConnection::from_dsn("host=127.0.0.1 user=postgres dbname=test").unwrap();
        assert_eq!(
            (c.port, c.database.as_str(), c.password),
            (5432, "test", None)
        );
        assert!(PgConnection::from_dsn("postgresql://[").is_err());
        let c = PgConnection::from_dsn("host=h user=u dbname=d sslmode=require").unwrap();
        assert_eq!(c.tls.mode, SslMode::Require);
    }

    #[test]
    fn a_dsn_may_name_the_socket_directory_but_then_not_demand_tls() {
        for dsn in [
            "host=/var/run/postgresql user=u dbname=d",
            "postgresql://u@%2Fvar%2Frun%2Fpostgresql/d",
            "postgresql:///d?host=/var/run/postgresql&user=u",
        ] {
            let c = PgConnection::from_dsn(dsn).unwrap();
            assert_eq!(
                (c.host.as_str(), c.database.as_str(), c.user.as_str()),
                ("/var/run/postgresql", "d", "u"),
                "{dsn}"
            );
        }
        let e = PgConnection::from_dsn("host=/var/run/postgresql user=u sslmode=require")
            .unwrap_err()
            .to_string();
        assert!(e.contains("carries no TLS"), "{e}");
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
