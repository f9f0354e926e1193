//! `STREAM read_query(connection => 'erp', query => 'SELECT * FROM customers',
//! watermark => 'updated_at' [, overlap_seconds => 60] [, schema => 'id INT, …'])`:
//! high-watermark extraction from a database the pipeline has no replication rights on
//! (PostgreSQL, MySQL or MariaDB; docs/sources.md). Each read runs the query with
//! `WHERE <watermark> > <highest value read before, less the overlap>`, keeps the new
//! highest value in the checkpoint, and yields the query's columns; rows read again
//! in the overlap are exact re-deliveries that AUTO CDC's sequence de-duplicates.
//! This module knows the options; running the query is `cdcflow-query`'s.

use datafusion::arrow::datatypes::SchemaRef;

use cdcflow_sql::Span;

/// The options `read_query` takes.
pub const OPTIONS: &[&str] = &[
    "connection",
    "query",
    "watermark",
    "overlap_seconds",
    "schema",
];

/// The overlap by default: rows whose watermark is up to this many seconds below the
/// highest value read before are read again (transactions that committed late with an
/// earlier watermark value).
pub const DEFAULT_OVERLAP_SECONDS: f64 = 60.0;

/// A resolved `read_query` call.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadQuery {
    /// The table name that stands for this call in the flow's rewritten query.
    pub table: String,
    /// The name in `connections:` of pipeline.yaml.
    pub connection: String,
    /// The query, as the source database runs it.
    pub query: String,
    /// The column of the query's result that only grows (a timestamp or a number).
    pub watermark: String,
    pub overlap_seconds: f64,
    /// The result's columns from `schema => 'ddl'`.
    pub declared_columns: Option<SchemaRef>,
    /// The result's columns as the server described them when the run began.
    pub discovered_columns: Option<SchemaRef>,
    pub span: Span,
}

impl ReadQuery {
    /// Names the source apart from every other of the pipeline: the key of its columns
    /// found at run time and of its watermark in a flow's checkpoint. A changed query
    /// is a new source (it starts from no watermark).
    pub fn key(&self) -> String {
        let hash = self.query.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("query:{}:{hash:016x}", self.connection)
    }

    /// The rows' schema, when the columns are known.
    pub fn schema(&self) -> Option<SchemaRef> {
        self.declared_columns
            .clone()
            .or_else(|| self.discovered_columns.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_the_query() {
        let q = |query: &str| ReadQuery {
            table: "__query_f_1".into(),
            connection: "erp".into(),
            query: query.into(),
            watermark: "updated_at".into(),
            overlap_seconds: 0.0,
            declared_columns: None,
            discovered_columns: None,
            span: Span::empty(),
        };
        assert!(q("SELECT 1").key().starts_with("query:erp:"));
        assert_eq!(q("SELECT 1").key(), q("SELECT 1").key());
        assert_ne!(q("SELECT 1").key(), q("SELECT 2").key());
    }
}
