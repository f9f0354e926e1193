//! One batch of a deduplication within the watermark ([`StreamDedup`], `SELECT
//! DISTINCT ON (keys) …` over a watermarked stream), as Spark's
//! `StreamingDeduplicateWithinWatermarkExec` runs it:
//!
//! 1. the batch's rows at or below the watermark the batches before left are late;
//! 2. of the others, the first row of each key is appended unless the state holds the
//!    key, and the key is kept until `event time + delay` (the first row's); within a
//!    batch the first row of a key is the one with the earliest event time, then the
//!    least by its output values (Spark keeps whichever it reads first, which its docs
//!    leave open), so the result does not depend on how rows arrive;
//! 3. the watermark moves, and the keys it passes (`expires <= watermark`) leave.
//!
//! The state is the kept keys (`k0`, `k1`, …) and when each expires (`expires`), in
//! buckets of that time, so a batch rewrites only the buckets it adds keys to or
//! expires keys from; it reads every bucket to find its keys, one at a time.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use cdcflow_plan::stream_dedup::StreamDedup;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{
    SortOptions, concat_batches, filter_record_batch, take, take_record_batch,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, cast as cast_expr};

use super::aggregate::{greatest_unfiltered, late_rows, rows_and_greatest, time_bucket};
use super::metrics::StateMetrics;
use super::run::{Outcome, StateRun};
use super::store::Version;
use crate::RunError;

/// The state's part holding the kept keys.
const KEYS: &str = "keys";

fn event_time(sd: &StreamDedup) -> Expr {
    cast_expr(
        cast_expr(
            Expr::Column(sd.event_column.clone()),
            DataType::Timestamp(TimeUnit::Microsecond, None),
        ),
        DataType::Int64,
    )
}

/// The input's rows as the operator reads them: the keys (`k<i>`), the event time
/// (`et`, microseconds), the output columns (`c<j>`), then the input's own columns
/// (`in<k>`, for the late table).
pub(crate) fn rows_plan(sd: &StreamDedup) -> Result<LogicalPlan, RunError> {
    let mut exprs: Vec<Expr> = Vec::new();
    for (i, k) in sd.on.iter().enumerate() {
        exprs.push(k.clone().alias(format!("k{i}")));
    }
    exprs.push(event_time(sd).alias("et"));
    for (j, c) in sd.select.iter().enumerate() {
        exprs.push(unalias(c).clone().alias(format!("c{j}")));
    }
    for (k, c) in sd.input.schema().columns().into_iter().enumerate() {
        exprs.push(Expr::Column(c).alias(format!("in{k}")));
    }
    Ok(LogicalPlanBuilder::from(sd.input.as_ref().clone())
        .project(exprs)?
        .build()?)
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        _ => e,
    }
}

/// The greatest event time without the query's filters on it, when it has some.
pub(crate) fn greatest_plan(sd: &StreamDedup) -> Result<Option<LogicalPlan>, RunError> {
    greatest_unfiltered(&sd.input, &sd.watermark, event_time(sd))
}

/// The columns of the kept keys.
fn state_schema(sd: &StreamDedup) -> Result<SchemaRef, RunError> {
    let rows = rows_plan(sd)?;
    let mut fields: Vec<Field> = (0..sd.on.len())
        .map(|i| {
            let f = rows.schema().field(i);
            Field::new(format!("k{i}"), f.data_type().clone(), true)
        })
        .collect();
    fields.push(Field::new("expires", DataType::Int64, true));
    Ok(Arc::new(Schema::new(fields)))
}

/// What the state is of, to refuse a state kept for another query.
pub(crate) fn operator_fingerprint(sd: &StreamDedup) -> Result<String, RunError> {
    let columns: Vec<String> = state_schema(sd)?
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    Ok(format!(
        "deduplicate on [{}] of [{}] within {}",
        sd.on
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        columns.join(", "),
        sd.watermark.delay_micros
    ))
}

/// One batch of `sd` as its execution plan runs it: over its inputs' rows (those of
/// [`rows_plan`], then, when there is one, the row of [`greatest_plan`]), the state of
/// `run` in `version`; gives the rows it appends (`c0`, `c1`, …) and what it did.
pub(crate) fn batch(
    sd: &StreamDedup,
    run: &StateRun,
    version: &mut Version,
    inputs: &[Vec<RecordBatch>],
) -> Result<(RecordBatch, Outcome), RunError> {
    let (rows, greatest) = rows_and_greatest(inputs);
    let schema = match rows.first() {
        Some(b) => b.schema(),
        None => Arc::new(rows_plan(sd)?.schema().as_arrow().clone()),
    };
    let all = concat_batches(&schema, rows)?;
    let keys = sd.on.len();
    let outputs = sd.select.len();
    let passed = keys + 1 + outputs;
    let et = all.column(keys).as_primitive::<Int64Type>();
    let (before, seen_rows) = (run.watermark_micros(), run.seen_rows());
    let delay = sd.watermark.delay_micros;

    // 1. The late rows.
    let is_late = |r: usize| seen_rows && et.is_valid(r) && et.value(r) <= before;
    let (mut late, mut on_time) = (Vec::new(), Vec::new());
    for (r, row) in (0..all.num_rows()).zip(0u32..) {
        match is_late(r) {
            true => late.push(row),
            false => on_time.push(row),
        }
    }
    let late_table = match late.is_empty() {
        true => None,
        false => Some(late_rows(
            &all,
            passed,
            sd.input.schema(),
            (&late, &[]),
            before,
            "its event time was at or before the watermark",
        )?),
    };

    // 2. The first row of each key in the batch, unless the state holds the key.
    let key_columns: Vec<ArrayRef> = all.columns()[..keys].to_vec();
    let key_converter = RowConverter::new(
        key_columns
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )?;
    let key_rows = key_converter.convert_columns(&key_columns)?;
    let order_columns: Vec<ArrayRef> = all.columns()[keys..passed].to_vec();
    // Earliest event time first, a row without one last.
    let nulls_last = SortOptions {
        descending: false,
        nulls_first: false,
    };
    let order_rows = RowConverter::new(
        order_columns
            .iter()
            .map(|c| SortField::new_with_options(c.data_type().clone(), nulls_last))
            .collect(),
    )?
    .convert_columns(&order_columns)?;
    let mut sorted = on_time;
    sorted.sort_by(|a, b| {
        let (a, b) = (*a as usize, *b as usize);
        key_rows
            .row(a)
            .cmp(&key_rows.row(b))
            .then_with(|| order_rows.row(a).cmp(&order_rows.row(b)))
    });
    let mut first: Vec<u32> = Vec::new();
    for r in &sorted {
        if first
            .last()
            .is_none_or(|p| key_rows.row(*p as usize) != key_rows.row(*r as usize))
        {
            first.push(*r);
        }
    }
    let mut candidates: HashSet<Vec<u8>> = first
        .iter()
        .map(|r| key_rows.row(*r as usize).as_ref().to_vec())
        .collect();
    let state_schema = state_schema(sd)?;
    let mut metrics = StateMetrics::default();
    for file in version.carried().to_vec() {
        let held = version.read(&file)?;
        let bytes: usize = held.iter().map(RecordBatch::get_array_memory_size).sum();
        metrics.memory_used_bytes = metrics.memory_used_bytes.max(bytes as u64);
        for b in held {
            let kept = key_converter.convert_columns(&b.columns()[..keys])?;
            for k in kept.iter() {
                candidates.remove(k.as_ref());
            }
        }
    }
    let emitted: Vec<u32> = first
        .into_iter()
        .filter(|r| candidates.contains(key_rows.row(*r as usize).as_ref()))
        .collect();
    metrics.duplicates_dropped = (sorted.len() - emitted.len()) as u64;

    // 3. The watermark moves; the new keys are kept and the expired let go.
    let watermark = match greatest {
        Some(g) => before.max(g.saturating_sub(delay)),
        None => before,
    };
    let indices = UInt32Array::from(emitted.clone());
    let mut new_keys: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    let expires_of = |r: usize| {
        // A row without event time expires at once, as in Spark (its time reads as 0).
        (if et.is_valid(r) { et.value(r) } else { 0 }).saturating_add(delay)
    };
    for (i, r) in (0u32..).zip(&emitted) {
        let bucket = time_bucket(expires_of(*r as usize), delay);
        new_keys.entry(bucket).or_default().push(i);
    }
    let mut new_state: Vec<ArrayRef> = key_columns
        .iter()
        .map(|c| take(c, &indices, None))
        .collect::<Result<_, _>>()?;
    new_state.push(Arc::new(Int64Array::from_iter_values(
        emitted.iter().map(|r| expires_of(*r as usize)),
    )));
    let new_state = RecordBatch::try_new(Arc::clone(&state_schema), new_state)?;
    let expiring = version
        .carried()
        .iter()
        .filter(|f| f.part == KEYS && f.closes_from.is_some_and(|c| c <= watermark))
        .map(|f| f.bucket);
    let buckets: std::collections::BTreeSet<i64> =
        new_keys.keys().copied().chain(expiring).collect();
    for bucket in buckets {
        let mut rows = version.take(KEYS, bucket)?;
        if let Some(added) = new_keys.get(&bucket) {
            rows.push(take_record_batch(
                &new_state,
                &UInt32Array::from(added.clone()),
            )?);
        }
        let rows = concat_batches(&state_schema, &rows)?;
        let expires = rows.column(keys).as_primitive::<Int64Type>();
        let stays: datafusion::arrow::array::BooleanArray = expires
            .iter()
            .map(|e| Some(e.is_none_or(|e| e > watermark)))
            .collect();
        let kept = filter_record_batch(&rows, &stays)?;
        metrics.rows_removed += (rows.num_rows() - kept.num_rows()) as u64;
        let closes_from =
            datafusion::arrow::compute::min(kept.column(keys).as_primitive::<Int64Type>());
        version.put(KEYS, bucket, &state_schema, &[kept], closes_from)?;
    }
    metrics.rows_total = version.rows();
    metrics.rows_updated = emitted.len() as u64;
    metrics.rows_dropped_by_watermark = late.len() as u64;
    metrics.state_bytes = version.bytes();
    metrics.watermark_micros = watermark;

    let out_columns: Vec<ArrayRef> = all.columns()[keys + 1..passed]
        .iter()
        .map(|c| take(c, &indices, None))
        .collect::<Result<_, _>>()?;
    let out_fields: Vec<Field> = (0..outputs)
        .map(|j| {
            let f = schema.field(keys + 1 + j);
            Field::new(format!("c{j}"), f.data_type().clone(), true)
        })
        .collect();
    let out = RecordBatch::try_new(Arc::new(Schema::new(out_fields)), out_columns)?;
    let outcome = Outcome {
        watermark_micros: watermark,
        seen_rows: seen_rows || greatest.is_some(),
        inputs: Default::default(),
        late: late_table,
        metrics,
    };
    Ok((out, outcome))
}
