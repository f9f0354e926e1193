//! `read_query` on MySQL and MariaDB, through mysql_async's text protocol: every value
//! arrives as the server prints it, and is converted to Arrow as PostgreSQL's text is
//! (`cdcflow_postgres::types`). The connection is `cdcflow-mysql`'s: the session's time
//! zone is UTC, so TIMESTAMP values print in UTC.

use cdcflow_mysql::MysqlConnection;
use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::Queryable;
use mysql_async::{Column, Row, Value};

use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::runtime::SourceError;

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
    let mut conn = connection.connect().await.map_err(SourceError::from)?;
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
    let mut conn = connection.connect().await.map_err(SourceError::from)?;
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
    let mut conn = connection.connect().await.map_err(SourceError::from)?;
    let now: Option<i64> = conn
        .query_first("SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)")
        .await
        .map_err(|e| query_error(&e))?;
    let _ = conn.disconnect().await;
    Ok(now.unwrap_or_default())
}
