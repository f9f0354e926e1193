//! The tables of a server a sync may capture: tables of the schemas it names, with their
//! primary keys (`syncs:` of pipeline.yaml, `cdcflow_plan::syncs`).

use cdcflow_plan::syncs::SourceTable;
use tokio_postgres::Client;

use crate::error::PgError;

/// Every table of `schemas` (each schema but the server's own when `None`) with its
/// primary key's columns in key order. A partition is left out: its rows are its
/// partitioned table's, which is listed.
pub async fn list(
    client: &Client,
    schemas: Option<&[String]>,
) -> Result<Vec<SourceTable>, PgError> {
    let all: Vec<String> = vec![];
    let rows = client
        .query(
            "SELECT n.nspname::text, c.relname::text, a.attname::text
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
             LEFT JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
             LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
             WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
               AND n.nspname NOT IN ('pg_catalog', 'information_schema')
               AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%'
               AND (cardinality($1::text[]) = 0 AND NOT $2 OR n.nspname = ANY($1))
             ORDER BY 1, 2, k.ord",
            &[&schemas.unwrap_or(&all), &schemas.is_some()],
        )
        .await?;
    Ok(cdcflow_plan::syncs::tables_of_rows(
        rows.iter().map(|row| (row.get(0), row.get(1), row.get(2))),
    ))
}
