//! An AUTO CDC flow, resolved against its source schema: canonical column names and
//! DataFusion expressions ([`AutoCdcSpec`]), and the logical plan node that applies the
//! changes to the target ([`AutoCdcNode`]). The apply semantics live in the runtime;
//! this node only says *what* is applied, so any engine can execute the plan.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::common::{DFSchema, DFSchemaRef, Result, TableReference};
use datafusion::logical_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore};

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

/// The logical plan node: apply the changes produced by `input` to the target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AutoCdcNode {
    pub input: LogicalPlan,
    pub spec: Arc<AutoCdcSpec>,
    pub schema: DFSchemaRef,
}

impl PartialOrd for AutoCdcNode {
    // The schema is derived from the other two fields, so they decide the order.
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        match self.input.partial_cmp(&other.input) {
            Some(std::cmp::Ordering::Equal) => self.spec.partial_cmp(&other.spec),
            o => o,
        }
    }
}

impl AutoCdcNode {
    pub fn try_new(input: LogicalPlan, spec: Arc<AutoCdcSpec>) -> Result<Self> {
        let target = spec.target_schema(input.schema().as_arrow());
        let schema = Arc::new(DFSchema::try_from_qualified_schema(
            TableReference::bare(spec.target.as_str()),
            &target,
        )?);
        Ok(Self {
            input,
            spec,
            schema,
        })
    }
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

    fn expressions(&self) -> Vec<Expr> {
        let s = &self.spec;
        s.sequence
            .iter()
            .map(|f| f.expr.clone())
            .chain(s.delete_when.clone())
            .chain(s.truncate_when.clone())
            .collect()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.spec;
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
