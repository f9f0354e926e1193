//! The tables of a server a sync may capture: base tables of the schemas it names, with
//! their primary keys (`syncs:` of pipeline.yaml, `cdcflow_plan::syncs`).

use cdcflow_plan::syncs::SourceTable;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::connection::MysqlError;

/// The server's own schemas, never synced by a pattern.
const SYSTEM_SCHEMAS: &[&str] = &["mysql", "information_schema", "performance_schema", "sys"];

/// Every base table of `schemas` (each schema but the server's own when `None`), with
/// its primary key's columns in key order. Names are compared as bytes: the catalog's
/// collation ignores case, and `Orders` and `orders` may be two tables.
pub async fn list(
    conn: &mut Conn,
    schemas: Option<&[String]>,
) -> Result<Vec<SourceTable>, MysqlError> {
    let rows: Vec<(String, String, Option<String>)> = conn
        .query(
            "SELECT t.TABLE_SCHEMA, t.TABLE_NAME, k.COLUMN_NAME
             FROM information_schema.TABLES t
             LEFT JOIN information_schema.KEY_COLUMN_USAGE k
               ON BINARY k.TABLE_SCHEMA = BINARY t.TABLE_SCHEMA
              AND BINARY k.TABLE_NAME = BINARY t.TABLE_NAME
              AND k.CONSTRAINT_NAME = 'PRIMARY'
             WHERE t.TABLE_TYPE = 'BASE TABLE'
             ORDER BY BINARY t.TABLE_SCHEMA, BINARY t.TABLE_NAME, k.ORDINAL_POSITION",
        )
        .await
        .map_err(|e| {
            MysqlError::new(
                format!("listing the server's tables: {e}"),
                "the connection's user needs SELECT on the tables it syncs",
            )
        })?;
    let wanted = |schema: &str| match schemas {
        Some(list) => list.iter().any(|s| s == schema),
        None => !SYSTEM_SCHEMAS
            .iter()
            .any(|s| s.eq_ignore_ascii_case(schema)),
    };
    Ok(cdcflow_plan::syncs::tables_of_rows(
        rows.into_iter().filter(|(schema, _, _)| wanted(schema)),
    ))
}
