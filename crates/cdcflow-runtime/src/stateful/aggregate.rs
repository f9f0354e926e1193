//! One batch of an aggregation over a watermarked stream ([`StreamAggregate`]), as
//! Spark's `StateStoreRestoreExec` / `StateStoreSaveExec` run it in append mode:
//!
//! 1. the batch's rows, each in every window of its event time, are split into the
//!    late (their window closed under the watermark left by the batches before:
//!    `end <= watermark`, or `event time <= watermark` for a plain event-time key) and
//!    the rest;
//! 2. the rest, as one state row each, are merged with the kept state per group (a
//!    count is a sum of counts, an average a sum and a count, …);
//! 3. the watermark moves to the batch's greatest event time less the delay (never
//!    down), and the groups it closes are emitted and leave the state.
//!
//! Spark runs step 3's closing in a second, data-less batch; the rows it appends are
//! the same.
//!
//! The groups are kept in buckets of the time they close at ([`bucket_of`]: a window's
//! end, a stretch of event time for a plain event-time key, one bucket for sessions,
//! whose groups merge): a batch opens only the buckets its rows fall in and those its
//! watermark closes groups of, one at a time, so memory holds one bucket and a batch
//! rewrites only what it changed ([`super::store`]). The greatest event time is taken over the rows that pass the query's
//! filters on other columns (Spark pushes those below its watermark operator, and
//! not those on the event time).

use std::sync::Arc;

use cdcflow_plan::functions::time_window::window_array;
use cdcflow_plan::stream_aggregate::{Function, StreamAggregate, is_event_time};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, filter_record_batch, is_not_null, take, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::MemTable;
use datafusion::functions_aggregate::expr_fn::{max, min, sum};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, cast as cast_expr, col};
use datafusion::prelude::SessionContext;

use super::metrics::StateMetrics;
use super::run::{Outcome, StateRun};
use super::store::Version;
use crate::RunError;

/// The state before a batch (its rows are in the version being written).
pub(crate) struct Before {
    pub watermark_micros: i64,
    pub seen_rows: bool,
}

/// The state's part holding the groups.
pub(crate) const GROUPS: &str = "groups";

/// A batch's result (the open groups are written into the version).
pub(crate) struct Stepped {
    /// The closed groups, in the aggregation's output columns (named `c0`, `c1`, …).
    pub closed: RecordBatch,
    pub watermark_micros: i64,
    pub seen_rows: bool,
    /// The late rows, as the aggregation's input had them, with why and when.
    pub late: Option<RecordBatch>,
    pub metrics: StateMetrics,
}

const TS: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

fn utc() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The columns of the kept state: the group keys other than the window (`g<i>`), the
/// window's bounds (`ws`, `we`, microseconds), the time a group closes at (`evict`),
/// and each aggregate's state (`s<j>`, and `n<j>` the count of an average).
pub(crate) fn state_schema(sa: &StreamAggregate) -> SchemaRef {
    let out = sa.aggregate.schema.as_arrow();
    let mut fields = Vec::new();
    for i in 0..sa.aggregate.group_expr.len() {
        if i == sa.event_time.index && sa.event_time.is_window() {
            fields.push(Field::new("ws", DataType::Int64, true));
            fields.push(Field::new("we", DataType::Int64, true));
        } else {
            fields.push(Field::new(
                format!("g{i}"),
                out.field(i).data_type().clone(),
                true,
            ));
        }
    }
    fields.push(Field::new("evict", DataType::Int64, true));
    for (j, f) in sa.functions.iter().enumerate() {
        match f.function {
            Function::Avg => {
                fields.push(Field::new(format!("s{j}"), avg_sum_type(&f.output), true));
                fields.push(Field::new(format!("n{j}"), DataType::Int64, true));
            }
            Function::Count => fields.push(Field::new(format!("s{j}"), DataType::Int64, true)),
            _ => fields.push(Field::new(format!("s{j}"), f.output.clone(), true)),
        }
    }
    Arc::new(Schema::new(fields))
}

/// What the state is of, to refuse a state kept for another query.
pub(crate) fn operator_fingerprint(sa: &StreamAggregate) -> String {
    let schema = state_schema(sa);
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    let functions: Vec<String> = sa
        .functions
        .iter()
        .map(|f| {
            format!(
                "{:?}({})",
                f.function,
                f.arg.as_ref().map(|a| a.to_string()).unwrap_or_default()
            )
        })
        .collect();
    format!(
        "aggregate [{}] of [{}] keyed by [{}] window {:?}",
        functions.join(", "),
        columns.join(", "),
        sa.aggregate
            .group_expr
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        sa.event_time.window
    )
}

/// The bucket a group closing at `evict` is kept in: a window's end (one bucket per
/// end), a quarter of the delay of event time for a plain event-time key (at least a
/// second), all of a session window's groups in one, and the groups no watermark
/// closes (a null event time) in their own.
pub(crate) fn bucket_of(sa: &StreamAggregate, evict: Option<i64>) -> i64 {
    let Some(evict) = evict else {
        return i64::MAX;
    };
    match (sa.event_time.window, sa.event_time.session_gap) {
        (Some(w), _) => evict.div_euclid(w.slide.max(1)),
        (None, Some(_)) => 0,
        (None, None) => time_bucket(evict, sa.watermark.delay_micros),
    }
}

/// The event time in microseconds, whatever the column's unit.
fn event_time(sa: &StreamAggregate) -> Expr {
    cast_expr(
        cast_expr(Expr::Column(sa.event_column.clone()), TS),
        DataType::Int64,
    )
}

/// The aggregation's input rows as the operator reads them: the group keys other than
/// the window (`g<i>`), the event time (`et`, microseconds), the aggregates' arguments
/// (`a<j>`), then the input's own columns (`in<k>`, for the late table).
pub(crate) fn rows_plan(sa: &StreamAggregate) -> Result<LogicalPlan, RunError> {
    let input = sa.aggregate.input.as_ref().clone();
    let windowed = sa.event_time.is_window();
    let mut exprs: Vec<Expr> = Vec::new();
    for (i, g) in sa.aggregate.group_expr.iter().enumerate() {
        if !(i == sa.event_time.index && windowed) {
            exprs.push(unalias(g).clone().alias(format!("g{i}")));
        }
    }
    exprs.push(event_time(sa).alias("et"));
    for (j, f) in sa.functions.iter().enumerate() {
        if let Some(a) = &f.arg {
            exprs.push(a.clone().alias(format!("a{j}")));
        }
    }
    for (k, c) in input.schema().columns().into_iter().enumerate() {
        exprs.push(Expr::Column(c).alias(format!("in{k}")));
    }
    Ok(LogicalPlanBuilder::from(input).project(exprs)?.build()?)
}

/// When the query filters on the event time, whose filters the watermark does not
/// see: a plan of one row, the greatest event time over the input without them (`m`).
/// `None`: the greatest event time is taken over the rows read ([`greatest_read`]).
pub(crate) fn greatest_plan(sa: &StreamAggregate) -> Result<Option<LogicalPlan>, RunError> {
    greatest_unfiltered(&sa.aggregate.input, &sa.watermark, event_time(sa))
}

/// `input`'s greatest `event_time` without its filters on the watermark's event time,
/// as a plan of one row (`m`); `None` when it has no such filter.
pub(crate) fn greatest_unfiltered(
    input: &LogicalPlan,
    watermark: &cdcflow_plan::Watermark,
    event_time: Expr,
) -> Result<Option<LogicalPlan>, RunError> {
    let Some(unfiltered) = without_event_time_filters(input, watermark)? else {
        return Ok(None);
    };
    Ok(Some(
        LogicalPlanBuilder::from(unfiltered)
            .aggregate(Vec::<Expr>::new(), vec![max(event_time).alias("m")])?
            .build()?,
    ))
}

/// An operator's inputs as [`rows_plan`] and, when the query filters on the event
/// time, [`greatest_plan`] give them: the rows, and their greatest event time (the
/// unfiltered one when there is a second input).
pub(crate) fn rows_and_greatest(inputs: &[Vec<RecordBatch>]) -> (&[RecordBatch], Option<i64>) {
    let rows = inputs.first().map(Vec::as_slice).unwrap_or_default();
    let greatest = match inputs.get(1) {
        Some(unfiltered) => greatest_read(unfiltered, "m"),
        None => greatest_read(rows, "et"),
    };
    (rows, greatest)
}

/// Buckets of event time a quarter of `delay_micros` wide (at least a second): where
/// state keyed by a plain event time is kept, so the watermark lets go of whole
/// buckets.
pub(crate) fn time_bucket(t: i64, delay_micros: i64) -> i64 {
    t.div_euclid((delay_micros / 4).max(1_000_000))
}

/// The greatest event time among rows of [`rows_plan`] (`et`), or of the one row of
/// [`greatest_plan`] (`m`).
fn greatest_read(rows: &[RecordBatch], column: &str) -> Option<i64> {
    rows.iter()
        .filter_map(|b| {
            let values = b
                .column(b.schema().index_of(column).ok()?)
                .as_primitive::<Int64Type>();
            datafusion::arrow::compute::max(values)
        })
        .max()
}

/// One batch of `sa` as its execution plan runs it: over its inputs' rows (those of
/// [`rows_plan`], then, when there is one, the row of [`greatest_plan`]), the state of
/// `run` in `version`; gives the groups it closes and what it did.
pub(crate) async fn batch(
    ctx: &SessionContext,
    sa: &StreamAggregate,
    run: &StateRun,
    version: &mut Version,
    inputs: &[Vec<RecordBatch>],
) -> Result<(RecordBatch, Outcome), RunError> {
    let (rows, greatest) = rows_and_greatest(inputs);
    let before = Before {
        watermark_micros: run.watermark_micros(),
        seen_rows: run.seen_rows(),
    };
    let s = step(ctx, sa, before, version, rows, greatest).await?;
    let outcome = Outcome {
        watermark_micros: s.watermark_micros,
        seen_rows: s.seen_rows,
        inputs: Default::default(),
        late: s.late,
        metrics: s.metrics,
    };
    Ok((s.closed, outcome))
}

/// Runs one batch over the aggregation's input `rows` (of [`rows_plan`]) whose
/// greatest event time is `greatest`, the state's groups taken from and written into
/// `version`.
pub(crate) async fn step(
    ctx: &SessionContext,
    sa: &StreamAggregate,
    before: Before,
    version: &mut Version,
    rows: &[RecordBatch],
    greatest: Option<i64>,
) -> Result<Stepped, RunError> {
    let delay_micros = sa.watermark.delay_micros;
    let in_schema = Arc::clone(sa.aggregate.input.schema());
    let window = sa.event_time.window;
    let session = sa.event_time.session_gap;
    let windowed = sa.event_time.is_window();
    let groups = sa.aggregate.group_expr.len();
    // The columns of `rows` before the input's own.
    let passed = rows
        .first()
        .map_or(0, |b| b.num_columns() - in_schema.fields().len());

    // 1. Each row in each of its windows, split into late and kept.
    let mut kept = Split::default();
    let mut late = Split::default();
    let mut dropped = 0u64;
    let mut kept_batches = Vec::new();
    let mut late_batches = Vec::new();
    for batch in rows {
        let et = batch
            .column(batch.schema().index_of("et")?)
            .as_primitive::<Int64Type>();
        kept.clear();
        late.clear();
        for (r, row) in (0..batch.num_rows()).zip(0u32..) {
            if et.is_null(r) {
                // Spark's windows drop a row without event time; a plain key keeps it,
                // in a group no watermark closes.
                if !windowed {
                    kept.push(row, None, None);
                }
                continue;
            }
            let t = et.value(r);
            let bounds: Vec<(i64, i64)> = match (window, session) {
                (Some(w), _) => w.windows(t).collect(),
                (None, Some(gap)) => vec![(t, t.saturating_add(gap))],
                (None, None) => vec![(t, t)],
            };
            for (s, e) in bounds {
                let evict = if windowed { e } else { t };
                let bounds = windowed.then_some((s, e));
                if before.seen_rows && evict <= before.watermark_micros {
                    dropped += 1;
                    late.push(row, bounds, Some(evict));
                } else {
                    kept.push(row, bounds, Some(evict));
                }
            }
        }
        kept_batches.push(kept.state_rows(batch, sa)?);
        if !late.rows.is_empty() {
            late_batches.push(late.late_rows(
                batch,
                passed,
                &in_schema,
                before.watermark_micros,
                windowed,
            )?);
        }
    }

    // 2. The watermark moves to the batch's greatest event time less the delay.
    let seen_rows = before.seen_rows || greatest.is_some();
    let watermark = match greatest {
        Some(g) => before.watermark_micros.max(g.saturating_sub(delay_micros)),
        None => before.watermark_micros,
    };
    let mut metrics = StateMetrics {
        rows_dropped_by_watermark: dropped,
        watermark_micros: watermark,
        ..StateMetrics::default()
    };

    // 3. Bucket by bucket, the batch's rows merged with the state, and what the
    //    watermark closes emitted.
    let state_schema = state_schema(sa);
    let evict_index = state_schema.index_of("evict")?;
    let mut new_rows = by_bucket(sa, kept_batches, evict_index)?;
    let closing = version
        .carried()
        .iter()
        .filter(|f| f.part == GROUPS && f.closes_from.is_some_and(|c| c <= watermark))
        .map(|f| f.bucket);
    let buckets: std::collections::BTreeSet<i64> =
        new_rows.keys().copied().chain(closing).collect();
    let mut closed = Vec::new();
    for bucket in buckets {
        let state = version.take(GROUPS, bucket)?;
        let new = new_rows.remove(&bucket).unwrap_or_default();
        let held: usize = state
            .iter()
            .chain(&new)
            .map(RecordBatch::get_array_memory_size)
            .sum();
        let merged = merge(ctx, sa, state, new).await?;
        let mut open = Vec::new();
        for b in merged {
            let touched = b.column(b.num_columns() - 1).as_primitive::<Int64Type>();
            metrics.rows_updated += touched.iter().filter(|t| *t == Some(1)).count() as u64;
            let evict = b.column(evict_index).as_primitive::<Int64Type>();
            let closes: BooleanArray = evict
                .iter()
                .map(|e| Some(e.is_some_and(|e| e <= watermark)))
                .collect();
            let stays = datafusion::arrow::compute::not(&closes)?;
            let b = b.project(&(0..b.num_columns() - 1).collect::<Vec<_>>())?;
            let b = RecordBatch::try_new(Arc::clone(&state_schema), b.columns().to_vec())?;
            let shut = filter_record_batch(&b, &closes)?;
            metrics.rows_removed += shut.num_rows() as u64;
            closed.push(shut);
            open.push(filter_record_batch(&b, &stays)?);
        }
        let open = datafusion::arrow::compute::concat_batches(&state_schema, &open)?;
        let closes_from =
            datafusion::arrow::compute::min(open.column(evict_index).as_primitive::<Int64Type>());
        metrics.memory_used_bytes = metrics
            .memory_used_bytes
            .max((held + open.get_array_memory_size()) as u64);
        version.put(GROUPS, bucket, &state_schema, &[open], closes_from)?;
    }
    metrics.rows_total = version.rows();
    metrics.state_bytes = version.bytes();
    let closed = datafusion::arrow::compute::concat_batches(&state_schema, &closed)?;
    let late = match late_batches.is_empty() {
        true => None,
        false => Some(datafusion::arrow::compute::concat_batches(
            &late_batches[0].schema(),
            &late_batches,
        )?),
    };
    Ok(Stepped {
        closed: finalize(sa, &closed, groups)?,
        watermark_micros: watermark,
        seen_rows,
        late,
        metrics,
    })
}

/// The batch's state rows split by the bucket of their close time.
fn by_bucket(
    sa: &StreamAggregate,
    batches: Vec<RecordBatch>,
    evict_index: usize,
) -> Result<std::collections::BTreeMap<i64, Vec<RecordBatch>>, RunError> {
    let mut out: std::collections::BTreeMap<i64, Vec<RecordBatch>> = Default::default();
    for b in batches {
        let evict = b.column(evict_index).as_primitive::<Int64Type>();
        let mut rows: std::collections::BTreeMap<i64, Vec<u32>> = Default::default();
        for (r, row) in (0..b.num_rows()).zip(0u32..) {
            let e = evict.is_valid(r).then(|| evict.value(r));
            rows.entry(bucket_of(sa, e)).or_default().push(row);
        }
        for (bucket, rows) in rows {
            out.entry(bucket)
                .or_default()
                .push(take_record_batch(&b, &UInt32Array::from(rows))?);
        }
    }
    Ok(out)
}

/// One bucket's kept groups (`state`) and the batch's rows in it (`new`, a state row
/// each) merged per group, each group marked (`touched`) when the batch changed it.
async fn merge(
    ctx: &SessionContext,
    sa: &StreamAggregate,
    state: Vec<RecordBatch>,
    new: Vec<RecordBatch>,
) -> Result<Vec<RecordBatch>, RunError> {
    let state_schema = state_schema(sa);
    let touched_schema = with_touched(&state_schema);
    let mark = |batches: Vec<RecordBatch>, touched: i64| -> Result<Vec<RecordBatch>, RunError> {
        batches
            .into_iter()
            .map(|b| {
                let n = b.num_rows();
                let mut columns = b.columns().to_vec();
                columns.push(Arc::new(Int64Array::from(vec![touched; n])));
                Ok(RecordBatch::try_new(Arc::clone(&touched_schema), columns)?)
            })
            .collect()
    };
    let mut all = mark(state, 0)?;
    all.extend(mark(new, 1)?);
    let key_names: Vec<String> = state_schema
        .fields()
        .iter()
        .take_while(|f| !f.name().starts_with('s'))
        .map(|f| f.name().clone())
        .collect();
    // Sessions of a key that meet are one: numbered, and merged by their number.
    let (all, schema, keys, mut merges) = match sa.event_time.session_gap {
        Some(_) => {
            let groups: Vec<String> = key_names
                .iter()
                .filter(|n| n.starts_with('g'))
                .cloned()
                .collect();
            let (all, schema) = number_sessions(ctx, &touched_schema, all, &groups).await?;
            let mut keys: Vec<Expr> = groups.iter().map(col).collect();
            keys.push(col("sid"));
            let bounds = vec![
                min(col("ws")).alias("ws"),
                max(col("we")).alias("we"),
                max(col("evict")).alias("evict"),
            ];
            (all, schema, keys, bounds)
        }
        None => {
            let keys = key_names.iter().map(col).collect();
            (all, Arc::clone(&touched_schema), keys, Vec::new())
        }
    };
    let table = MemTable::try_new(schema, vec![all])?;
    for (j, f) in sa.functions.iter().enumerate() {
        let s = col(format!("s{j}"));
        merges.push(
            match f.function {
                Function::Min => min(s),
                Function::Max => max(s),
                _ => sum(s),
            }
            .alias(format!("s{j}")),
        );
        if f.function == Function::Avg {
            merges.push(sum(col(format!("n{j}"))).alias(format!("n{j}")));
        }
    }
    merges.push(max(col("touched")).alias("touched"));
    Ok(ctx
        .read_table(Arc::new(table))?
        .aggregate(keys, merges)?
        .select(
            touched_schema
                .fields()
                .iter()
                .map(|f| cast_expr(col(f.name()), f.data_type().clone()).alias(f.name()))
                .collect::<Vec<_>>(),
        )?
        .collect()
        .await?)
}

/// `rows` (of `schema`) sorted by their group keys `groups` and window start, with a
/// column `sid` numbering their sessions: a row starts a new one when its keys differ
/// from the row before or it starts after the session's end so far (sessions that
/// touch merge, as in Spark).
async fn number_sessions(
    ctx: &SessionContext,
    schema: &SchemaRef,
    rows: Vec<RecordBatch>,
    groups: &[String],
) -> Result<(Vec<RecordBatch>, SchemaRef), RunError> {
    let table = MemTable::try_new(Arc::clone(schema), vec![rows])?;
    let mut order: Vec<datafusion::logical_expr::SortExpr> =
        groups.iter().map(|g| col(g).sort(true, true)).collect();
    order.push(col("ws").sort(true, true));
    let sorted = ctx
        .read_table(Arc::new(table))?
        .sort(order)?
        .collect()
        .await?;
    let sorted = datafusion::arrow::compute::concat_batches(schema, &sorted)?;
    let keys: Vec<ArrayRef> = groups
        .iter()
        .map(|g| Ok(Arc::clone(sorted.column(schema.index_of(g)?))))
        .collect::<Result<_, RunError>>()?;
    let converter = RowConverter::new(
        keys.iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect(),
    )?;
    let key_rows = converter.convert_columns(&keys)?;
    let ws = sorted
        .column(schema.index_of("ws")?)
        .as_primitive::<Int64Type>();
    let we = sorted
        .column(schema.index_of("we")?)
        .as_primitive::<Int64Type>();
    let mut sid = Vec::with_capacity(sorted.num_rows());
    let (mut current, mut end) = (-1i64, i64::MIN);
    for r in 0..sorted.num_rows() {
        let same_key = r > 0 && key_rows.row(r) == key_rows.row(r - 1);
        if !same_key || ws.value(r) > end {
            current += 1;
            end = we.value(r);
        } else {
            end = end.max(we.value(r));
        }
        sid.push(current);
    }
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("sid", DataType::Int64, true));
    let numbered = Arc::new(Schema::new(fields));
    let mut columns = sorted.columns().to_vec();
    columns.push(Arc::new(Int64Array::from(sid)));
    Ok((
        vec![RecordBatch::try_new(Arc::clone(&numbered), columns)?],
        numbered,
    ))
}

fn with_touched(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("touched", DataType::Int64, true));
    Arc::new(Schema::new(fields))
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        _ => e,
    }
}

/// Rows of one input batch taken into a split, each with its window and close time.
#[derive(Default)]
struct Split {
    rows: Vec<u32>,
    windows: Vec<Option<(i64, i64)>>,
    evict: Vec<Option<i64>>,
}

impl Split {
    fn clear(&mut self) {
        self.rows.clear();
        self.windows.clear();
        self.evict.clear();
    }

    fn push(&mut self, row: u32, window: Option<(i64, i64)>, evict: Option<i64>) {
        self.rows.push(row);
        self.windows.push(window);
        self.evict.push(evict);
    }

    /// The taken rows as state rows: one per row and window, each aggregate's state
    /// for that row alone.
    fn state_rows(
        &self,
        batch: &RecordBatch,
        sa: &StreamAggregate,
    ) -> Result<RecordBatch, RunError> {
        let schema = state_schema(sa);
        let indices = UInt32Array::from(self.rows.clone());
        let column = |name: &str| -> Result<ArrayRef, RunError> {
            let i = batch.schema().index_of(name)?;
            Ok(take(batch.column(i), &indices, None)?)
        };
        let n = self.rows.len();
        let mut columns: Vec<ArrayRef> = Vec::new();
        for i in 0..sa.aggregate.group_expr.len() {
            if i == sa.event_time.index && sa.event_time.is_window() {
                columns.push(Arc::new(Int64Array::from_iter(
                    self.windows.iter().map(|w| w.map(|w| w.0)),
                )));
                columns.push(Arc::new(Int64Array::from_iter(
                    self.windows.iter().map(|w| w.map(|w| w.1)),
                )));
            } else {
                let target = schema
                    .field_with_name(&format!("g{i}"))?
                    .data_type()
                    .clone();
                columns.push(cast(&column(&format!("g{i}"))?, &target)?);
            }
        }
        columns.push(Arc::new(Int64Array::from(self.evict.clone())));
        for (j, f) in sa.functions.iter().enumerate() {
            let arg = f
                .arg
                .as_ref()
                .map(|_| column(&format!("a{j}")))
                .transpose()?;
            let present = |a: &ArrayRef| -> Result<ArrayRef, RunError> {
                Ok(cast(&is_not_null(a)?, &DataType::Int64)?)
            };
            match (f.function, &arg) {
                (Function::Count, None) => columns.push(Arc::new(Int64Array::from(vec![1; n]))),
                (Function::Count, Some(a)) => columns.push(present(a)?),
                (Function::Avg, Some(a)) => {
                    columns.push(cast(a, &avg_sum_type(&f.output))?);
                    columns.push(present(a)?);
                }
                (_, Some(a)) => {
                    let target = schema
                        .field_with_name(&format!("s{j}"))?
                        .data_type()
                        .clone();
                    columns.push(cast(a, &target)?);
                }
                (_, None) => return Err(RunError::internal("an aggregate without its argument")),
            }
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    /// The taken rows as the late table has them ([`late_rows`]).
    fn late_rows(
        &self,
        batch: &RecordBatch,
        passed: usize,
        in_schema: &datafusion::common::DFSchemaRef,
        watermark: i64,
        windowed: bool,
    ) -> Result<RecordBatch, RunError> {
        let reason = match windowed {
            true => "its window had closed: the window's end was at or before the watermark",
            false => "its event time was at or before the watermark",
        };
        late_rows(
            batch,
            passed,
            in_schema,
            (&self.rows, &self.windows),
            watermark,
            reason,
        )
    }
}

/// Rows of a batch taken into the late table, each with the window that had closed.
pub(crate) type LateRows<'a> = (&'a [u32], &'a [Option<(i64, i64)>]);

/// Rows `rows` of `batch`, whose input columns start at `passed`, as the late table has
/// them: the input's columns (`in_schema`'s names), the window that had closed (each of
/// `windows`; null for none, and for every row when `windows` is empty), the watermark,
/// the reason.
pub(crate) fn late_rows(
    batch: &RecordBatch,
    passed: usize,
    in_schema: &datafusion::common::DFSchemaRef,
    (rows, windows): LateRows<'_>,
    watermark: i64,
    reason: &str,
) -> Result<RecordBatch, RunError> {
    let indices = UInt32Array::from(rows.to_vec());
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (k, field) in in_schema.fields().iter().enumerate() {
        let mut name = field.name().clone();
        while names.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
            name.push('_');
        }
        names.push(name.clone());
        fields.push(Field::new(name, field.data_type().clone(), true));
        columns.push(take(batch.column(passed + k), &indices, None)?);
    }
    let n = rows.len();
    let ts = |values: Vec<Option<i64>>| -> ArrayRef {
        Arc::new(TimestampMicrosecondArray::from(values).with_timezone("UTC"))
    };
    let window = |i: usize| {
        (0..n)
            .map(|r| {
                windows
                    .get(r)
                    .copied()
                    .flatten()
                    .map(|w| if i == 0 { w.0 } else { w.1 })
            })
            .collect()
    };
    fields.push(Field::new("_window_start", utc(), true));
    columns.push(ts(window(0)));
    fields.push(Field::new("_window_end", utc(), true));
    columns.push(ts(window(1)));
    fields.push(Field::new("_watermark", utc(), true));
    columns.push(ts(vec![Some(watermark); n]));
    fields.push(Field::new("_reason", DataType::Utf8, true));
    columns.push(Arc::new(StringArray::from(vec![reason; n])));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// The type an average's running sum is kept in: DOUBLE, or for a DECIMAL average
/// (`DECIMAL(p + 4, s + 4)`, as Spark and DataFusion type it) the argument's scale
/// with 38 digits, so the sum is exact.
fn avg_sum_type(output: &DataType) -> DataType {
    match output {
        DataType::Decimal128(_, s) => DataType::Decimal128(38, s.saturating_sub(4).max(0)),
        _ => DataType::Float64,
    }
}

/// An average from its kept sum and count, in `output`'s type: a DECIMAL divided
/// exactly and rounded half up to the output's scale, as Spark rounds it (null when it
/// overflows, as Spark's is without ANSI mode).
fn average(sum: &ArrayRef, count: &Int64Array, output: &DataType) -> Result<ArrayRef, RunError> {
    use datafusion::arrow::array::{Decimal128Array, Float64Array};
    use datafusion::arrow::datatypes::{Decimal128Type, Float64Type};
    if let (DataType::Decimal128(p, out_scale), DataType::Decimal128(_, in_scale)) =
        (output, sum.data_type())
    {
        let sum = sum.as_primitive::<Decimal128Type>();
        let factor = 10i128.checked_pow(u32::try_from(out_scale - in_scale).unwrap_or(0));
        let avg: Decimal128Array = (0..sum.len())
            .map(|r| {
                if !sum.is_valid(r) || !count.is_valid(r) || count.value(r) <= 0 {
                    return None;
                }
                let n = i128::from(count.value(r));
                let scaled = sum.value(r).checked_mul(factor?)?;
                let (q, rem) = (scaled / n, scaled % n);
                // Half up: away from zero when the remainder is at least half.
                let round = i128::from(rem.unsigned_abs() * 2 >= n.unsigned_abs());
                Some(q + round * scaled.signum())
            })
            .collect();
        return Ok(Arc::new(avg.with_precision_and_scale(*p, *out_scale)?));
    }
    let sum = cast(sum, &DataType::Float64)?;
    let sum = sum.as_primitive::<Float64Type>();
    let avg: Float64Array = (0..sum.len())
        .map(|r| {
            (sum.is_valid(r) && count.is_valid(r) && count.value(r) > 0)
                .then(|| sum.value(r) / count.value(r) as f64)
        })
        .collect();
    Ok(Arc::new(avg))
}

/// The closed groups in the aggregation's output columns, `c0`, `c1`, ….
fn finalize(
    sa: &StreamAggregate,
    closed: &RecordBatch,
    groups: usize,
) -> Result<RecordBatch, RunError> {
    let out = sa.aggregate.schema.as_arrow();
    let column = |name: &str| -> Result<ArrayRef, RunError> {
        Ok(Arc::clone(closed.column(closed.schema().index_of(name)?)))
    };
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (i, field) in out.fields().iter().enumerate() {
        let value: ArrayRef = if i < groups {
            if i == sa.event_time.index && sa.event_time.is_window() {
                let ws = column("ws")?;
                let we = column("we")?;
                let (ws, we) = (
                    ws.as_primitive::<Int64Type>(),
                    we.as_primitive::<Int64Type>(),
                );
                let bounds: Vec<Option<(i64, i64)>> = (0..ws.len())
                    .map(|r| (ws.is_valid(r) && we.is_valid(r)).then(|| (ws.value(r), we.value(r))))
                    .collect();
                let ts_type = match field.data_type() {
                    DataType::Struct(f) => f[0].data_type().clone(),
                    _ => TS,
                };
                window_array(&ts_type, &bounds)?
            } else {
                column(&format!("g{i}"))?
            }
        } else {
            let j = i - groups;
            let f = &sa.functions[j];
            let s = column(&format!("s{j}"))?;
            match f.function {
                Function::Avg => {
                    let n = column(&format!("n{j}"))?;
                    average(&s, n.as_primitive::<Int64Type>(), &f.output)?
                }
                _ => s,
            }
        };
        let value = cast(&value, field.data_type())?;
        fields.push(Field::new(format!("c{i}"), field.data_type().clone(), true));
        columns.push(value);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// `input` without the filter conjuncts on the event time, for the greatest event time
/// Spark's watermark operator sees; `None` when it has none.
pub(crate) fn without_event_time_filters(
    input: &LogicalPlan,
    w: &cdcflow_plan::Watermark,
) -> Result<Option<LogicalPlan>, RunError> {
    let out = input.clone().transform_up(|node| {
        let LogicalPlan::Filter(f) = &node else {
            return Ok(Transformed::no(node));
        };
        let (on_time, other): (Vec<&Expr>, Vec<&Expr>) =
            split_conjunction(&f.predicate).into_iter().partition(|c| {
                c.column_refs()
                    .iter()
                    .any(|col| is_event_time(&f.input, col, w))
            });
        if on_time.is_empty() {
            return Ok(Transformed::no(node));
        }
        let input = f.input.as_ref().clone();
        let plan = match conjunction(other.into_iter().cloned()) {
            Some(p) => LogicalPlanBuilder::from(input).filter(p)?.build()?,
            None => input,
        };
        Ok(Transformed::yes(plan))
    })?;
    Ok(out.transformed.then_some(out.data))
}
