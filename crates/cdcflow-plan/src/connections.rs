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

/// Said of a value written where a variable's name belongs, which may be a secret: the
/// error quotes neither it nor (`masked`) the line that holds it.
pub const NOT_SHOWN: &str = "(not shown, in case it is the secret itself)";

/// pipeline.yaml's text with the value of every `…_env:` key replaced by `…`, line for
/// line, for an error that must not show one.
pub fn masked(config: &str) -> String {
    config
        .lines()
        .map(|line| {
            let key = line.trim_start();
            match key.split_once(':') {
                Some((name, value)) if name.ends_with("_env") && !value.trim().is_empty() => {
                    format!("{}{name}: …", &line[..line.len() - key.len()])
                }
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why `value` cannot be the name of the environment variable holding a secret, if it
/// cannot: a name is letters, digits and `_`, not starting with a digit; one that mixes
/// lower case with digits or upper case (`Hunter2`, `s3cretPass`) reads as a password
/// written where its variable's name belongs (names are by convention `UPPER_CASE`, or
/// at least `snake_case`).
fn not_a_variable_name(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        return Some("is empty");
    }
    let name_chars = value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !name_chars || value.starts_with(|c: char| c.is_ascii_digit()) {
        return Some("is not a variable's name (letters, digits and _, not starting with a digit)");
    }
    let lower = value.chars().any(|c| c.is_ascii_lowercase());
    let upper_or_digit = value
        .chars()
        .any(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    match lower && upper_or_digit {
        true => Some(
            "looks like a password rather than a variable's name (names are UPPER_CASE by convention)",
        ),
        false => None,
    }
}

impl TryFrom<RawConnection> for Connection {
    type Error = String;

    fn try_from(raw: RawConnection) -> Result<Self, String> {
        // Refused while deserializing; kept so the fields are read.
        let _ = (raw.password.is_some(), raw.dsn.is_some());
        let env_name = |name: &str, value: &str| -> Result<String, String> {
            match not_a_variable_name(value) {
                None => Ok(value.to_string()),
                // The value is never repeated: it may be the secret itself.
                Some(why) => Err(format!(
                    "`{name}` names an environment variable, and its value {why} {NOT_SHOWN}: put the secret in a variable and write the variable's name, e.g. `{name}: CRM_SECRET` with `export CRM_SECRET=…`"
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
        if let Some(host) = raw.host.as_deref().filter(|h| h.starts_with('/')) {
            socket_directory(raw.kind, host, raw.sslmode)?;
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

/// Whether `host`, a path, can be a connection of `kind` with `sslmode`. For
/// PostgreSQL a path is the directory of the server's Unix-domain socket, as in libpq
/// (`/var/run/postgresql`): the server's own machine, without TCP or TLS, so a mode
/// that demands TLS cannot be met there. The MySQL client connects over TCP only.
fn socket_directory(
    kind: ConnectionKind,
    host: &str,
    sslmode: Option<SslMode>,
) -> Result<(), String> {
    match (kind, sslmode) {
        (ConnectionKind::Mysql, _) => Err(format!(
            "`host: {host}` is a path, but a MySQL connection goes over TCP: write the server's host name (`127.0.0.1` for this machine)"
        )),
        (
            ConnectionKind::Postgres,
            Some(mode @ (SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull)),
        ) => Err(format!(
            "`host: {host}` is the directory of the server's Unix-domain socket, which carries no TLS, so `sslmode: {}` cannot be met: remove `sslmode:` (the socket never leaves this machine) or connect by host name",
            mode.as_str()
        )),
        (ConnectionKind::Postgres, _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_s_name_is_told_from_a_password() {
        for name in ["CRM_PASSWORD", "crm_password", "PG_PW_2", "_X"] {
            assert_eq!(not_a_variable_name(name), None, "{name}");
        }
        for value in [
            "",
            "2FAST",
            "hunter 2",
            "s3cret-Pass",
            "Hunter2",
            "pAssword",
        ] {
            assert!(not_a_variable_name(value).is_some(), "{value}");
        }
    }

    #[test]
    fn masking_hides_every_env_value_line_for_line() {
        let text = "name: p\nconnections:\n  crm:\n    password_env: Hunter2\n    user: u\n    sslkey_env:\n";
        let masked = masked(text);
        assert_eq!(
            masked,
            "name: p\nconnections:\n  crm:\n    password_env: …\n    user: u\n    sslkey_env:"
        );
        assert_eq!(masked.lines().count(), text.lines().count());
    }
}
