//! `STREAM read_query(connection => 'erp', query => 'SELECT * FROM customers',
//! watermark => 'updated_at' [, keys => 'id'] [, overlap_seconds => 60]
//! [, max_rows_per_batch => 100000] [, schema => 'id INT, …'])`: high-watermark
//! extraction from a database the pipeline has no replication rights on (PostgreSQL,
//! MySQL or MariaDB; docs/sources.md). Each read pages through the query's rows from
//! the highest watermark value read before, less the overlap, in the order of the
//! watermark and then the keys, and keeps in the checkpoint where it stopped.
//! This module knows the options; running the query is `cdcflow-query`'s.

use datafusion::arrow::datatypes::SchemaRef;

use cdcflow_sql::Span;

/// The options `read_query` takes.
pub const OPTIONS: &[&str] = &[
    "connection",
    "query",
    "watermark",
    "keys",
    "overlap_seconds",
    "max_rows_per_batch",
    "schema",
];

/// The overlap by default: rows whose watermark is up to this many seconds below the
/// highest value read before are read again (transactions that committed late with an
/// earlier watermark value).
pub const DEFAULT_OVERLAP_SECONDS: f64 = 60.0;

/// The rows one batch takes at most by default; a read with more goes on in the next
/// batch of the same run.
pub const DEFAULT_MAX_ROWS_PER_BATCH: usize = 100_000;

/// The column names of `keys => 'a, b'`, or why the text is not a list of them.
pub fn parse_keys(text: &str) -> Result<Vec<String>, String> {
    let mut keys: Vec<String> = Vec::new();
    for name in text.split(',').map(str::trim) {
        if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '(' || c == ')') {
            return Err(format!("keys `{text}` is not a list of column names"));
        }
        if keys.iter().any(|k| k.eq_ignore_ascii_case(name)) {
            return Err(format!("keys names `{name}` twice"));
        }
        keys.push(name.to_string());
    }
    Ok(keys)
}

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
    /// The columns of the result that tell rows with one watermark value apart (unique
    /// among them); empty: every other column breaks the tie.
    pub keys: Vec<String>,
    pub overlap_seconds: f64,
    /// The rows one batch takes at most.
    pub max_rows_per_batch: usize,
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
            keys: vec![],
            overlap_seconds: 0.0,
            max_rows_per_batch: DEFAULT_MAX_ROWS_PER_BATCH,
            declared_columns: None,
            discovered_columns: None,
            span: Span::empty(),
        };
        assert!(q("SELECT 1").key().starts_with("query:erp:"));
        assert_eq!(q("SELECT 1").key(), q("SELECT 1").key());
        assert_ne!(q("SELECT 1").key(), q("SELECT 2").key());
    }

    #[test]
    fn keys_are_column_names_separated_by_commas() {
        assert_eq!(parse_keys("id"), Ok(vec!["id".to_string()]));
        assert_eq!(
            parse_keys(" order_id ,line_no "),
            Ok(vec!["order_id".to_string(), "line_no".to_string()])
        );
        assert_eq!(
            parse_keys("id name"),
            Err("keys `id name` is not a list of column names".into())
        );
        assert!(parse_keys("id,").is_err());
        assert_eq!(parse_keys("id, ID"), Err("keys names `ID` twice".into()));
    }
}
