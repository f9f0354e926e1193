//! One batch of a join of two watermarked streams ([`StreamJoin`]), as Spark's
//! `StreamingSymmetricHashJoinExec` runs it:
//!
//! 1. each side's new rows at or below the global watermark the batches before left
//!    (the minimum of the two inputs' own, so an idle input holds it back) are dropped
//!    as late; the others join the state;
//! 2. every pair of the two sides' kept rows with at least one new row that meets the
//!    join condition is appended (so a pair is appended once, in the batch of its
//!    second row), and its rows are marked matched;
//! 3. each input's watermark moves to its greatest event time less its delay, the
//!    global one to their minimum (never down), and a kept row that no later row of
//!    the other side can match any more ([`TimeBounds`]) leaves the state; an outer
//!    join appends it with nulls when it never matched.
//!
//! The state of each side is its rows (`c0`, `c1`, … as the side's input has them),
//! their event time (`__t`, microseconds), an id and whether they matched.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use cdcflow_plan::stream_join::{JoinSide, StreamJoin};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray, new_null_array,
};
use datafusion::arrow::compute::{cast, concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::common::{DFSchemaRef, JoinType};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, cast as cast_expr, col};
use datafusion::prelude::SessionContext;

use super::metrics::StateMetrics;
use super::run::{Outcome, StateRun};
use super::store::Version;
use crate::RunError;

/// The state's parts: each side's rows, kept whole (a later row of the other side may
/// match, and mark, any of them).
pub(crate) const LEFT: &str = "left";
pub(crate) const RIGHT: &str = "right";

const TS: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

/// The state and watermarks before a batch.
pub(crate) struct Before {
    pub watermark_micros: i64,
    pub seen_rows: bool,
    /// Each input's own watermark from the batches before in this run of the query
    /// (none in a run's first batch).
    pub inputs: BTreeMap<String, i64>,
    pub left: Vec<RecordBatch>,
    pub right: Vec<RecordBatch>,
}

pub(crate) struct Stepped {
    /// The rows appended, in the join's output columns (`c0`, `c1`, …).
    pub emitted: RecordBatch,
    pub left: Vec<RecordBatch>,
    pub right: Vec<RecordBatch>,
    pub watermark_micros: i64,
    pub seen_rows: bool,
    pub inputs: BTreeMap<String, i64>,
    pub late: Option<RecordBatch>,
    pub metrics: StateMetrics,
}

/// The state columns of a side whose input has `input`'s columns.
pub(crate) fn side_schema(input: &DFSchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = input
        .fields()
        .iter()
        .enumerate()
        .map(|(k, f)| Field::new(format!("c{k}"), f.data_type().clone(), true))
        .collect();
    fields.push(Field::new("__t", DataType::Int64, true));
    fields.push(Field::new("__id", DataType::Int64, true));
    fields.push(Field::new("__matched", DataType::Boolean, true));
    Arc::new(Schema::new(fields))
}

/// What the state is of, to refuse a state kept for another query.
pub(crate) fn operator_fingerprint(sj: &StreamJoin) -> String {
    let columns = |s: &SchemaRef| {
        s.fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "join {:?} of [{}] and [{}] on {} {:?}",
        sj.join.join_type,
        columns(&side_schema(sj.join.left.schema())),
        columns(&side_schema(sj.join.right.schema())),
        sj.join
            .filter
            .as_ref()
            .map(|f| f.to_string())
            .unwrap_or_default(),
        sj.bounds
    )
}

/// A side's input rows as the join reads them: its columns (`c0`, `c1`, …) and its
/// event time (`__t`, microseconds).
pub(crate) fn side_rows_plan(
    input: &LogicalPlan,
    side: &JoinSide,
) -> Result<LogicalPlan, RunError> {
    let mut exprs: Vec<Expr> = input
        .schema()
        .columns()
        .into_iter()
        .enumerate()
        .map(|(k, c)| Expr::Column(c).alias(format!("c{k}")))
        .collect();
    exprs.push(
        cast_expr(
            cast_expr(Expr::Column(side.event_column.clone()), TS),
            DataType::Int64,
        )
        .alias("__t"),
    );
    Ok(LogicalPlanBuilder::from(input.clone())
        .project(exprs)?
        .build()?)
}

/// A side's new rows (of [`side_rows_plan`]) in its state's columns, not yet matched,
/// each with an id unique in the state, and the greatest event time among them.
fn new_rows(
    input: &LogicalPlan,
    rows: &[RecordBatch],
    batch: i64,
) -> Result<(Vec<RecordBatch>, Option<i64>), RunError> {
    let schema = side_schema(input.schema());
    let mut next = batch << 32;
    let mut greatest: Option<i64> = None;
    let mut out = Vec::with_capacity(rows.len());
    for b in rows {
        let n = b.num_rows();
        let t = b.column(b.num_columns() - 1).as_primitive::<Int64Type>();
        if let Some(m) = datafusion::arrow::compute::max(t) {
            greatest = Some(greatest.map_or(m, |g| g.max(m)));
        }
        let mut columns = b.columns().to_vec();
        columns.push(Arc::new(Int64Array::from_iter_values(
            next..next + n as i64,
        )));
        columns.push(Arc::new(BooleanArray::from(vec![false; n])));
        next += n as i64;
        out.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
    }
    Ok((out, greatest))
}

/// Rows of `batches` whose event time is at or below `watermark`, split off.
fn split_late(
    batches: Vec<RecordBatch>,
    watermark: Option<i64>,
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>), RunError> {
    let Some(w) = watermark else {
        return Ok((batches, Vec::new()));
    };
    let (mut kept, mut late) = (Vec::new(), Vec::new());
    for b in batches {
        let t = b.column(b.num_columns() - 3).as_primitive::<Int64Type>();
        let is_late: BooleanArray = t.iter().map(|t| Some(t.is_some_and(|t| t <= w))).collect();
        late.push(filter_record_batch(&b, &is_late)?);
        kept.push(filter_record_batch(
            &b,
            &datafusion::arrow::compute::not(&is_late)?,
        )?);
    }
    kept.retain(|b| b.num_rows() > 0);
    late.retain(|b| b.num_rows() > 0);
    Ok((kept, late))
}

/// A side's kept rows as the join reads them: its input's columns under their own
/// names, its ids and whether each row is new.
fn side_plan(
    input: &DFSchemaRef,
    old: &[RecordBatch],
    new: &[RecordBatch],
    prefix: &str,
) -> Result<LogicalPlan, RunError> {
    let state = side_schema(input);
    let mut fields: Vec<Field> = state.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("__new", DataType::Boolean, true));
    let schema = Arc::new(Schema::new(fields));
    let mark = |b: &RecordBatch, new: bool| -> Result<RecordBatch, RunError> {
        let mut columns = b.columns().to_vec();
        columns.push(Arc::new(BooleanArray::from(vec![new; b.num_rows()])));
        Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
    };
    let mut rows = old
        .iter()
        .map(|b| mark(b, false))
        .collect::<Result<Vec<_>, _>>()?;
    rows.extend(
        new.iter()
            .map(|b| mark(b, true))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let table = MemTable::try_new(Arc::clone(&schema), vec![rows])?;
    let source = datafusion::datasource::provider_as_source(Arc::new(table));
    let mut exprs: Vec<Expr> = (0..input.fields().len())
        .map(|k| {
            let (q, f) = input.qualified_field(k);
            col(format!("c{k}")).alias_qualified(q.cloned(), f.name())
        })
        .collect();
    exprs.push(col("__id").alias(format!("__cdcflow_{prefix}id")));
    exprs.push(col("__new").alias(format!("__cdcflow_{prefix}new")));
    Ok(
        LogicalPlanBuilder::scan(format!("__cdcflow_{prefix}"), source, None)?
            .project(exprs)?
            .build()?,
    )
}

/// One batch of `sj` as its execution plan runs it: over the rows of its two inputs
/// (each [`side_rows_plan`]), the state of `run` in `version`; gives the rows it
/// appends and what it did.
pub(crate) async fn batch(
    ctx: &SessionContext,
    sj: &StreamJoin,
    run: &StateRun,
    version: &mut Version,
    inputs: &[Vec<RecordBatch>],
) -> Result<(RecordBatch, Outcome), RunError> {
    let [left, right] = inputs else {
        return Err(RunError::internal("a join of two streams reads two inputs"));
    };
    let before = Before {
        watermark_micros: run.watermark_micros(),
        seen_rows: run.seen_rows(),
        inputs: run.inputs_this_run(),
        left: version.take_part(LEFT)?,
        right: version.take_part(RIGHT)?,
    };
    let mut s = step(ctx, sj, before, (left, right), run.batch).await?;
    for (part, schema, rows) in [
        (LEFT, side_schema(sj.join.left.schema()), &s.left),
        (RIGHT, side_schema(sj.join.right.schema()), &s.right),
    ] {
        version.put(part, 0, &schema, rows, None)?;
    }
    s.metrics.state_bytes = version.bytes();
    let outcome = Outcome {
        watermark_micros: s.watermark_micros,
        seen_rows: s.seen_rows,
        inputs: s.inputs,
        late: s.late,
        metrics: s.metrics,
    };
    Ok((s.emitted, outcome))
}

/// Runs one batch over the rows the join's two inputs give now (`left`, `right`, of
/// [`side_rows_plan`]).
pub(crate) async fn step(
    ctx: &SessionContext,
    sj: &StreamJoin,
    before: Before,
    (left, right): (&[RecordBatch], &[RecordBatch]),
    batch: i64,
) -> Result<Stepped, RunError> {
    let join = &sj.join;
    let (left_new, left_max) = new_rows(&join.left, left, batch)?;
    let (right_new, right_max) = new_rows(&join.right, right, batch)?;
    let late_mark = before.seen_rows.then_some(before.watermark_micros);
    let (left_new, left_late) = split_late(left_new, late_mark)?;
    let (right_new, right_late) = split_late(right_new, late_mark)?;
    let dropped = left_late
        .iter()
        .chain(&right_late)
        .map(|b| b.num_rows() as u64)
        .sum();

    // 2. The pairs with a new row.
    let left_plan = side_plan(join.left.schema(), &before.left, &left_new, "l")?;
    let right_plan = side_plan(join.right.schema(), &before.right, &right_new, "r")?;
    let mut conjuncts: Vec<Expr> = join
        .on
        .iter()
        .map(|(l, r)| l.clone().eq(r.clone()))
        .collect();
    conjuncts.extend(join.filter.clone());
    let pairs = LogicalPlanBuilder::from(left_plan)
        .join_on(right_plan, JoinType::Inner, conjuncts)?
        .filter(col("__cdcflow_lnew").or(col("__cdcflow_rnew")))?
        .build()?;
    let pairs = ctx.execute_logical_plan(pairs).await?.collect().await?;
    let (nl, nr) = (
        join.left.schema().fields().len(),
        join.right.schema().fields().len(),
    );
    let out_schema = output_schema(&join.schema);
    let mut emitted = Vec::new();
    let (mut left_matched, mut right_matched) = (HashSet::new(), HashSet::new());
    for b in &pairs {
        let ids = |i: usize| {
            b.column(i)
                .as_primitive::<Int64Type>()
                .iter()
                .flatten()
                .collect::<Vec<_>>()
        };
        left_matched.extend(ids(nl));
        right_matched.extend(ids(nl + 2 + nr));
        let mut columns: Vec<ArrayRef> = b.columns()[..nl].to_vec();
        columns.extend(b.columns()[nl + 2..nl + 2 + nr].iter().cloned());
        emitted.push(conform(&out_schema, &columns)?);
    }

    // 3. The watermarks move; rows no later row can match leave. Spark keeps each
    // input's watermark only while a query runs (its checkpoint keeps the global one),
    // and one `cdcflow run` (or `run --continuous`) is one run of the query: an input is
    // at its greatest event time in the run so far less its delay, or at 0 without rows
    // yet, and the global watermark moves to their minimum when that is higher.
    let mut inputs = before.inputs;
    for (name, greatest, side) in [
        ("left", left_max, &sj.left),
        ("right", right_max, &sj.right),
    ] {
        if let Some(g) = greatest {
            let own = g.saturating_sub(side.watermark.delay_micros);
            let kept = inputs.entry(name.to_string()).or_insert(own);
            *kept = (*kept).max(own);
        }
    }
    let seen_rows = before.seen_rows || left_max.is_some() || right_max.is_some();
    let least = ["left", "right"]
        .iter()
        .map(|n| inputs.get(*n).copied().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let watermark = before.watermark_micros.max(least);
    let keep_left = |t: i64| sj.bounds.left_may_match(t, watermark);
    let keep_right = |t: i64| sj.bounds.right_may_match(t, watermark);
    let outer_left = matches!(join.join_type, JoinType::Left | JoinType::Full);
    let outer_right = matches!(join.join_type, JoinType::Right | JoinType::Full);
    let mut metrics = StateMetrics {
        rows_dropped_by_watermark: dropped,
        rows_updated: left_new
            .iter()
            .chain(&right_new)
            .map(|b| b.num_rows() as u64)
            .sum(),
        watermark_micros: watermark,
        ..StateMetrics::default()
    };
    let mut sides = Vec::new();
    for (old, new, matched, keep, outer, is_left) in [
        (
            before.left,
            left_new,
            &left_matched,
            &keep_left as &dyn Fn(i64) -> bool,
            outer_left,
            true,
        ),
        (
            before.right,
            right_new,
            &right_matched,
            &keep_right as &dyn Fn(i64) -> bool,
            outer_right,
            false,
        ),
    ] {
        let mut kept = Vec::new();
        for b in old.into_iter().chain(new) {
            let b = mark_matched(b, matched)?;
            let n = b.num_columns();
            let t = b.column(n - 3).as_primitive::<Int64Type>();
            let stays: BooleanArray = t.iter().map(|t| Some(t.is_none_or(keep))).collect();
            let leaves = filter_record_batch(&b, &datafusion::arrow::compute::not(&stays)?)?;
            metrics.rows_removed += leaves.num_rows() as u64;
            if outer && leaves.num_rows() > 0 {
                let unmatched = leaves.column(n - 1).as_boolean();
                let unmatched = datafusion::arrow::compute::not(unmatched)?;
                let lonely = filter_record_batch(&leaves, &unmatched)?;
                if lonely.num_rows() > 0 {
                    emitted.push(null_extended(&out_schema, &lonely, is_left, nl, nr)?);
                }
            }
            let stays = filter_record_batch(&b, &stays)?;
            if stays.num_rows() > 0 {
                kept.push(stays);
            }
        }
        sides.push(kept);
    }
    // Each side in one batch of its own buffers (see `aggregate.rs`).
    let compact =
        |kept: Vec<RecordBatch>, schema: SchemaRef| -> Result<Vec<RecordBatch>, RunError> {
            match kept.iter().map(RecordBatch::num_rows).sum::<usize>() {
                0 => Ok(Vec::new()),
                _ => Ok(vec![concat_batches(&schema, &kept)?]),
            }
        };
    let right = compact(
        sides.pop().unwrap_or_default(),
        side_schema(join.right.schema()),
    )?;
    let left = compact(
        sides.pop().unwrap_or_default(),
        side_schema(join.left.schema()),
    )?;
    metrics.rows_total = left.iter().chain(&right).map(|b| b.num_rows() as u64).sum();
    metrics.memory_used_bytes = left
        .iter()
        .chain(&right)
        .map(|b| b.get_array_memory_size() as u64)
        .sum();
    let emitted = concat_batches(&out_schema, &emitted)?;
    let late = late_rows(
        &out_schema,
        &join.schema,
        &left_late,
        &right_late,
        nl,
        nr,
        before.watermark_micros,
    )?;
    Ok(Stepped {
        emitted,
        left,
        right,
        watermark_micros: watermark,
        seen_rows,
        inputs,
        late,
        metrics,
    })
}

/// The join's output columns, named `c0`, `c1`, …, all nullable.
fn output_schema(join: &DFSchemaRef) -> SchemaRef {
    Arc::new(Schema::new(
        join.fields()
            .iter()
            .enumerate()
            .map(|(k, f)| Field::new(format!("c{k}"), f.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ))
}

fn conform(schema: &SchemaRef, columns: &[ArrayRef]) -> Result<RecordBatch, RunError> {
    let columns = columns
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| cast(c, f.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// `b` with `__matched` set for the rows whose id is in `matched`.
fn mark_matched(b: RecordBatch, matched: &HashSet<i64>) -> Result<RecordBatch, RunError> {
    if matched.is_empty() {
        return Ok(b);
    }
    let n = b.num_columns();
    let ids = b.column(n - 2).as_primitive::<Int64Type>();
    let was = b.column(n - 1).as_boolean();
    let now: BooleanArray = (0..b.num_rows())
        .map(|r| Some(was.value(r) || (ids.is_valid(r) && matched.contains(&ids.value(r)))))
        .collect();
    let mut columns = b.columns().to_vec();
    columns[n - 1] = Arc::new(now);
    Ok(RecordBatch::try_new(b.schema(), columns)?)
}

/// The side's rows `rows` (its state columns) in the join's output columns, the
/// other side's null.
fn null_extended(
    out: &SchemaRef,
    rows: &RecordBatch,
    is_left: bool,
    nl: usize,
    nr: usize,
) -> Result<RecordBatch, RunError> {
    let n = rows.num_rows();
    let own: Vec<ArrayRef> = rows.columns()[..if is_left { nl } else { nr }].to_vec();
    let nulls = |range: std::ops::Range<usize>| -> Vec<ArrayRef> {
        range
            .map(|k| new_null_array(out.field(k).data_type(), n))
            .collect()
    };
    let columns: Vec<ArrayRef> = match is_left {
        true => own.into_iter().chain(nulls(nl..nl + nr)).collect(),
        false => nulls(0..nl).into_iter().chain(own).collect(),
    };
    conform(out, &columns)
}

/// The late rows of both sides as `<target>__late` keeps them: the join's output
/// columns (the other side null, names made unique), the side, the watermark, why.
fn late_rows(
    out: &SchemaRef,
    join: &DFSchemaRef,
    left: &[RecordBatch],
    right: &[RecordBatch],
    nl: usize,
    nr: usize,
    watermark: i64,
) -> Result<Option<RecordBatch>, RunError> {
    let mut parts = Vec::new();
    for (rows, is_left) in [(left, true), (right, false)] {
        for b in rows {
            parts.push((null_extended(out, b, is_left, nl, nr)?, is_left));
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    let mut names: Vec<String> = Vec::new();
    let mut fields: Vec<Field> = Vec::new();
    for f in join.fields() {
        let mut name = f.name().clone();
        while names.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
            name.push('_');
        }
        names.push(name.clone());
        fields.push(Field::new(name, f.data_type().clone(), true));
    }
    let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    fields.push(Field::new("_side", DataType::Utf8, true));
    fields.push(Field::new("_watermark", utc, true));
    fields.push(Field::new("_reason", DataType::Utf8, true));
    let schema = Arc::new(Schema::new(fields));
    let mut batches = Vec::new();
    for (b, is_left) in parts {
        let n = b.num_rows();
        let mut columns = b.columns().to_vec();
        columns.push(Arc::new(StringArray::from(vec![
            if is_left {
                "left"
            } else {
                "right"
            };
            n
        ])));
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![watermark; n]).with_timezone("UTC"),
        ));
        columns.push(Arc::new(StringArray::from(vec![
            "its event time was at or before the watermark";
            n
        ])));
        batches.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
    }
    Ok(Some(concat_batches(&schema, &batches)?))
}
