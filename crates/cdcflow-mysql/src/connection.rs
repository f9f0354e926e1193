//! Where a MySQL or MariaDB connection goes, and how it is made: mysql_async over TCP,
//! the session in UTC (so TIMESTAMP values print in UTC), TLS through mysql_async's
//! rustls (the `ring` provider the build has already) with the `sslmode` names of
//! PostgreSQL. `read_query` and `read_mysql` share it.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use cdcflow_plan::connections::{Connection, SslMode, Target};
use cdcflow_postgres::client_cert::Pem;
use cdcflow_postgres::tls::Tls;
use cdcflow_runtime::{ErrorCode, RunError};
use mysql_async::{ClientIdentity, Conn, DriverError, OptsBuilder, SslOpts};

/// Where a MySQL or MariaDB connection goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MysqlConnection {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub password: Option<String>,
    /// `sslmode:`, `sslrootcert:` and the client certificate, as for PostgreSQL.
    pub tls: Tls,
}

/// Something a MySQL server or the way to it refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MysqlError {
    pub message: String,
    /// What to do about it.
    pub help: String,
    /// The server could not be reached: a later attempt may succeed.
    pub unreachable: bool,
}

impl MysqlError {
    pub fn new(message: impl Into<String>, help: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            help: help.into(),
            unreachable: false,
        }
    }

    /// The error of a run reading connection `connection` with `function`.
    pub fn into_run_error(self, function: &str, connection: &str) -> RunError {
        let code = match self.unreachable {
            true => ErrorCode::SourceUnreachable,
            false => ErrorCode::Source,
        };
        RunError::user(
            code,
            format!("{function} on connection `{connection}`: {}", self.message),
        )
        .with_help(self.help)
    }
}

impl std::fmt::Display for MysqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Servers that answered a connection asking for TLS without it: under `sslmode:
/// prefer` the process's next connections to them speak in the clear at once, instead
/// of asking again (each refused attempt is one more connection the server counts).
static WITHOUT_TLS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

impl MysqlConnection {
    /// A connection: the session's time zone is UTC, and its statements may run as
    /// long as the server lets them (a snapshot chunk, a binlog dump).
    pub async fn connect(&self) -> Result<Conn, MysqlError> {
        let opts = OptsBuilder::default()
            .ip_or_hostname(self.host.clone())
            .tcp_port(self.port)
            .user(Some(self.user.clone()))
            .pass(self.password.clone())
            .db_name(Some(self.database.clone()))
            .prefer_socket(false)
            .init(vec!["SET time_zone = '+00:00'"]);
        let ssl = ssl_opts(&self.tls).filter(|_| !self.offers_no_tls());
        let Some(ssl) = ssl else {
            return Conn::new(opts).await.map_err(|e| self.error(&e));
        };
        cdcflow_postgres::tls::install_crypto_provider();
        match Conn::new(opts.clone().ssl_opts(ssl)).await {
            // `prefer`: a server without TLS is spoken to in the clear.
            Err(mysql_async::Error::Driver(DriverError::NoClientSslFlagFromServer))
                if self.tls.mode == SslMode::Prefer =>
            {
                if let Ok(mut servers) = WITHOUT_TLS.lock() {
                    servers.insert(self.server());
                }
                Conn::new(opts).await.map_err(|e| self.error(&e))
            }
            other => other.map_err(|e| self.error(&e)),
        }
    }

    /// Whether, under `sslmode: prefer`, this server was found to offer no TLS.
    fn offers_no_tls(&self) -> bool {
        self.tls.mode == SslMode::Prefer
            && WITHOUT_TLS
                .lock()
                .is_ok_and(|servers| servers.contains(&self.server()))
    }

    /// `host:port/database`, as messages name the server.
    pub fn server(&self) -> String {
        format!("{}:{}/{}", self.host, self.port, self.database)
    }

    fn error(&self, e: &mysql_async::Error) -> MysqlError {
        let mode = self.tls.mode;
        let tls = match mode {
            SslMode::Disable | SslMode::Prefer => String::new(),
            SslMode::Require => "; with sslmode: require the server must offer TLS".into(),
            SslMode::VerifyCa | SslMode::VerifyFull => format!(
                "; with sslmode: {} the server must offer TLS with a certificate the CAs of `sslrootcert:` sign{}",
                mode.as_str(),
                if mode == SslMode::VerifyFull {
                    ", for this host name"
                } else {
                    ""
                }
            ),
        };
        MysqlError {
            message: format!(
                "cannot connect to MySQL at {}:{} (database `{}`, user `{}`, sslmode {}): {e}",
                self.host,
                self.port,
                self.database,
                self.user,
                mode.as_str()
            ),
            help: format!(
                "check the connection in pipeline.yaml (host, port, database, user, the password's environment variable) and that the server is up{tls}"
            ),
            unreachable: matches!(e, mysql_async::Error::Io(mysql_async::IoError::Io(_))),
        }
    }
}

/// mysql_async's TLS settings for `tls`, with libpq's meanings: `prefer` and `require`
/// take any certificate, `verify-ca` one the trusted CAs sign, `verify-full` one for
/// the host too; `sslrootcert:` replaces the built-in CAs (Mozilla's).
fn ssl_opts(tls: &Tls) -> Option<SslOpts> {
    let mode = tls.mode;
    if mode == SslMode::Disable {
        return None;
    }
    let mut opts = SslOpts::default()
        .with_danger_accept_invalid_certs(matches!(mode, SslMode::Prefer | SslMode::Require))
        .with_danger_skip_domain_validation(mode != SslMode::VerifyFull);
    if let Some(root) = &tls.root_cert {
        opts = opts
            .with_root_certs(vec![root.clone().into()])
            .with_disable_built_in_roots(true);
    }
    if let Some(client) = &tls.client_cert {
        opts = opts.with_client_identity(Some(ClientIdentity::new(
            pem_source(&client.cert),
            pem_source(&client.key),
        )));
    }
    Some(opts)
}

/// A PEM as mysql_async takes it (its `PathOrBuf`, which it does not export): the file,
/// or the text itself.
fn pem_source<T: From<std::path::PathBuf> + From<Vec<u8>>>(pem: &Pem) -> T {
    match pem {
        Pem::File(path) => path.clone().into(),
        Pem::Text { text, .. } => text.as_bytes().to_vec().into(),
    }
}

/// The MySQL connection `name` of pipeline.yaml, with its secret from the environment.
pub fn resolve(name: &str, c: &Connection) -> Result<MysqlConnection, RunError> {
    match &c.target {
        Target::DsnEnv(_) => Err(RunError::input(format!(
            "connection `{name}`: a MySQL connection takes host, port, database, user and password_env, not dsn_env"
        ))
        .with_help("write the connection's parts in pipeline.yaml")),
        Target::Parts {
            host,
            port,
            database,
            user,
            password_env,
        } => {
            let password = password_env
                .as_deref()
                .map(|var| cdcflow_postgres::runtime::env_secret(name, var))
                .transpose()?;
            Ok(MysqlConnection {
                host: host.clone(),
                port: *port,
                database: database.clone(),
                user: user.clone(),
                password,
                tls: cdcflow_postgres::runtime::tls(name, c, SslMode::Prefer)?,
            })
        }
    }
}
