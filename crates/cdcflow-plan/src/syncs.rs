//! `syncs:` of pipeline.yaml: one declaration that captures every table of a list or a
//! pattern from one connection, each into its own bronze streaming table of changes
//! and its own AUTO CDC target(s), as Databricks' Lakeflow Connect ingestion pipelines
//! (`objects:` with `table_configuration`) and Databricks Labs' dlt-meta (an onboarding
//! file with per-table `keys`, `except_column_list`, `scd_type`, target names) do.
//!
//! Which tables a pattern matches, and their primary keys, only the server knows: the
//! run (and `validate`, when the server answers) asks it and loads the pipeline again
//! with the answer ([`SourceTable`]). Each table then becomes SQL of the pipeline's own
//! dialect ([`table_sql`]), planned and checked as a file of the pipeline would be.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::connections::ConnectionKind;

/// One entry of `syncs:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncConfig {
    /// A name under `connections:` (PostgreSQL, MySQL or MariaDB).
    pub connection: String,
    /// Tables or patterns (`shop.*`, `public.order_*`): `schema.table`, or `table` in
    /// the connection's database (MySQL) or `public` (PostgreSQL).
    pub tables: OneOrMany,
    /// Tables or patterns left out of those `tables` matches.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// `1` (default), `2`, or `[1, 2]`: a current table, one with history, or both.
    #[serde(default)]
    pub scd_type: Option<ScdTypes>,
    /// The name of each table's bronze streaming table of changes.
    #[serde(default = "default_bronze")]
    pub bronze_table: String,
    /// The name of each table's AUTO CDC target (SCD type 1, or 2 when only 2).
    #[serde(default = "default_target")]
    pub target: String,
    /// The name of the SCD type 2 target when `scd_type` is `[1, 2]`.
    #[serde(default = "default_history")]
    pub history_target: String,
    /// As `read_*(max_changes_per_batch => n)`.
    #[serde(default)]
    pub max_changes_per_batch: Option<u64>,
    /// Per table (as `tables` names it, or `schema.table`): what differs from the rest.
    #[serde(default)]
    pub overrides: BTreeMap<String, TableOverride>,
}

fn default_bronze() -> String {
    "{table}_changes".into()
}

fn default_target() -> String {
    "{table}".into()
}

fn default_history() -> String {
    "{table}_history".into()
}

/// A string or a list of strings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn items(&self) -> Vec<&str> {
        match self {
            Self::One(s) => vec![s.as_str()],
            Self::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// `scd_type:` as written: one type or a list.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ScdTypes {
    One(u8),
    Many(Vec<u8>),
}

impl ScdTypes {
    /// The SCD types to keep (1, 2 or both), or `None` when they are not 1 and/or 2.
    pub fn resolve(&self) -> Option<Scd> {
        let mut types = match self {
            Self::One(t) => vec![*t],
            Self::Many(v) => v.clone(),
        };
        types.sort_unstable();
        types.dedup();
        match types.as_slice() {
            [1] => Some(Scd::One),
            [2] => Some(Scd::Two),
            [1, 2] => Some(Scd::Both),
            _ => None,
        }
    }
}

/// Which AUTO CDC targets a table gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scd {
    One,
    Two,
    Both,
}

/// What one table of a sync does differently.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableOverride {
    /// The key columns, in place of the table's primary key (a table without one needs them).
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    /// Columns the targets leave out (the bronze table keeps every change as read).
    #[serde(default)]
    pub exclude_columns: Vec<String>,
    #[serde(default)]
    pub scd_type: Option<ScdTypes>,
    #[serde(default)]
    pub bronze_table: Option<String>,
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub history_target: Option<String>,
    /// SCD type 2: changes only of these columns make a new version (`TRACK HISTORY ON`).
    #[serde(default)]
    pub track_history_on: Option<Vec<String>>,
    /// SCD type 2: changes only of these columns make no new version
    /// (`TRACK HISTORY ON * EXCEPT`).
    #[serde(default)]
    pub track_history_except: Vec<String>,
}

/// A table a server has, as the run found it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct SourceTable {
    /// The table's schema (a MySQL database).
    pub schema: String,
    pub name: String,
    /// Its primary key's columns, in key order (empty: it has none).
    pub keys: Vec<String>,
}

impl std::fmt::Display for SourceTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

/// A `schema.table` pattern of `tables:` or `exclude:`.
#[derive(Debug, Clone)]
pub struct TablePattern {
    /// As written.
    pub text: String,
    schema: glob::Pattern,
    table: glob::Pattern,
}

impl TablePattern {
    /// `schema.table` or `table` (in `default_schema`); each part a glob (`*`, `?`,
    /// `[…]`), quoted as the server quotes names (PostgreSQL's bare names fold to
    /// lower case).
    pub fn parse(text: &str, kind: ConnectionKind, default_schema: &str) -> Option<Self> {
        let (quote, fold) = match kind {
            ConnectionKind::Postgres => ('"', true),
            ConnectionKind::Mysql => ('`', false),
        };
        let parts = crate::read_postgres::split_qualified(text, quote, fold)?;
        let (schema, table) = match parts.as_slice() {
            // A MySQL connection given by a DSN names no database of its own.
            [_] if default_schema.is_empty() => return None,
            [table] => (glob::Pattern::escape(default_schema), table.clone()),
            [schema, table] => (schema.clone(), table.clone()),
            _ => return None,
        };
        Some(Self {
            text: text.to_string(),
            schema: glob::Pattern::new(&schema).ok()?,
            table: glob::Pattern::new(&table).ok()?,
        })
    }

    pub fn matches(&self, schema: &str, table: &str) -> bool {
        self.schema.matches(schema) && self.table.matches(table)
    }

    /// Whether it names one table (no wildcard).
    pub fn is_exact(&self) -> bool {
        !self.text.contains(['*', '?', '['])
    }

    /// The table it names without wildcard, if any.
    pub fn exact_table(&self) -> Option<String> {
        let s = self.table.as_str();
        (!s.contains(['*', '?', '['])).then(|| s.to_string())
    }

    /// The schema it names without wildcard, if any: where the server is asked.
    pub fn exact_schema(&self) -> Option<String> {
        let s = self.schema.as_str();
        // An escaped default schema holds `[[]` for each `[`, and is exact.
        let plain = s.replace("[[]", "").replace("[]]", "");
        (!plain.contains(['*', '?', '['])).then(|| s.replace("[[]", "[").replace("[]]", "]"))
    }
}

/// The schema a bare table name is in: the connection's database (MySQL), `public`
/// (PostgreSQL).
pub fn default_schema(kind: ConnectionKind, database: Option<&str>) -> String {
    match kind {
        ConnectionKind::Postgres => "public".into(),
        ConnectionKind::Mysql => database.unwrap_or_default().to_string(),
    }
}

/// A template's placeholders.
pub const PLACEHOLDERS: &[&str] = &["{schema}", "{table}", "{sync}"];

/// `template` with the table's names in; `None` when it holds a `{…}` that is no
/// placeholder.
pub fn fill(template: &str, sync: &str, table: &SourceTable) -> Option<String> {
    let filled = template
        .replace("{schema}", &table.schema)
        .replace("{table}", &table.name)
        .replace("{sync}", sync);
    (!filled.contains(['{', '}'])).then_some(filled)
}

/// The names of the published tables a sync's `table` fed that `storage` (a folder)
/// holds, by the sync's templates (for a table gone from the server, whose expansion
/// is no more).
pub fn stored_names(
    storage: &std::path::Path,
    sync_name: &str,
    sync: &SyncConfig,
    source: (ConnectionKind, &str),
    table: &SourceTable,
) -> Vec<String> {
    fed_names(sync_name, sync, source, table)
        .into_iter()
        .filter(|name| {
            crate::delta_schema::has_commits(
                &storage.join("tables").join(crate::names::folder_name(name)),
            )
        })
        .collect()
}

/// The names of the published tables (bronze, SCD, history) a sync's `table` feeds by
/// the sync's templates, whether or not they were made.
pub fn fed_names(
    sync_name: &str,
    sync: &SyncConfig,
    (kind, default_schema): (ConnectionKind, &str),
    table: &SourceTable,
) -> Vec<String> {
    // The override the expansion took: the first whose name matches, as it matches.
    let over = sync
        .overrides
        .iter()
        .find(|(k, _)| {
            TablePattern::parse(k, kind, default_schema)
                .is_some_and(|p| p.matches(&table.schema, &table.name))
        })
        .map(|(_, o)| o.clone())
        .unwrap_or_default();
    [
        over.bronze_table.as_ref().unwrap_or(&sync.bronze_table),
        over.target.as_ref().unwrap_or(&sync.target),
        over.history_target.as_ref().unwrap_or(&sync.history_target),
    ]
    .into_iter()
    .filter_map(|t| fill(t, sync_name, table))
    .collect()
}

/// Tables from rows of (schema, table, a primary key column or none), in key order and
/// grouped by table, as a server's catalog lists them.
pub fn tables_of_rows(
    rows: impl IntoIterator<Item = (String, String, Option<String>)>,
) -> Vec<SourceTable> {
    let mut tables: Vec<SourceTable> = Vec::new();
    for (schema, name, key) in rows {
        match tables.last_mut() {
            Some(t) if t.schema == schema && t.name == name => t.keys.extend(key),
            _ => tables.push(SourceTable {
                schema,
                name,
                keys: key.into_iter().collect(),
            }),
        }
    }
    tables
}

/// What a table of a sync becomes: names, keys, and the SQL that defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncedTable {
    pub source: SourceTable,
    pub bronze: String,
    /// The SCD type 1 target.
    pub current: Option<String>,
    /// The SCD type 2 target (named by `target:` when only type 2 is kept).
    pub history: Option<String>,
    pub keys: Vec<String>,
    pub exclude_columns: Vec<String>,
    pub track_history_on: Option<Vec<String>>,
    pub track_history_except: Vec<String>,
    pub max_changes_per_batch: Option<u64>,
}

impl SyncedTable {
    /// The flow that keeps the SCD type 1 target.
    pub fn current_flow(&self) -> Option<String> {
        self.current.as_ref().map(|t| format!("{t}_apply"))
    }

    /// The flow that keeps the SCD type 2 target.
    pub fn history_flow(&self) -> Option<String> {
        self.history.as_ref().map(|t| format!("{t}_apply"))
    }
}

/// The change columns a capture adds, and how they order and mark changes.
struct ChangeColumns {
    function: &'static str,
    sequence: String,
    metadata: Vec<String>,
}

fn change_columns(kind: ConnectionKind) -> ChangeColumns {
    use crate::read_postgres::{CHANGE_SEQ, COMMIT_LSN};
    let (function, position, fields) = match kind {
        ConnectionKind::Postgres => (
            "read_postgres",
            COMMIT_LSN,
            crate::read_postgres::metadata_fields(),
        ),
        ConnectionKind::Mysql => (
            "read_mysql",
            crate::read_mysql::BINLOG_POSITION,
            crate::read_mysql::metadata_fields(),
        ),
    };
    ChangeColumns {
        function,
        sequence: format!("struct({position}, {CHANGE_SEQ})"),
        metadata: fields.iter().map(|f| f.name().clone()).collect(),
    }
}

/// A name quoted for the pipeline's SQL.
fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn idents(names: &[String]) -> String {
    names
        .iter()
        .map(|n| ident(n))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A string literal of the pipeline's SQL.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The table's name as `read_postgres`/`read_mysql` takes it, quoted.
fn source_name(kind: ConnectionKind, table: &SourceTable) -> String {
    let quote = |q: char, s: &str| {
        let doubled = s.replace(q, &format!("{q}{q}"));
        format!("{q}{doubled}{q}")
    };
    match kind {
        ConnectionKind::Postgres => {
            format!("{}.{}", quote('"', &table.schema), quote('"', &table.name))
        }
        ConnectionKind::Mysql => {
            format!("{}.{}", quote('`', &table.schema), quote('`', &table.name))
        }
    }
}

/// The SQL that defines `table`'s bronze table and targets.
pub fn table_sql(
    sync: &str,
    connection: &str,
    kind: ConnectionKind,
    table: &SyncedTable,
) -> String {
    let columns = change_columns(kind);
    let mut sql = format!(
        "-- Generated from pipeline.yaml, syncs: {sync}, for {source}.\n\
         CREATE OR REFRESH STREAMING TABLE {bronze}\n\
         COMMENT {comment}\n\
         AS SELECT * FROM STREAM {function}(connection => {connection}, table => {name}{max});\n",
        source = table.source,
        bronze = ident(&table.bronze),
        comment = literal(&format!(
            "Changes of {} (pipeline.yaml syncs: {sync})",
            table.source
        )),
        function = columns.function,
        connection = literal(connection),
        name = literal(&source_name(kind, &table.source)),
        max = table
            .max_changes_per_batch
            .map(|n| format!(", max_changes_per_batch => {n}"))
            .unwrap_or_default(),
    );
    let mut except = columns.metadata.clone();
    except.extend(table.exclude_columns.iter().cloned());
    let apply = |target: &str, flow: &str, scd2: bool| {
        let (source, truncate) = match scd2 {
            // SCD type 2 keeps history: a truncate is not applied to it (Databricks
            // allows APPLY AS TRUNCATE on SCD type 1 only), and its row, without a key,
            // is left out before the apply, which would refuse it for its null key on
            // every run: the versions a truncate removed stay open.
            true => (
                format!(
                    "(SELECT * FROM STREAM({}) WHERE _change_type <> 'truncate')",
                    ident(&table.bronze)
                ),
                String::new(),
            ),
            false => (
                format!("STREAM({})", ident(&table.bronze)),
                "APPLY AS TRUNCATE WHEN _change_type = 'truncate'\n".into(),
            ),
        };
        let history = match (scd2, &table.track_history_on) {
            (true, Some(on)) => format!("TRACK HISTORY ON ({})\n", idents(on)),
            (true, None) if !table.track_history_except.is_empty() => format!(
                "TRACK HISTORY ON * EXCEPT ({})\n",
                idents(&table.track_history_except)
            ),
            _ => String::new(),
        };
        format!(
            "\nCREATE OR REFRESH STREAMING TABLE {target};\n\
             CREATE FLOW {flow} AS AUTO CDC INTO {target}\n\
             FROM {source}\n\
             KEYS ({keys})\n\
             APPLY AS DELETE WHEN _change_type = 'delete'\n\
             {truncate}\
             SEQUENCE BY {sequence}\n\
             COLUMNS * EXCEPT ({except})\n\
             STORED AS SCD TYPE {scd}\n\
             {history};\n",
            target = ident(target),
            flow = ident(flow),
            keys = idents(&table.keys),
            sequence = columns.sequence,
            except = except.join(", "),
            scd = if scd2 { 2 } else { 1 },
        )
    };
    if let (Some(current), Some(flow)) = (&table.current, table.current_flow()) {
        sql.push_str(&apply(current, &flow, false));
    }
    if let (Some(history), Some(flow)) = (&table.history, table.history_flow()) {
        sql.push_str(&apply(history, &flow, true));
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(schema: &str, name: &str) -> SourceTable {
        SourceTable {
            schema: schema.into(),
            name: name.into(),
            keys: vec!["id".into()],
        }
    }

    #[test]
    fn patterns_match_schema_and_table() {
        let p = TablePattern::parse("shop.order_*", ConnectionKind::Mysql, "x").expect("a pattern");
        assert!(p.matches("shop", "order_items"));
        assert!(!p.matches("shop", "orders"));
        assert!(!p.matches("other", "order_items"));
        assert_eq!(p.exact_schema().as_deref(), Some("shop"));
        let bare =
            TablePattern::parse("Orders", ConnectionKind::Postgres, "public").expect("a pattern");
        assert!(
            bare.matches("public", "orders"),
            "bare names fold in PostgreSQL"
        );
        assert!(bare.is_exact());
        let any =
            TablePattern::parse("*.*", ConnectionKind::Postgres, "public").expect("a pattern");
        assert_eq!(any.exact_schema(), None);
        assert!(TablePattern::parse("a.b.c", ConnectionKind::Mysql, "x").is_none());
    }

    #[test]
    fn templates_fill_and_refuse_unknown_placeholders() {
        let t = table("shop", "orders");
        assert_eq!(
            fill("{schema}_{table}", "s", &t).as_deref(),
            Some("shop_orders")
        );
        assert_eq!(
            fill("{sync}_{table}_x", "s", &t).as_deref(),
            Some("s_orders_x")
        );
        assert_eq!(fill("{tabel}", "s", &t), None);
    }

    #[test]
    fn scd_types() {
        assert_eq!(ScdTypes::One(2).resolve(), Some(Scd::Two));
        assert_eq!(ScdTypes::Many(vec![2, 1]).resolve(), Some(Scd::Both));
        assert_eq!(ScdTypes::One(3).resolve(), None);
    }
}
