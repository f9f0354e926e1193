//! `read_query` on PostgreSQL, through the SQL connection of `cdcflow-postgres` (its
//! TLS and session settings, so values print as the log-based source prints them).

use cdcflow_postgres::PgConnection;
use cdcflow_postgres::tokio_postgres::SimpleQueryMessage;
use cdcflow_postgres::types::arrow_type;
use datafusion::arrow::datatypes::DataType;

use crate::runtime::SourceError;

/// The columns of `query`'s result, as Arrow types (numeric without a declared
/// precision, and every type without an Arrow one, as text).
pub async fn describe(
    connection: &PgConnection,
    query: &str,
) -> Result<Vec<(String, DataType)>, SourceError> {
    let client = connection
        .connect()
        .await
        .map_err(|e| SourceError::postgres(&e))?;
    let statement = client
        .prepare(query.trim().trim_end_matches(';'))
        .await
        .map_err(|e| SourceError::postgres_query(&e.into()))?;
    Ok(statement
        .columns()
        .iter()
        .map(|c| (c.name().to_string(), arrow_type(c.type_().oid(), -1)))
        .collect())
}

/// The rows of `sql`, each value as PostgreSQL prints it.
pub async fn fetch(
    connection: &PgConnection,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, SourceError> {
    let client = connection
        .connect()
        .await
        .map_err(|e| SourceError::postgres(&e))?;
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|e| SourceError::postgres_query(&e.into()))?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(String::from))
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

/// The server's clock, µs since the epoch.
pub async fn now_micros(connection: &PgConnection) -> Result<i64, SourceError> {
    let client = connection
        .connect()
        .await
        .map_err(|e| SourceError::postgres(&e))?;
    let row = client
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
            &[],
        )
        .await
        .map_err(|e| SourceError::postgres(&e.into()))?;
    Ok(row.get(0))
}
