//! An AUTO CDC flow, resolved against its source schema: canonical column names and
//! DataFusion expressions ([`AutoCdcSpec`]), and the logical plan node that applies the
//! changes to the target ([`AutoCdcNode`]). The apply semantics live in the runtime;
//! this node only says *what* is applied, so any engine can execute the plan.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::common::{Column, DFSchema, DFSchemaRef, Result, TableReference};
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, LogicalPlanBuilder, TableSource, UserDefinedLogicalNodeCore, lit,
    when,
};

/// `__START_AT`: where an SCD type 2 version starts (inclusive), of the sequence type.
pub const START_AT: &str = "__START_AT";
/// `__END_AT`: where it ends (exclusive); null for the current version.
pub const END_AT: &str = "__END_AT";
/// Prefix of every column the engine keeps for itself; sources may not use it.
pub const RESERVED_PREFIX: &str = "__cdcflow_";

/// One field of the SEQUENCE BY ordering.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct SequenceField {
    /// The column name when the field is a plain column, else `seq<i>`.
    pub name: String,
    pub expr: Expr,
    pub data_type: DataType,
}

/// What an AUTO CDC flow does, with every name resolved to the source's spelling.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct AutoCdcSpec {
    pub flow: String,
    pub target: String,
    pub source: String,
    pub streaming: bool,
    pub once: bool,
    pub keys: Vec<String>,
    /// Compared left to right, as STRUCT and tuple sequencing are.
    pub sequence: Vec<SequenceField>,
    pub delete_when: Option<Expr>,
    pub truncate_when: Option<Expr>,
    /// The legacy `APPLY CHANGES … WHERE`.
    pub filter: Option<Expr>,
    /// The columns written to the target, in source order.
    pub columns: Vec<String>,
    pub scd_type: u8,
    /// SCD type 2: the columns whose changes open a new version.
    pub track_history: Vec<String>,
    /// Columns whose nulls in an update keep the stored value.
    pub ignore_null_updates: Vec<String>,
    /// `FROM SNAPSHOT`: the changes are found by comparing snapshots, and the source
    /// is the snapshot's view; the events carry [`crate::snapshot::VERSION_COLUMN`] and
    /// [`crate::snapshot::DELETED_COLUMN`].
    pub snapshot: Option<crate::snapshot::SnapshotSpec>,
}

impl AutoCdcSpec {
    /// The Arrow type of `__START_AT`/`__END_AT`: the sequence type, or a struct of
    /// the sequence fields for multi-field sequencing.
    pub fn sequence_type(&self) -> DataType {
        match self.sequence.as_slice() {
            [one] => one.data_type.clone(),
            many => DataType::Struct(Fields::from(
                many.iter()
                    .map(|f| Field::new(&f.name, f.data_type.clone(), true))
                    .collect::<Vec<_>>(),
            )),
        }
    }

    /// The target table's schema for a source of `source` schema.
    pub fn target_schema(&self, source: &Schema) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .columns
            .iter()
            .filter_map(|c| source.field_with_name(c).ok())
            .map(|f| {
                let nullable = f.is_nullable() || !self.keys.contains(f.name());
                f.clone().with_nullable(nullable)
            })
            .collect();
        if self.scd_type == 2 {
            fields.push(Field::new(START_AT, self.sequence_type(), true));
            fields.push(Field::new(END_AT, self.sequence_type(), true));
        }
        Arc::new(Schema::new(fields))
    }
}

/// The column a runtime adds to the source rows to say where each row was read from
/// (a dictionary of names), so that an event's error can name its file; the event
/// projection passes it through.
pub const ORIGIN: &str = "__cdcflow_origin";
/// The event projection's sequence fields, `__cdcflow_seq0`, `__cdcflow_seq1`, …
pub const SEQ_PREFIX: &str = "__cdcflow_seq";
/// The event projection's operation ([`UPSERT`], [`DELETE`] or [`TRUNCATE`]).
pub const OPERATION: &str = "__cdcflow_operation";
/// An event's operation: its columns are the key's new values.
pub const UPSERT: i8 = 0;
/// An event's operation: APPLY AS DELETE WHEN held.
pub const DELETE: i8 = 1;
/// An event's operation: APPLY AS TRUNCATE WHEN held; it has no key.
pub const TRUNCATE: i8 = 2;

/// What applying a batch did, the one row an AUTO CDC node returns, as a DML statement
/// returns its count: every column a non-negative count.
pub const APPLIED_COLUMNS: [&str; 11] = [
    "events",
    "upserted",
    "deleted",
    "late",
    "late_applied",
    "late_dropped",
    "duplicates",
    "late_after_gc",
    "truncated",
    "tombstones_collected",
    "rows_written",
];
/// Beside the counts: the earliest source commit time among the events, when the
/// sequence is a timestamp (µs since the epoch; null otherwise), for the lag a run
/// reports.
pub const APPLIED_OLDEST_CHANGE: &str = "oldest_change";
/// Beside the counts: a warning to show (the columns the batch added to the published
/// table; null when none).
pub const APPLIED_NOTE: &str = "note";
/// A batch applied in slices: each slice's task (where it ran, its counts and time) as
/// JSON; null for a batch applied whole.
pub const APPLIED_SLICES: &str = "slices";

/// The schema of an AUTO CDC node's result: [`APPLIED_COLUMNS`], then
/// [`APPLIED_OLDEST_CHANGE`], [`APPLIED_NOTE`] and [`APPLIED_SLICES`].
pub fn applied_schema() -> SchemaRef {
    let mut fields: Vec<Field> = APPLIED_COLUMNS
        .iter()
        .map(|c| Field::new(*c, DataType::UInt64, false))
        .collect();
    fields.push(Field::new(APPLIED_OLDEST_CHANGE, DataType::Int64, true));
    fields.push(Field::new(APPLIED_NOTE, DataType::Utf8, true));
    fields.push(Field::new(APPLIED_SLICES, DataType::Utf8, true));
    Arc::new(Schema::new(fields))
}

/// The logical plan node: apply the events of `input` (the flow's event projection,
/// [`AutoCdcNode::plan`]) to the target. Its result is what the apply did
/// ([`applied_schema`]); the target's rows are [`AutoCdcNode::target`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AutoCdcNode {
    pub input: LogicalPlan,
    pub spec: Arc<AutoCdcSpec>,
    /// The target table's rows, qualified by its name.
    pub target: DFSchemaRef,
    schema: DFSchemaRef,
}

impl PartialOrd for AutoCdcNode {
    // The schemas are derived from the other two fields, so they decide the order.
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        match self.input.partial_cmp(&other.input) {
            Some(std::cmp::Ordering::Equal) => self.spec.partial_cmp(&other.spec),
            o => o,
        }
    }
}

impl AutoCdcNode {
    /// The node over `input`, the flow's event projection.
    pub fn try_new(input: LogicalPlan, spec: Arc<AutoCdcSpec>) -> Result<Self> {
        let target = spec.target_schema(input.schema().as_arrow());
        let target = Arc::new(DFSchema::try_from_qualified_schema(
            TableReference::bare(spec.target.as_str()),
            &target,
        )?);
        let schema = Arc::new(DFSchema::try_from(applied_schema())?);
        Ok(Self {
            input,
            spec,
            target,
            schema,
        })
    }

    /// The flow's plan over `source` (the source dataset's rows): its WHERE, then the
    /// event projection (the target's columns, the sequence fields, the operation, and
    /// [`ORIGIN`] when the source has it), then the node. Validation plans it over an
    /// empty table of the source's schema; a run over the batch's rows.
    pub fn plan(spec: Arc<AutoCdcSpec>, source: Arc<dyn TableSource>) -> Result<LogicalPlan> {
        let scan =
            LogicalPlanBuilder::scan(TableReference::bare(spec.source.as_str()), source, None)?;
        let filtered = match &spec.filter {
            Some(w) => scan.filter(w.clone())?,
            None => scan,
        };
        let has_origin = filtered.schema().has_column_with_unqualified_name(ORIGIN);
        let column = |name: &str| Expr::Column(Column::new_unqualified(name));
        let mut exprs: Vec<Expr> = spec.columns.iter().map(|c| column(c)).collect();
        exprs.extend(
            spec.sequence
                .iter()
                .enumerate()
                .map(|(i, f)| f.expr.clone().alias(format!("{SEQ_PREFIX}{i}"))),
        );
        exprs.push(operation_expr(&spec)?.alias(OPERATION));
        if has_origin {
            exprs.push(column(ORIGIN));
        }
        let events = filtered.project(exprs)?.build()?;
        Ok(LogicalPlan::Extension(Extension {
            node: Arc::new(Self::try_new(events, spec)?),
        }))
    }

    /// The node of `plan`, when `plan` is an AUTO CDC flow's.
    pub fn of(plan: &LogicalPlan) -> Option<&Self> {
        match plan {
            LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<Self>(),
            _ => None,
        }
    }
}

/// The operation of an event: TRUNCATE WHEN first, then DELETE WHEN, else an upsert.
fn operation_expr(spec: &AutoCdcSpec) -> Result<Expr> {
    let mut cases: Vec<(Expr, i8)> = Vec::new();
    if let Some(t) = &spec.truncate_when {
        cases.push((t.clone(), TRUNCATE));
    }
    if let Some(d) = &spec.delete_when {
        cases.push((d.clone(), DELETE));
    }
    let Some(((first, v), rest)) = cases.split_first() else {
        return Ok(lit(UPSERT));
    };
    let mut case = when(first.clone(), lit(*v));
    for (cond, v) in rest {
        case = case.when(cond.clone(), lit(*v));
    }
    case.otherwise(lit(UPSERT))
}

impl UserDefinedLogicalNodeCore for AutoCdcNode {
    fn name(&self) -> &str {
        "AutoCdc"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    /// None of its own: the event projection below it holds the flow's expressions.
    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.spec;
        if let Some(snapshot) = &s.snapshot {
            let versions = match &snapshot.version_view {
                Some(view) => format!(
                    "{} {} of {view}",
                    snapshot.version.name(),
                    snapshot.version.data_type()
                ),
                None => format!("the run's start ({})", snapshot.version.data_type()),
            };
            write!(
                f,
                "AutoCdcFromSnapshot: target={} keys=[{}] scd_type={} version=[{versions}]",
                s.target,
                s.keys.join(", "),
                s.scd_type
            )?;
            if s.scd_type == 2 {
                write!(f, " track_history=[{}]", s.track_history.join(", "))?;
            }
            return write!(f, " columns=[{}]", s.columns.join(", "));
        }
        let seq: Vec<String> = s.sequence.iter().map(|f| f.expr.to_string()).collect();
        write!(
            f,
            "AutoCdc: target={} keys=[{}] sequence_by=[{}] scd_type={}",
            s.target,
            s.keys.join(", "),
            seq.join(", "),
            s.scd_type
        )?;
        if let Some(d) = &s.delete_when {
            write!(f, " delete_when=[{d}]")?;
        }
        if let Some(t) = &s.truncate_when {
            write!(f, " truncate_when=[{t}]")?;
        }
        if !s.ignore_null_updates.is_empty() {
            write!(
                f,
                " ignore_null_updates=[{}]",
                s.ignore_null_updates.join(", ")
            )?;
        }
        if s.scd_type == 2 {
            write!(f, " track_history=[{}]", s.track_history.join(", "))?;
        }
        if s.once {
            write!(f, " once")?;
        }
        write!(f, " columns=[{}]", s.columns.join(", "))
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let input = inputs.pop().unwrap_or_else(|| self.input.clone());
        Self::try_new(input, Arc::clone(&self.spec))
    }
}
