//! `read_query` on MySQL and MariaDB, through mysql_async's text protocol: every value
//! arrives as the server prints it, and is converted to Arrow as PostgreSQL's text is
//! (`cdcflow_postgres::types`). The session's time zone is UTC, so TIMESTAMP values
//! print in UTC. TLS through mysql_async's rustls (the `ring` provider the build has
//! already), with the `sslmode` names of PostgreSQL.

use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::Queryable;
use mysql_async::{ClientIdentity, Column, Conn, DriverError, OptsBuilder, Row, SslOpts, Value};

use cdcflow_plan::connections::SslMode;
use cdcflow_postgres::client_cert::Pem;
use cdcflow_postgres::tls::Tls;

use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::runtime::SourceError;

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

impl MysqlConnection {
    async fn connect(&self) -> Result<Conn, SourceError> {
        let opts = OptsBuilder::default()
            .ip_or_hostname(self.host.clone())
            .tcp_port(self.port)
            .user(Some(self.user.clone()))
            .pass(self.password.clone())
            .db_name(Some(self.database.clone()))
            .prefer_socket(false)
            .init(vec!["SET time_zone = '+00:00'"]);
        let Some(ssl) = ssl_opts(&self.tls) else {
            return Conn::new(opts).await.map_err(|e| self.error(&e));
        };
        cdcflow_postgres::tls::install_crypto_provider();
        match Conn::new(opts.clone().ssl_opts(ssl)).await {
            // `prefer`: a server without TLS is spoken to in the clear.
            Err(mysql_async::Error::Driver(DriverError::NoClientSslFlagFromServer))
                if self.tls.mode == SslMode::Prefer =>
            {
                Conn::new(opts).await.map_err(|e| self.error(&e))
            }
            other => other.map_err(|e| self.error(&e)),
        }
    }

    fn error(&self, e: &mysql_async::Error) -> SourceError {
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
        let unreachable = matches!(e, mysql_async::Error::Io(mysql_async::IoError::Io(_)));
        let made = match unreachable {
            true => SourceError::unreachable,
            false => SourceError::new,
        };
        made(
            format!(
                "cannot connect to MySQL at {}:{} (database `{}`, user `{}`, sslmode {}): {e}",
                self.host,
                self.port,
                self.database,
                self.user,
                mode.as_str()
            ),
            &format!(
                "check the connection in pipeline.yaml (host, port, database, user, the password's environment variable) and that the server is up{tls}"
            ),
        )
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

fn query_error(e: &mysql_async::Error) -> SourceError {
    SourceError::new(format!("MySQL: {e}"), crate::runtime::QUERY_HELP)
}

/// The Arrow type of a column of a result.
fn arrow_type(column: &Column) -> DataType {
    let unsigned = column.flags().contains(ColumnFlags::UNSIGNED_FLAG);
    match column.column_type() {
        ColumnType::MYSQL_TYPE_TINY
        | ColumnType::MYSQL_TYPE_SHORT
        | ColumnType::MYSQL_TYPE_INT24 => DataType::Int32,
        ColumnType::MYSQL_TYPE_LONG if !unsigned => DataType::Int32,
        ColumnType::MYSQL_TYPE_LONG => DataType::Int64,
        ColumnType::MYSQL_TYPE_LONGLONG if !unsigned => DataType::Int64,
        ColumnType::MYSQL_TYPE_FLOAT => DataType::Float32,
        ColumnType::MYSQL_TYPE_DOUBLE => DataType::Float64,
        ColumnType::MYSQL_TYPE_NEWDECIMAL | ColumnType::MYSQL_TYPE_DECIMAL => {
            let scale = column.decimals();
            // The display length counts the sign and the point.
            let digits =
                column.column_length() as i64 - i64::from(!unsigned) - i64::from(scale > 0);
            match u8::try_from(digits) {
                Ok(p) if (1..=38).contains(&p) && scale <= p => {
                    DataType::Decimal128(p, scale as i8)
                }
                _ => DataType::Utf8,
            }
        }
        ColumnType::MYSQL_TYPE_DATE => DataType::Date32,
        ColumnType::MYSQL_TYPE_DATETIME | ColumnType::MYSQL_TYPE_TIMESTAMP => {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        }
        _ => DataType::Utf8,
    }
}

/// The columns of `query`'s result.
pub async fn describe(
    connection: &MysqlConnection,
    query: &str,
) -> Result<Vec<(String, DataType)>, SourceError> {
    let mut conn = connection.connect().await?;
    let statement = conn
        .prep(query.trim().trim_end_matches(';'))
        .await
        .map_err(|e| query_error(&e))?;
    let columns = statement
        .columns()
        .iter()
        .map(|c| (c.name_str().into_owned(), arrow_type(c)))
        .collect();
    let _ = conn.close(statement).await;
    let _ = conn.disconnect().await;
    Ok(columns)
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::NULL => None,
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Double(d) => Some(d.to_string()),
        Value::Date(y, m, d, h, mi, s, us) => Some(format!(
            "{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}"
        )),
        Value::Time(negative, days, h, m, s, us) => Some(format!(
            "{}{}:{m:02}:{s:02}.{us:06}",
            if *negative { "-" } else { "" },
            u32::from(*h) + days * 24
        )),
    }
}

/// The rows of `sql`, each value as the server prints it.
pub async fn fetch(
    connection: &MysqlConnection,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, SourceError> {
    let mut conn = connection.connect().await?;
    let rows: Vec<Row> = conn.query(sql).await.map_err(|e| query_error(&e))?;
    let _ = conn.disconnect().await;
    Ok(rows
        .iter()
        .map(|row| {
            (0..row.len())
                .map(|i| row.as_ref(i).and_then(text))
                .collect()
        })
        .collect())
}

/// The server's clock, µs since the epoch.
pub async fn now_micros(connection: &MysqlConnection) -> Result<i64, SourceError> {
    let mut conn = connection.connect().await?;
    let now: Option<i64> = conn
        .query_first("SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)")
        .await
        .map_err(|e| query_error(&e))?;
    let _ = conn.disconnect().await;
    Ok(now.unwrap_or_default())
}
