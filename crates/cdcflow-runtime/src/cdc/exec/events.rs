//! `AutoCdcEventsExec`: the flow's event projection (columns, sequence fields,
//! operation, origin) made into checked events of [`Rules::event_schema`]: each column
//! cast to the target's type, the sequence fields as one value, the recording time.
//! A row with a null key or a null sequence value cannot be applied: they are counted
//! per origin, and the stream ends in an error naming them all, so that nothing of the
//! batch is applied. Over a first batch's key groups, each group is a partition of its
//! own and is checked on its own (a null key is always in the first group).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use cdcflow_plan::autocdc::{AutoCdcSpec, ORIGIN, TRUNCATE};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int8Array, Int64Array, RecordBatch, StructArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int8Type, SchemaRef, UInt32Type};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

use super::{Parts, plan_properties};
use crate::cdc::kernel::Rules;
use crate::{ErrorCode, RunError};

/// What turning projected rows into events needs: the rules (the target's column
/// types, which columns are keys, the sequence type), the names for messages, and the
/// batch's recording time.
#[derive(Debug, Clone)]
pub struct EventChecks {
    pub rules: Arc<Rules>,
    /// The source dataset, for messages.
    pub source: String,
    /// The SEQUENCE BY fields' names and types.
    pub sequence: Vec<(String, DataType)>,
    /// When the batch's events are recorded, µs since the epoch.
    pub now_micros: i64,
}

impl EventChecks {
    /// The checks of `spec`'s events under `rules`, recorded at `now_micros`.
    pub fn of(spec: &AutoCdcSpec, rules: Arc<Rules>, now_micros: i64) -> Self {
        Self {
            rules,
            source: spec.source.clone(),
            sequence: spec
                .sequence
                .iter()
                .map(|f| (f.name.clone(), f.data_type.clone()))
                .collect(),
            now_micros,
        }
    }

    fn key_names(&self) -> Vec<String> {
        let fields = self.rules.columns.fields();
        self.rules
            .keys
            .iter()
            .filter_map(|&k| fields.get(k).map(|f| f.name().clone()))
            .collect()
    }

    /// One batch of the projection as events; rows that cannot be applied are counted
    /// in `problems`.
    fn to_events(
        &self,
        event_schema: &SchemaRef,
        batch: &RecordBatch,
        problems: &mut NullRows,
    ) -> Result<RecordBatch, RunError> {
        let rules = &self.rules;
        let n_cols = rules.columns.fields().len();
        let n_seq = self.sequence.len();
        let rows = batch.num_rows();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(n_cols + 3);
        for (i, field) in rules.columns.fields().iter().enumerate() {
            columns.push(cast(batch.column(i), field.data_type())?);
        }
        let seq_arrays: Vec<ArrayRef> = self
            .sequence
            .iter()
            .enumerate()
            .map(|(i, (_, t))| cast(batch.column(n_cols + i), t))
            .collect::<Result<_, _>>()?;
        // Several sequence columns are compared as a struct of them; one column is
        // itself, a struct too (`SEQUENCE BY struct(a, b)`, a struct snapshot version).
        let seq: ArrayRef = match (&rules.sequence_type, seq_arrays.as_slice()) {
            (_, [one]) => Arc::clone(one),
            (_, []) => return Err(RunError::internal("an AUTO CDC flow without a sequence")),
            (DataType::Struct(fields), _) => Arc::new(StructArray::try_new(
                fields.clone(),
                seq_arrays.clone(),
                None,
            )?),
            (_, _) => return Err(RunError::internal("several sequence columns of no struct")),
        };
        let ops = batch.column(n_cols + n_seq).as_primitive::<Int8Type>();
        let origins = batch
            .schema()
            .index_of(ORIGIN)
            .ok()
            .map(|i| batch.column(i).as_dictionary::<UInt32Type>());
        let origin = |row: usize| -> String {
            let Some(dict) = origins else {
                return self.source.clone();
            };
            let key = dict.keys().value(row) as usize;
            let values = dict.values().as_string::<i32>();
            match key < values.len() {
                true => values.value(key).to_string(),
                false => self.source.clone(),
            }
        };
        for row in 0..rows {
            let truncate = ops.value(row) == TRUNCATE;
            if !truncate && rules.keys.iter().any(|&k| columns[k].is_null(row)) {
                *problems.keys.entry(origin(row)).or_default() += 1;
            } else if seq_arrays.iter().any(|a| a.is_null(row)) {
                *problems.sequence.entry(origin(row)).or_default() += 1;
            }
        }
        columns.push(seq);
        columns.push(Arc::new(Int8Array::from(ops.values().to_vec())));
        columns.push(Arc::new(Int64Array::from(vec![self.now_micros; rows])));
        Ok(RecordBatch::try_new(Arc::clone(event_schema), columns)?)
    }
}

/// Rows that cannot be applied, counted per origin.
#[derive(Default)]
struct NullRows {
    keys: BTreeMap<String, usize>,
    sequence: BTreeMap<String, usize>,
}

impl NullRows {
    fn check(&self, checks: &EventChecks) -> Result<(), RunError> {
        let describe = |m: &BTreeMap<String, usize>| {
            let total: usize = m.values().sum();
            let places: Vec<String> = m.iter().map(|(o, n)| format!("{n} in {o}")).collect();
            (total, places.join(", "))
        };
        if !self.keys.is_empty() {
            let (n, places) = describe(&self.keys);
            return Err(RunError::user(ErrorCode::NullKey, format!(
                "{n} row(s) of `{}` with a null key ({}): {places}; nothing was applied",
                checks.source,
                checks.key_names().join(", ")
            ))
            .with_help("KEYS columns must not be null; filter such rows out before the flow or fix the source"));
        }
        if !self.sequence.is_empty() {
            let (n, places) = describe(&self.sequence);
            let seq: Vec<&str> = checks.sequence.iter().map(|(n, _)| n.as_str()).collect();
            return Err(RunError::user(ErrorCode::NullSequence, format!(
                "{n} row(s) of `{}` with a null SEQUENCE BY value ({}): {places}; nothing was applied",
                checks.source,
                seq.join(", ")
            ))
            .with_help("every change needs a sequence value to be ordered; filter such rows out before the flow or fix the source"));
        }
        Ok(())
    }
}

/// Where [`AutoCdcEventsExec`]'s stream is: the input, and what it counted so far.
struct Checking {
    input: SendableRecordBatchStream,
    checks: Arc<EventChecks>,
    schema: SchemaRef,
    problems: NullRows,
    baseline: BaselineMetrics,
}

/// The execution plan of [`EventChecks`] over the event projection.
#[derive(Debug)]
pub struct AutoCdcEventsExec {
    input: Arc<dyn ExecutionPlan>,
    checks: Arc<EventChecks>,
    parts: Parts,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl AutoCdcEventsExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, checks: Arc<EventChecks>, parts: Parts) -> Self {
        let schema = checks.rules.event_schema();
        Self {
            input,
            checks,
            parts,
            properties: plan_properties(schema, parts.partitioning(), EmissionType::Incremental),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn checks(&self) -> &Arc<EventChecks> {
        &self.checks
    }

    pub fn parts(&self) -> Parts {
        self.parts
    }
}

impl DisplayAs for AutoCdcEventsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let seq: Vec<&str> = self
            .checks
            .sequence
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        write!(
            f,
            "AutoCdcEventsExec: source={} keys=[{}] sequence_by=[{}]",
            self.checks.source,
            self.checks.key_names().join(", "),
            seq.join(", ")
        )?;
        self.parts.fmt_as(f)
    }
}

impl ExecutionPlan for AutoCdcEventsExec {
    one_input!();

    fn name(&self) -> &'static str {
        "AutoCdcEventsExec"
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = super::only_child(self.name(), children)?;
        Ok(Arc::new(Self::new(
            input,
            Arc::clone(&self.checks),
            self.parts,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.checks.rules.event_schema();
        let state = Checking {
            input: self.input.execute(partition, context)?,
            checks: Arc::clone(&self.checks),
            schema: Arc::clone(&schema),
            problems: NullRows::default(),
            baseline: BaselineMetrics::new(&self.metrics, partition),
        };
        let stream = futures::stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            match state.input.next().await {
                Some(Ok(batch)) => {
                    let timer = state.baseline.elapsed_compute().timer();
                    let events = state
                        .checks
                        .to_events(&state.schema, &batch, &mut state.problems);
                    timer.done();
                    match events {
                        Ok(events) => {
                            state.baseline.record_output(events.num_rows());
                            Some((Ok(events), Some(state)))
                        }
                        Err(e) => Some((Err(external(e)), None)),
                    }
                }
                Some(Err(e)) => Some((Err(e), None)),
                None => {
                    state.baseline.done();
                    let checked = state.problems.check(&state.checks);
                    checked.err().map(|e| (Err(external(e)), None))
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// A run error carried through DataFusion, to be taken out again by
/// [`RunError::from`].
pub(crate) fn external(e: RunError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The earliest source commit time among the `events` parts, when the SEQUENCE BY value
/// is a timestamp (or a struct whose first field is one), µs since the epoch.
pub fn oldest_commit_time(events: &[RecordBatch]) -> Option<i64> {
    events.iter().filter_map(oldest_commit_time_of).min()
}

fn oldest_commit_time_of(events: &RecordBatch) -> Option<i64> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
    let seq = events.column_by_name(crate::cdc::kernel::SEQ)?;
    let first = match seq.data_type() {
        DataType::Struct(_) => Arc::clone(seq.as_struct().columns().first()?),
        _ => Arc::clone(seq),
    };
    match first.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            datafusion::arrow::compute::min(first.as_primitive::<TimestampMicrosecondType>())
        }
        _ => None,
    }
    .filter(|_| !first.is_empty())
}
