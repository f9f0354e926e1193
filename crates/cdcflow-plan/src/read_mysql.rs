//! `STREAM read_mysql(connection => 'shop', table => 'shop.orders' [, schema =>
//! 'id INT, …'] [, max_changes_per_batch => 100000])`: a MySQL or MariaDB table's
//! snapshot and then its changes from the server's binary log, as a streaming source
//! (docs/sources.md). This module knows the call's options, the change metadata
//! columns every row carries, and how a table name is written; reading the server is
//! `cdcflow-mysql`'s, which the planner never compiles.
//!
//! As for `read_postgres`, the table's columns are known here only when `schema =>`
//! declares them; otherwise the run asks the server before planning
//! ([`ReadMysql::discovered_columns`]).

use std::sync::Arc;

use cdcflow_sql::Span;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

pub use crate::read_postgres::{
    CHANGE_SEQ, CHANGE_TYPE, COMMIT_TIMESTAMP, DEFAULT_MAX_CHANGES_PER_BATCH, OPTIONS,
};

/// Where the change's transaction ends in the binary log, as one number that orders
/// every transaction of the server: the log file's number times 2^32 plus the byte
/// offset of the end of its commit event (the snapshot's position for snapshot rows).
pub const BINLOG_POSITION: &str = "_binlog_position";
/// The binary log file the transaction ends in (`mysql-bin.000042`).
pub const BINLOG_FILE: &str = "_binlog_file";

/// The change metadata columns, after the table's own.
pub fn metadata_fields() -> Vec<Field> {
    vec![
        Field::new(CHANGE_TYPE, DataType::Utf8, false),
        Field::new(BINLOG_POSITION, DataType::Int64, false),
        Field::new(CHANGE_SEQ, DataType::Int64, false),
        Field::new(
            COMMIT_TIMESTAMP,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new(BINLOG_FILE, DataType::Utf8, false),
    ]
}

/// The rows' schema for a table with `columns`: each nullable, since a truncate
/// carries no column at all.
pub fn change_schema(columns: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = columns
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    fields.extend(metadata_fields());
    Arc::new(Schema::new(fields))
}

/// A MySQL table: its database (MySQL's "schema") and name, as the server spells them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MysqlTable {
    pub database: String,
    pub name: String,
}

impl MysqlTable {
    /// `database.table`, or `table` in `default_database` (the connection's); names
    /// may be quoted with backticks (`` `my db`.`order items` ``). MySQL compares table
    /// names as the server's file system does, so they are kept as written.
    pub fn parse(text: &str, default_database: Option<&str>) -> Option<Self> {
        let parts = split_name(text)?;
        match parts.as_slice() {
            [name] => Some(Self {
                database: default_database?.to_string(),
                name: name.clone(),
            }),
            [database, name] => Some(Self {
                database: database.clone(),
                name: name.clone(),
            }),
            _ => None,
        }
    }

    /// The table as SQL names it, quoted.
    pub fn sql(&self) -> String {
        format!("{}.{}", quote(&self.database), quote(&self.name))
    }
}

/// An identifier quoted with backticks.
pub fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

impl std::fmt::Display for MysqlTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.database, self.name)
    }
}

fn split_name(text: &str) -> Option<Vec<String>> {
    crate::read_postgres::split_qualified(text, '`', false)
}

/// A resolved `read_mysql` call.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadMysql {
    /// The table name that stands for this call in the flow's rewritten query.
    pub table: String,
    /// The name in `connections:` of pipeline.yaml.
    pub connection: String,
    /// The source table.
    pub source: MysqlTable,
    /// The table's columns from `schema => 'ddl'`.
    pub declared_columns: Option<SchemaRef>,
    /// The table's columns as the server gave them when the run began.
    pub discovered_columns: Option<SchemaRef>,
    /// `max_changes_per_batch =>`: the changes one batch takes at most (whole
    /// transactions).
    pub max_changes_per_batch: u64,
    pub span: Span,
}

impl ReadMysql {
    /// Names the source apart from every other of the pipeline: the key of its columns
    /// found at run time, and of its position in a flow's checkpoint.
    pub fn key(&self) -> String {
        format!("mysql:{}:{}", self.connection, self.source)
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
    fn table_names_keep_their_case_and_take_backticks() {
        let t = MysqlTable::parse("Shop.Orders", None).expect("a table name");
        assert_eq!((t.database.as_str(), t.name.as_str()), ("Shop", "Orders"));
        let t = MysqlTable::parse("orders", Some("shop")).expect("a table name");
        assert_eq!(t.to_string(), "shop.orders");
        assert_eq!(t.sql(), "`shop`.`orders`");
        let t = MysqlTable::parse("`my db`.`a``b.c`", None).expect("a table name");
        assert_eq!((t.database.as_str(), t.name.as_str()), ("my db", "a`b.c"));
        for bad in ["a.b.c", "", "a.", "`open", "two words"] {
            assert!(MysqlTable::parse(bad, Some("d")).is_none(), "{bad}");
        }
        assert!(MysqlTable::parse("orders", None).is_none());
    }

    #[test]
    fn the_schema_is_the_columns_then_the_metadata() {
        let rm = ReadMysql {
            table: "t".into(),
            connection: "shop".into(),
            source: MysqlTable::parse("shop.orders", None).expect("a table name"),
            declared_columns: Some(Arc::new(Schema::new(vec![Field::new(
                "id",
                DataType::Int32,
                false,
            )]))),
            discovered_columns: None,
            max_changes_per_batch: DEFAULT_MAX_CHANGES_PER_BATCH,
            span: Span::empty(),
        };
        assert_eq!(rm.key(), "mysql:shop:shop.orders");
        let schema = rm.schema().expect("a table name");
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                CHANGE_TYPE,
                BINLOG_POSITION,
                CHANGE_SEQ,
                COMMIT_TIMESTAMP,
                BINLOG_FILE
            ]
        );
        assert!(schema.field(0).is_nullable());
    }
}
