//! `connections:` in pipeline.yaml: the databases a pipeline's sources read, by name.
//! Where to connect is written in the file; a secret never is: the password, or a whole
//! DSN, is named by the environment variable that holds it. Mistakes are found while
//! the file is read, so they are reported at their line and column.
//!
//! ```yaml
//! connections:
//!   crm:
//!     kind: postgres
//!     host: db.internal
//!     port: 5432
//!     database: crm
//!     user: cdcflow
//!     password_env: CRM_PASSWORD
//!   erp:
//!     kind: postgres
//!     dsn_env: ERP_DSN        # postgresql://user:password@host:5432/database
//!     sslmode: verify-full    # disable, prefer (the default), require, verify-ca, verify-full
//!     sslrootcert: /etc/ssl/certs/erp-ca.pem   # the CA to verify against (else Mozilla's, from webpki-roots)
//!     sslcert: /etc/cdcflow/erp-client.pem     # a client certificate (PEM) and its key,
//!     sslkey_env: ERP_CLIENT_KEY               # each a file or (`…_env`) PEM in a variable
//!   shop:
//!     kind: mysql             # or mariadb (read_query only)
//!     host: shop.internal
//!     database: shop
//!     user: reader
//! ```

use serde::Deserialize;

/// The kinds of database a connection reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectionKind {
    #[serde(alias = "postgresql")]
    Postgres,
    /// MySQL or MariaDB (one protocol).
    #[serde(alias = "mariadb")]
    Mysql,
}

impl ConnectionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
        }
    }

    /// The port a server of this kind listens on unless told otherwise.
    pub fn default_port(self) -> u16 {
        match self {
            Self::Postgres => DEFAULT_PORT,
            Self::Mysql => 3306,
        }
    }
}

/// Whether and how a connection uses TLS, with libpq's names and meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// Never.
    Disable,
    /// TLS when the server offers it, unverified; else plain (libpq's default).
    #[default]
    Prefer,
    /// TLS or no connection; the certificate is not verified.
    Require,
    /// TLS with a certificate signed by a trusted CA (any host name).
    VerifyCa,
    /// TLS with a trusted certificate for the host connected to.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// One entry of `connections:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawConnection")]
pub struct Connection {
    pub kind: ConnectionKind,
    pub target: Target,
    /// `sslmode:`; `None` leaves it to the DSN, else `prefer`.
    pub sslmode: Option<SslMode>,
    /// `sslrootcert:`, a PEM file of the CAs that verify the server's certificate
    /// (else Mozilla's, from webpki-roots).
    pub sslrootcert: Option<String>,
    /// `sslcert:`/`sslcert_env:` with `sslkey:`/`sslkey_env:`: the certificate the
    /// client authenticates with, and its private key.
    pub client_cert: Option<ClientCert>,
}

/// Where a PEM text comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file's path.
    File(String),
    /// The name of the environment variable that holds the PEM text.
    Env(String),
}

/// A client certificate (with its chain) and its private key, for TLS client
/// authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub cert: PemSource,
    pub key: PemSource,
}

/// Where a connection goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Host, port, database and user written out; the password, if any, in an
    /// environment variable.
    Parts {
        host: String,
        port: u16,
        database: String,
        user: String,
        password_env: Option<String>,
    },
    /// A whole DSN in an environment variable.
    DsnEnv(String),
}

/// The default PostgreSQL port.
pub const DEFAULT_PORT: u16 = 5432;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    kind: ConnectionKind,
    host: Option<String>,
    port: Option<u16>,
    database: Option<String>,
    user: Option<String>,
    password_env: Option<String>,
    dsn_env: Option<String>,
    sslmode: Option<SslMode>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslcert_env: Option<String>,
    sslkey: Option<String>,
    sslkey_env: Option<String>,
    #[serde(default)]
    password: Option<Secret>,
    #[serde(default)]
    dsn: Option<Secret>,
}

/// A secret written into the file: refused where it is written.
struct Secret;

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "a password or DSN is never written in pipeline.yaml: put it in an environment variable and name the variable with `password_env:` or `dsn_env:`",
        ))
    }
}

impl TryFrom<RawConnection> for Connection {
    type Error = String;

    fn try_from(raw: RawConnection) -> Result<Self, String> {
        // Refused while deserializing; kept so the fields are read.
        let _ = (raw.password.is_some(), raw.dsn.is_some());
        let env_name = |name: &str, value: &str| -> Result<String, String> {
            let ok = !value.is_empty()
                && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !value.starts_with(|c: char| c.is_ascii_digit());
            match ok {
                true => Ok(value.to_string()),
                false => Err(format!(
                    "`{name}` names an environment variable (letters, digits and _), not `{value}`"
                )),
            }
        };
        let pem = |file: Option<String>, env: Option<String>, name: &str| match (file, env) {
            (Some(_), Some(_)) => Err(format!(
                "`{name}` and `{name}_env` both name the client's {}: keep one",
                if name == "sslcert" {
                    "certificate"
                } else {
                    "key"
                }
            )),
            (Some(path), None) => Ok(Some(PemSource::File(path))),
            (None, Some(var)) => Ok(Some(PemSource::Env(env_name(
                &format!("{name}_env"),
                &var,
            )?))),
            (None, None) => Ok(None),
        };
        let client_cert = match (
            pem(raw.sslcert, raw.sslcert_env, "sslcert")?,
            pem(raw.sslkey, raw.sslkey_env, "sslkey")?,
        ) {
            (Some(cert), Some(key)) => Some(ClientCert { cert, key }),
            (None, None) => None,
            (Some(_), None) => {
                return Err("a client certificate needs its private key: add `sslkey:` (a PEM file) or `sslkey_env:` (a variable holding the PEM)".into());
            }
            (None, Some(_)) => {
                return Err("a client key needs its certificate: add `sslcert:` (a PEM file) or `sslcert_env:` (a variable holding the PEM)".into());
            }
        };
        if let Some(dsn) = raw.dsn_env {
            let written: Vec<&str> = [
                ("host", raw.host.is_some()),
                ("port", raw.port.is_some()),
                ("database", raw.database.is_some()),
                ("user", raw.user.is_some()),
                ("password_env", raw.password_env.is_some()),
            ]
            .iter()
            .filter(|(_, set)| *set)
            .map(|(k, _)| *k)
            .collect();
            if !written.is_empty() {
                return Err(format!(
                    "a connection with `dsn_env` takes everything from the DSN; remove `{}`",
                    written.join("`, `")
                ));
            }
            return Ok(Self {
                kind: raw.kind,
                target: Target::DsnEnv(env_name("dsn_env", &dsn)?),
                sslmode: raw.sslmode,
                sslrootcert: raw.sslrootcert,
                client_cert,
            });
        }
        let missing: Vec<&str> = [
            ("host", raw.host.is_none()),
            ("database", raw.database.is_none()),
            ("user", raw.user.is_none()),
        ]
        .iter()
        .filter(|(_, gone)| *gone)
        .map(|(k, _)| *k)
        .collect();
        if !missing.is_empty() {
            return Err(format!(
                "a connection needs `host`, `database` and `user` (or `dsn_env`); missing `{}`",
                missing.join("`, `")
            ));
        }
        Ok(Self {
            kind: raw.kind,
            sslmode: raw.sslmode,
            sslrootcert: raw.sslrootcert,
            client_cert,
            target: Target::Parts {
                host: raw.host.unwrap_or_default(),
                port: raw.port.unwrap_or(raw.kind.default_port()),
                database: raw.database.unwrap_or_default(),
                user: raw.user.unwrap_or_default(),
                password_env: raw
                    .password_env
                    .map(|v| env_name("password_env", &v))
                    .transpose()?,
            },
        })
    }
}
