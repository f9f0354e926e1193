//! A captured table's columns as the server describes them (`information_schema`), the
//! Arrow type each becomes, and what a table must be to be captured: a base table of a
//! transactional engine with a primary key, and columns of types and character sets
//! the binary log and a `SELECT` give the same values for.

use std::sync::Arc;

use cdcflow_plan::read_mysql::MysqlTable;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::connection::MysqlError;

/// A column of the source table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableColumn {
    pub name: String,
    /// `DATA_TYPE`, lower case: `int`, `varchar`, `enum`, …
    pub data_type: String,
    /// `COLUMN_TYPE` as the server writes it (an enum's members keep their case): `int(10)
    /// unsigned`, `enum('New','Paid')`, `decimal(12,2)`, …
    pub column_type: String,
    pub precision: Option<u64>,
    pub scale: Option<u64>,
    pub nullable: bool,
    /// Its place in the primary key, from 1.
    pub key_position: Option<u32>,
    /// `CHARACTER_SET_NAME` of a text column.
    pub charset: Option<String>,
    /// Declared STRING by the pipeline (`schema =>`).
    pub keep_text: bool,
    /// Its default as `information_schema.COLUMNS` gives it, when it has one other than
    /// null: added to a table with rows, it gives them a value the log never carries.
    pub default: Option<String>,
}

impl TableColumn {
    pub fn unsigned(&self) -> bool {
        self.column_type.to_ascii_lowercase().contains("unsigned")
    }

    /// The Arrow type of the column's values (the Databricks type of docs/sources.md).
    pub fn arrow_type(&self) -> DataType {
        if self.keep_text {
            return DataType::Utf8;
        }
        let unsigned = self.unsigned();
        match self.data_type.as_str() {
            "tinyint" if !unsigned => DataType::Int8,
            "tinyint" => DataType::Int16,
            "smallint" if !unsigned => DataType::Int16,
            "smallint" | "mediumint" => DataType::Int32,
            "int" | "integer" if !unsigned => DataType::Int32,
            "int" | "integer" => DataType::Int64,
            "bigint" if !unsigned => DataType::Int64,
            "bigint" => DataType::Decimal128(20, 0),
            "decimal" | "numeric" => {
                let precision = self.precision.and_then(|p| u8::try_from(p).ok());
                let scale = self.scale.and_then(|s| i8::try_from(s).ok());
                match (precision, scale) {
                    (Some(p @ 1..=38), Some(s)) if s >= 0 && s.unsigned_abs() <= p => {
                        DataType::Decimal128(p, s)
                    }
                    _ => DataType::Utf8,
                }
            }
            "float" => DataType::Float32,
            "double" | "real" => DataType::Float64,
            "bit" if self.column_type.eq_ignore_ascii_case("bit(1)") => DataType::Boolean,
            "year" => DataType::Int16,
            "date" => DataType::Date32,
            "datetime" => DataType::Timestamp(TimeUnit::Microsecond, None),
            "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            kind if is_binary(kind) => DataType::Binary,
            _ => DataType::Utf8,
        }
    }

    /// The values of an `enum(…)` or `set(…)` column, in their declared order (the
    /// binary log gives an enum's index and a set's bits).
    pub fn members(&self) -> Vec<String> {
        let Some(list) = self
            .column_type
            .split_once('(')
            .and_then(|(_, rest)| rest.strip_suffix(')'))
        else {
            return vec![];
        };
        let mut members = vec![];
        let mut chars = list.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\'' {
                continue;
            }
            let mut member = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\'' if chars.peek() == Some(&'\'') => {
                        chars.next();
                        member.push('\'');
                    }
                    '\'' => break,
                    '\\' => {
                        if let Some(next) = chars.next() {
                            member.push(next);
                        }
                    }
                    c => member.push(c),
                }
            }
            members.push(member);
        }
        members
    }

    /// The declared length of a `binary(n)` column, whose values a `SELECT` gives padded
    /// with zero bytes.
    pub fn binary_length(&self) -> Option<usize> {
        (self.data_type == "binary")
            .then(|| self.column_type.get(..7))
            .flatten()
            .filter(|head| head.eq_ignore_ascii_case("binary("))
            .and_then(|_| self.column_type.get(7..))
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|n| n.parse().ok())
    }

    /// Why the column cannot be captured exactly, if it cannot.
    fn unreadable(&self) -> Option<String> {
        let kind = self.data_type.as_str();
        if !KNOWN_TYPES.contains(&kind) && !SPATIAL.contains(&kind) {
            return Some(format!(
                "column `{}` has type {}, which read_mysql does not read (the binary log and a SELECT give its values in different forms)",
                self.name, self.column_type
            ));
        }
        match self.charset.as_deref() {
            None | Some("utf8mb4" | "utf8mb3" | "utf8" | "ascii" | "latin1" | "binary") => None,
            Some(other) => Some(format!(
                "column `{}` is in character set {other}; read_mysql reads utf8mb4, utf8mb3, ascii and latin1 text",
                self.name
            )),
        }
    }
}

fn is_binary(data_type: &str) -> bool {
    matches!(
        data_type,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "bit"
    ) || SPATIAL.contains(&data_type)
}

/// The spatial types (a geometry, as stored).
pub(crate) const SPATIAL: &[&str] = &[
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
    "geomcollection",
];

/// The types read_mysql reads, besides the spatial ones.
const KNOWN_TYPES: &[&str] = &[
    "tinyint",
    "smallint",
    "mediumint",
    "int",
    "integer",
    "bigint",
    "decimal",
    "numeric",
    "float",
    "double",
    "real",
    "bit",
    "year",
    "date",
    "datetime",
    "timestamp",
    "time",
    "char",
    "varchar",
    "tinytext",
    "text",
    "mediumtext",
    "longtext",
    "enum",
    "set",
    "json",
    "binary",
    "varbinary",
    "tinyblob",
    "blob",
    "mediumblob",
    "longblob",
];

/// The schema of the table's columns (each nullable when the server says so).
pub fn table_schema(columns: &[TableColumn]) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(&c.name, c.arrow_type(), c.nullable))
            .collect::<Vec<_>>(),
    ))
}

/// The primary key's columns, in key order: their places among `columns`.
pub fn key_places(columns: &[TableColumn]) -> Vec<usize> {
    let mut keyed: Vec<(u32, usize)> = columns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.key_position.map(|k| (k, i)))
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

type ColumnRow = (
    String,
    String,
    String,
    Option<u64>,
    Option<u64>,
    String,
    Option<String>,
    Option<u32>,
    Option<String>,
);

/// The table's columns, in order, checked capturable; an error naming the table when
/// it is missing, not a base table, not transactional, without a primary key, or has
/// a column read_mysql cannot read exactly.
pub async fn read(conn: &mut Conn, table: &MysqlTable) -> Result<Vec<TableColumn>, MysqlError> {
    let about: Option<(String, Option<String>)> = conn
        .exec_first(
            "SELECT TABLE_TYPE, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&table.database, &table.name),
        )
        .await
        .map_err(|e| server_error(table, &e))?;
    let Some((kind, engine)) = about else {
        return Err(MysqlError::new(
            format!("table {table} does not exist (or the connection's user cannot see it)"),
            "check `table =>` of read_mysql (database.table, as the server spells it) and the user's privileges (SELECT on the table)",
        ));
    };
    if kind != "BASE TABLE" {
        return Err(MysqlError::new(
            format!(
                "{table} is a {}, not a table: the binary log records changes to tables",
                kind.to_lowercase()
            ),
            "read the table the view selects from",
        ));
    }
    let engine = engine.unwrap_or_default();
    if !engine.eq_ignore_ascii_case("InnoDB") {
        return Err(MysqlError::new(
            format!(
                "table {table} uses the {engine} engine: read_mysql copies a table inside a consistent snapshot, which only a transactional engine (InnoDB) gives"
            ),
            format!(
                "convert the table: ALTER TABLE {} ENGINE = InnoDB",
                table.sql()
            ),
        ));
    }
    let rows: Vec<ColumnRow> = conn
        .exec(
            "SELECT c.COLUMN_NAME, LOWER(c.DATA_TYPE), c.COLUMN_TYPE, c.NUMERIC_PRECISION, c.NUMERIC_SCALE, c.IS_NULLABLE, c.CHARACTER_SET_NAME, k.ORDINAL_POSITION, c.COLUMN_DEFAULT
             FROM information_schema.COLUMNS c
             LEFT JOIN information_schema.KEY_COLUMN_USAGE k
               ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME
              AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY'
             WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ?
             ORDER BY c.ORDINAL_POSITION",
            (&table.database, &table.name),
        )
        .await
        .map_err(|e| server_error(table, &e))?;
    let columns: Vec<TableColumn> = rows
        .into_iter()
        .map(
            |(name, data_type, column_type, precision, scale, nullable, charset, key, default)| {
                TableColumn {
                    name,
                    data_type,
                    column_type,
                    precision,
                    scale,
                    nullable: nullable == "YES",
                    key_position: key,
                    charset,
                    keep_text: false,
                    // MariaDB writes a null default as the text NULL (and quotes a text
                    // default); MySQL gives SQL null.
                    default: default.filter(|d| !d.eq_ignore_ascii_case("NULL")),
                }
            },
        )
        .collect();
    if key_places(&columns).is_empty() {
        return Err(MysqlError::new(
            format!(
                "table {table} has no primary key: its changes cannot be told apart by key, nor its snapshot copied in key order"
            ),
            format!(
                "give the table a primary key (ALTER TABLE {} ADD PRIMARY KEY (…)), or read it with read_query",
                table.sql()
            ),
        ));
    }
    // The server applies a foreign key's cascade inside the storage engine and logs no
    // row of it: the child table's cascaded changes would never reach the pipeline.
    let cascades: Vec<(String, String, String, String)> = conn
        .exec(
            "SELECT CONSTRAINT_NAME, REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE
             FROM information_schema.REFERENTIAL_CONSTRAINTS
             WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?
               AND (DELETE_RULE NOT IN ('RESTRICT', 'NO ACTION') OR UPDATE_RULE NOT IN ('RESTRICT', 'NO ACTION'))",
            (&table.database, &table.name),
        )
        .await
        .map_err(|e| server_error(table, &e))?;
    if let Some((name, parent, on_delete, on_update)) = cascades.first() {
        return Err(MysqlError::new(
            format!(
                "table {table} has foreign key `{name}` to `{parent}` with ON DELETE {on_delete} ON UPDATE {on_update}: the server logs no row of what a cascade changes, so those changes would never reach the pipeline"
            ),
            format!(
                "drop the cascade (ALTER TABLE {} DROP FOREIGN KEY …, then add it again with RESTRICT, the application deleting the children itself), or read the table with read_query",
                table.sql()
            ),
        ));
    }
    if let Some(key) = key_places(&columns)
        .into_iter()
        .filter_map(|k| columns.get(k))
        .find(|c| matches!(c.data_type.as_str(), "enum" | "set"))
    {
        return Err(MysqlError::new(
            format!(
                "table {table}: primary key column `{}` is an {}, which MySQL orders by its members' places but compares by their names, so its copy cannot go in key order",
                key.name, key.data_type
            ),
            "read the table with read_query, or key it by another column",
        ));
    }
    if let Some(why) = columns.iter().find_map(TableColumn::unreadable) {
        return Err(MysqlError::new(
            format!("table {table}: {why}"),
            "leave the column out of the captured table (a view cannot be captured), or report the type",
        ));
    }
    Ok(columns)
}

/// The table's rows as the server estimates them (InnoDB's statistics), for a
/// progress line; `None` when it cannot say.
pub async fn estimated_rows(conn: &mut Conn, table: &MysqlTable) -> Option<u64> {
    conn.exec_first::<Option<u64>, _, _>(
        "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
        (&table.database, &table.name),
    )
    .await
    .ok()
    .flatten()
    .flatten()
}

/// An error of a statement on the server, naming the table.
pub fn server_error(table: &MysqlTable, e: &mysql_async::Error) -> MysqlError {
    let mut error = MysqlError::new(
        format!("reading {table}: {e}"),
        "check that the server is up and the connection's user may read the table",
    );
    error.unreachable = matches!(e, mysql_async::Error::Io(_));
    error
}

/// A nullable column of a type, for tests.
#[cfg(test)]
pub(crate) fn column(data_type: &str, column_type: &str) -> TableColumn {
    TableColumn {
        name: "c".into(),
        data_type: data_type.into(),
        column_type: column_type.into(),
        precision: None,
        scale: None,
        nullable: true,
        key_position: None,
        charset: None,
        keep_text: false,
        default: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_types_keep_their_range() {
        let t = |d: &str, c: &str| column(d, c).arrow_type();
        assert_eq!(t("tinyint", "tinyint(4)"), DataType::Int8);
        assert_eq!(t("tinyint", "tinyint(3) unsigned"), DataType::Int16);
        assert_eq!(t("smallint", "smallint(6)"), DataType::Int16);
        assert_eq!(t("smallint", "smallint(5) unsigned"), DataType::Int32);
        assert_eq!(t("mediumint", "mediumint(8) unsigned"), DataType::Int32);
        assert_eq!(t("int", "int(11)"), DataType::Int32);
        assert_eq!(t("int", "int(10) unsigned"), DataType::Int64);
        assert_eq!(t("bigint", "bigint(20)"), DataType::Int64);
        assert_eq!(
            t("bigint", "bigint(20) unsigned"),
            DataType::Decimal128(20, 0)
        );
        assert_eq!(t("bit", "bit(1)"), DataType::Boolean);
        assert_eq!(t("bit", "bit(12)"), DataType::Binary);
    }

    #[test]
    fn enum_members_are_read_from_the_column_type() {
        let c = column("enum", "enum('new','it''s','a,b')");
        assert_eq!(c.members(), ["new", "it's", "a,b"]);
        assert_eq!(column("binary", "binary(16)").binary_length(), Some(16));
    }
}
