//! `STREAM read_postgres(connection => 'crm', table => 'public.customers' [, schema =>
//! 'id INT, name STRING'])`: a PostgreSQL table's snapshot and then its changes, as a
//! streaming source (docs/sources.md). This module knows the call's options, the change
//! metadata columns every row carries, and how a table name is written; reading the
//! database is `cdcflow-postgres`'s, which the planner never compiles.
//!
//! The table's columns are known here only when `schema =>` declares them; otherwise
//! validation plans no flow that reads the source (a note says so) and the run asks
//! the server for them before planning ([`ReadPostgres::discovered_columns`]).

use std::sync::Arc;

use cdcflow_sql::Span;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// What happened: `snapshot`, `insert`, `update`, `delete` or `truncate`.
pub const CHANGE_TYPE: &str = "_change_type";
/// The commit LSN of the change's transaction, as a number.
pub const COMMIT_LSN: &str = "_commit_lsn";
/// The change's position within its transaction, from 1 (0 for snapshot rows).
pub const CHANGE_SEQ: &str = "_change_seq";
/// When the transaction committed.
pub const COMMIT_TIMESTAMP: &str = "_commit_timestamp";
/// The transaction id.
pub const XID: &str = "_xid";

/// The options `read_postgres` takes.
pub const OPTIONS: &[&str] = &["connection", "table", "schema", "max_changes_per_batch"];

/// Changes a batch takes at most by default (whole transactions: one larger than this
/// is taken whole); the rest is left for the next batch of the same run.
pub const DEFAULT_MAX_CHANGES_PER_BATCH: u64 = 100_000;

/// The change metadata columns, after the table's own.
pub fn metadata_fields() -> Vec<Field> {
    vec![
        Field::new(CHANGE_TYPE, DataType::Utf8, false),
        Field::new(COMMIT_LSN, DataType::Int64, false),
        Field::new(CHANGE_SEQ, DataType::Int64, false),
        Field::new(
            COMMIT_TIMESTAMP,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new(XID, DataType::Int64, true),
    ]
}

/// The rows' schema for a table with `columns`: each nullable, since a delete
/// carries only the key and a truncate no column at all.
pub fn change_schema(columns: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = columns
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    fields.extend(metadata_fields());
    Arc::new(Schema::new(fields))
}

/// A schema-qualified PostgreSQL table name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    /// `schema.table` or `table` (in `public`); unquoted names fold to lower case as
    /// PostgreSQL folds them, `"Quoted"` ones are kept as written.
    pub fn parse(text: &str) -> Option<Self> {
        let parts = split_name(text)?;
        match parts.as_slice() {
            [name] => Some(Self {
                schema: "public".into(),
                name: name.clone(),
            }),
            [schema, name] => Some(Self {
                schema: schema.clone(),
                name: name.clone(),
            }),
            _ => None,
        }
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

fn split_name(text: &str) -> Option<Vec<String>> {
    split_qualified(text, '"', true)
}

/// The parts of a dotted name (`a.b`), each quoted with `quote` (doubled inside a quoted
/// part) or bare; bare parts fold to lower case when `fold` (PostgreSQL) and may hold no
/// white space. `None` for an empty part or anything else that is no name.
pub(crate) fn split_qualified(text: &str, quote: char, fold: bool) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut chars = text.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&quote) {
            chars.next();
            loop {
                match chars.next()? {
                    c if c == quote && chars.peek() == Some(&quote) => {
                        chars.next();
                        part.push(quote);
                    }
                    c if c == quote => break,
                    c => part.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied().filter(|c| *c != '.') {
                part.push(if fold { c.to_ascii_lowercase() } else { c });
                chars.next();
            }
            part = part.trim().to_string();
            if part.contains(char::is_whitespace) {
                return None;
            }
        }
        if part.is_empty() {
            return None;
        }
        parts.push(part);
        match chars.next() {
            None => return Some(parts),
            Some('.') => {}
            Some(_) => return None,
        }
    }
}

/// A resolved `read_postgres` call.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadPostgres {
    /// The table name that stands for this call in the flow's rewritten query.
    pub table: String,
    /// The name in `connections:` of pipeline.yaml.
    pub connection: String,
    /// The source table.
    pub source: TableName,
    /// The table's columns from `schema => 'ddl'`.
    pub declared_columns: Option<SchemaRef>,
    /// The table's columns as the server gave them when the run began.
    pub discovered_columns: Option<SchemaRef>,
    /// `max_changes_per_batch =>`: the changes one batch takes at most.
    pub max_changes_per_batch: u64,
    pub span: Span,
}

impl ReadPostgres {
    /// Names the source apart from every other of the pipeline: the key of its columns
    /// found at run time, and of its position in a flow's checkpoint.
    pub fn key(&self) -> String {
        format!("postgres:{}:{}", self.connection, self.source)
    }

    /// The rows' schema (table columns, then metadata), when the columns are known.
    pub fn schema(&self) -> Option<SchemaRef> {
        self.declared_columns
            .as_ref()
            .or(self.discovered_columns.as_ref())
            .map(|c| change_schema(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        let t = TableName::parse("public.Customers").unwrap();
        assert_eq!(
            (t.schema.as_str(), t.name.as_str()),
            ("public", "customers")
        );
        assert_eq!(TableName::parse("orders").unwrap().schema, "public");
        let t = TableName::parse("\"Sales\".\"Big \"\"T\"\"\"").unwrap();
        assert_eq!((t.schema.as_str(), t.name.as_str()), ("Sales", "Big \"T\""));
        for bad in ["a.b.c", "", "a.", "\"open"] {
            assert!(TableName::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_schema_is_the_columns_then_the_metadata() {
        let mut rp = ReadPostgres {
            table: "t".into(),
            connection: "crm".into(),
            source: TableName::parse("customers").unwrap(),
            declared_columns: None,
            discovered_columns: None,
            max_changes_per_batch: DEFAULT_MAX_CHANGES_PER_BATCH,
            span: Span::empty(),
        };
        assert!(rp.schema().is_none());
        rp.declared_columns = Some(Arc::new(Schema::new(vec![Field::new(
            "id",
            DataType::Int32,
            false,
        )])));
        let names: Vec<String> = rp
            .schema()
            .unwrap()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names,
            [
                "id",
                CHANGE_TYPE,
                COMMIT_LSN,
                CHANGE_SEQ,
                COMMIT_TIMESTAMP,
                XID
            ]
        );
    }
}
