//! The pipeline statements of the dialect. Every node keeps its source [`Span`];
//! expressions, data types and queries are sqlparser's AST.

use crate::sqlparser::ast::{DataType, Expr, Ident, Query};
use crate::sqlparser::tokenizer::Span;

/// One statement of a flow file.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// `CREATE … STREAMING TABLE | MATERIALIZED VIEW | VIEW …`
    CreateDataset(CreateDataset),
    /// `CREATE FLOW name AS AUTO CDC … | INSERT INTO …`
    CreateFlow(CreateFlow),
    /// The legacy `APPLY CHANGES INTO target …`, a flow named after its target.
    ApplyChanges(Box<AutoCdc>),
    /// `SET key = value` or `SET key`: configuration for the rest of the file.
    Set(SetConfig),
    /// `USE CATALOG c`, `USE SCHEMA s`, `USE DATABASE s` or `USE s`.
    Use(UseNamespace),
}

impl Statement {
    /// The span of the whole statement, from its first to its last token.
    pub fn span(&self) -> Span {
        match self {
            Statement::CreateDataset(d) => d.span,
            Statement::CreateFlow(f) => f.span,
            Statement::ApplyChanges(a) => a.span,
            Statement::Set(s) => s.span,
            Statement::Use(u) => u.span,
        }
    }
}

/// `SET key = value`: the value's text (up to the `;`, quotes included, as Spark keeps
/// it) is what a later `${key}` in the same file becomes (`preprocess`). `SET key`
/// alone shows a value in Spark and changes nothing; `value` is `None` then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetConfig {
    pub key: String,
    pub value: Option<String>,
    pub span: Span,
}

/// What a `USE` statement selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UseKind {
    Catalog,
    /// `USE SCHEMA s`, `USE DATABASE s`, or `USE s` (which may be `catalog.schema`).
    Schema,
}

/// `USE CATALOG c` / `USE SCHEMA s`: the default catalog or schema of the names after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UseNamespace {
    pub kind: UseKind,
    pub name: DatasetName,
    pub span: Span,
}

/// What a `CREATE` statement defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatasetKind {
    /// Incrementally maintained Delta table, fed by flows.
    StreamingTable,
    /// Delta table recomputed from its query.
    MaterializedView,
    /// A named query, never stored.
    View,
}

impl DatasetKind {
    /// The SQL words that define this kind, as printed.
    pub fn sql(self) -> &'static str {
        match self {
            DatasetKind::StreamingTable => "STREAMING TABLE",
            DatasetKind::MaterializedView => "MATERIALIZED VIEW",
            DatasetKind::View => "VIEW",
        }
    }

    /// A short lower-case name for messages.
    pub fn noun(self) -> &'static str {
        match self {
            DatasetKind::StreamingTable => "streaming table",
            DatasetKind::MaterializedView => "materialized view",
            DatasetKind::View => "view",
        }
    }
}

/// `CREATE [OR REFRESH] [PRIVATE|TEMPORARY] <kind> name [(columns, constraints)] [clauses] [AS query]`
#[derive(Debug, Clone, PartialEq)]
pub struct CreateDataset {
    pub kind: DatasetKind,
    pub or_refresh: bool,
    /// `PRIVATE` or `TEMPORARY`: visible inside the pipeline only, never published.
    pub private: bool,
    pub name: DatasetName,
    pub columns: Vec<ColumnDef>,
    pub expectations: Vec<Expectation>,
    /// Table constraints other than expectations (`PRIMARY KEY …`), kept verbatim.
    pub table_constraints: Vec<String>,
    pub comment: Option<String>,
    pub partitioned_by: Vec<Ident>,
    pub cluster_by: Vec<Ident>,
    pub properties: Vec<TableProperty>,
    pub location: Option<String>,
    pub query: Option<Box<Query>>,
    pub span: Span,
}

/// A dataset reference: `name`, `LIVE.name`, `schema.name` or `catalog.schema.name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetName {
    /// The parts as written, including a `LIVE` prefix.
    pub parts: Vec<Ident>,
    pub span: Span,
}

impl DatasetName {
    /// The dataset's own name: the last part.
    pub fn name(&self) -> &str {
        self.parts.last().map(|i| i.value.as_str()).unwrap_or("")
    }

    /// The parts before the name, without a leading `LIVE`.
    pub fn qualifier(&self) -> Vec<&str> {
        let n = self.parts.len().saturating_sub(1);
        let mut q: Vec<&str> = self.parts[..n].iter().map(|i| i.value.as_str()).collect();
        if q.first().is_some_and(|p| p.eq_ignore_ascii_case("live")) {
            q.remove(0);
        }
        q
    }
}

/// A column of a declared schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    pub name: Ident,
    pub data_type: DataType,
    pub not_null: bool,
    pub comment: Option<String>,
    /// `GENERATED ALWAYS AS (expr)`
    pub generated: Option<Expr>,
    /// `GENERATED { ALWAYS | BY DEFAULT } AS IDENTITY [(START WITH n INCREMENT BY m)]`
    pub identity: Option<Identity>,
    /// `DEFAULT expr`
    pub default: Option<Expr>,
    /// Informational constraints (`PRIMARY KEY`, `[FOREIGN KEY] REFERENCES t [(c)]`),
    /// kept as written: Databricks does not enforce them either.
    pub constraints: Vec<String>,
    pub span: Span,
}

/// An identity column: each row written gets the next value, `start`, `start + step`, …
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `ALWAYS`: the value is always generated; `BY DEFAULT`: only where none is given.
    pub always: bool,
    pub start: i64,
    pub step: i64,
    pub span: Span,
}

/// `CONSTRAINT name EXPECT (condition) [ON VIOLATION DROP ROW | FAIL UPDATE]`
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    pub name: Ident,
    pub condition: Expr,
    pub on_violation: OnViolation,
    pub span: Span,
}

/// What a violated expectation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnViolation {
    /// No `ON VIOLATION`: keep the row, count the violation.
    Warn,
    DropRow,
    FailUpdate,
}

/// One `key = value` of `TBLPROPERTIES`, both normalised to text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableProperty {
    pub key: String,
    pub value: String,
    pub span: Span,
}

/// `CREATE FLOW name [COMMENT '…'] AS …`
#[derive(Debug, Clone, PartialEq)]
pub struct CreateFlow {
    pub name: Ident,
    pub comment: Option<String>,
    pub body: FlowBody,
    pub span: Span,
}

/// What a flow does.
#[derive(Debug, Clone, PartialEq)]
pub enum FlowBody {
    AutoCdc(Box<AutoCdc>),
    /// `INSERT [ONCE] INTO target BY NAME query`: an append flow.
    InsertInto(InsertInto),
}

/// `INSERT [ONCE] INTO target BY NAME query`
#[derive(Debug, Clone, PartialEq)]
pub struct InsertInto {
    pub once: bool,
    pub target: DatasetName,
    pub query: Box<Query>,
}

/// The AUTO CDC specification shared by `CREATE FLOW … AUTO CDC` and `APPLY CHANGES`.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoCdc {
    pub once: bool,
    pub target: DatasetName,
    pub source: CdcSource,
    pub keys: Spanned<Vec<Ident>>,
    /// The legacy `WHERE condition` of `APPLY CHANGES`: rows to consider at all.
    pub filter: Option<Spanned<Expr>>,
    /// `IGNORE NULL UPDATES [ON …]`; `None` inside means every column.
    pub ignore_null_updates: Option<Spanned<Option<ColumnSelection>>>,
    pub apply_as_delete: Option<Spanned<Expr>>,
    pub apply_as_truncate: Option<Spanned<Expr>>,
    pub sequence_by: Spanned<Expr>,
    pub columns: Option<Spanned<ColumnSelection>>,
    pub stored_as: Option<Spanned<u64>>,
    /// `STORED AS BITEMPORAL` (Databricks Beta): parsed so that validation names it.
    pub stored_as_bitemporal: Option<Span>,
    /// `SYSTEM SEQUENCE BY expr`, the system-time order of a bitemporal target.
    pub system_sequence_by: Option<Spanned<Expr>>,
    pub track_history: Option<Spanned<ColumnSelection>>,
    /// True for the legacy `APPLY CHANGES INTO` spelling.
    pub legacy: bool,
    pub span: Span,
}

impl AutoCdc {
    /// The snapshot source of `AUTO CDC … FROM SNAPSHOT`.
    pub fn snapshot(&self) -> Option<&SnapshotSource> {
        match &self.source {
            CdcSource::Snapshot(s) => Some(s),
            _ => None,
        }
    }

    /// The SCD type, defaulting to 1 as documented.
    pub fn scd_type(&self) -> u64 {
        self.stored_as.as_ref().map_or(1, |s| s.node)
    }
}

/// The source of an AUTO CDC flow: `STREAM(name)`, `STREAM name` or `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRef {
    pub name: DatasetName,
    pub streaming: bool,
}

/// What an AUTO CDC flow reads: a dataset, or `(query)` (joins, unions or a QUALIFY
/// over `STREAM(…)` inputs, as TPC-DI's flows do). Resolution makes the query a view
/// of its own, read as a stream when it reads one.
#[derive(Debug, Clone, PartialEq)]
pub enum CdcSource {
    Dataset(SourceRef),
    /// `FROM (query)`; the span covers the parentheses.
    Query(Spanned<Box<Query>>),
    /// `FROM SNAPSHOT (query) [WITH VERSION (query)]`: the query gives the source's
    /// whole content, once per run or once per version its version query selects.
    Snapshot(Box<SnapshotSource>),
}

/// `FROM SNAPSHOT (query) [WITH VERSION (query)]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotSource {
    /// The snapshot's rows; the span covers `SNAPSHOT` and the parentheses.
    pub query: Spanned<Box<Query>>,
    /// The version query: one row naming the next snapshot to apply, none when there
    /// is none. Without it, each run's snapshot is versioned by the run's start time.
    pub version: Option<Spanned<Box<Query>>>,
}

impl CdcSource {
    /// Where the source is written.
    pub fn span(&self) -> Span {
        match self {
            CdcSource::Dataset(s) => s.name.span,
            CdcSource::Query(q) => q.span,
            CdcSource::Snapshot(s) => s.query.span,
        }
    }
}

/// `(a, b)` or `* EXCEPT (a, b)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnSelection {
    Only(Vec<Ident>),
    AllExcept(Vec<Ident>),
}

impl ColumnSelection {
    /// The columns named in the selection, whichever form it has.
    pub fn named(&self) -> &[Ident] {
        match self {
            ColumnSelection::Only(c) | ColumnSelection::AllExcept(c) => c,
        }
    }

    /// Applies the selection to a list of available column names, keeping their order.
    pub fn select<'a>(&self, available: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        let hit = |c: &str, list: &[Ident]| list.iter().any(|i| i.value.eq_ignore_ascii_case(c));
        available
            .into_iter()
            .filter(|c| match self {
                ColumnSelection::Only(list) => hit(c, list),
                ColumnSelection::AllExcept(list) => !hit(c, list),
            })
            .collect()
    }
}

/// A node and the span of the clause that introduced it (keyword included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spanned<T> {
    pub node: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(node: T, span: Span) -> Self {
        Self { node, span }
    }
}
