//! A batch decided on every core. Keys are independent of each other, so the members
//! and events of the touched keys are split into one share per core by key hash and each
//! share is decided by the kernel on its own thread.
//!
//! The TRUNCATE and GC-horizon markers concern every key: every share sees them, and of
//! the markers the shares write back, the newest of each kind is kept, as one decide
//! would have written it. A batch bringing a new TRUNCATE decides every key again, on
//! one thread.

use std::sync::Arc;

use crate::cdc::apply_error::ApplyError;
use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take, take_record_batch};
use datafusion::arrow::datatypes::{Int8Type, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};

use super::keyset::hashes;
use super::keyset::key_columns;
use crate::cdc::kernel::{
    Applied, ApplyMetrics, Decided, Decision, OP, Op, Rules, SEQ, decide_events, filtered, is_keyed,
};
use crate::par;

/// The kernel's decision on `members` (state rows of the touched keys and the markers)
/// and `events`; `every_key` when every stored key is a member (a recompute or a new
/// TRUNCATE), which stays on one thread. Both inputs are taken: once split into shares
/// they are let go, so that the kernel's work does not sit on top of them.
pub(super) fn decide(
    rules: &Rules,
    members: RecordBatch,
    recompute: bool,
    every_key: bool,
    events: RecordBatch,
    now_micros: i64,
) -> Result<Decisions, ApplyError> {
    let cores = par::cores();
    if every_key || cores < 2 || members.num_rows() + events.num_rows() < rules.min_shared_rows {
        let one = decide_events(rules, vec![members], recompute, events, now_micros)?;
        return Ok(Decisions(vec![one]));
    }
    let member_rows = share_rows(rules, &members, cores)?;
    let event_rows = share_rows(rules, &events, cores)?;
    let shares: Vec<(RecordBatch, RecordBatch)> = split(members, member_rows)?
        .into_iter()
        .zip(split(events, event_rows)?)
        .collect();
    // Each share is decided on its own core.
    let decided = par::map(shares, |(members, events)| {
        decide_events(rules, vec![members], false, events, now_micros)
    })?;
    Ok(Decisions(decided))
}

/// The decisions of a batch's shares (one when it was not shared), not yet built into
/// rows: each table's rows are built a part at a time ([`Decision`]).
pub(crate) struct Decisions(Vec<Decision>);

impl Decisions {
    pub(crate) fn metrics(&self) -> ApplyMetrics {
        let mut metrics = ApplyMetrics::default();
        self.0.iter().for_each(|d| metrics.add(&d.metrics));
        metrics
    }

    pub(crate) fn recomputed(&self) -> bool {
        self.0.iter().any(|d| d.recomputed)
    }

    /// About the rows of the new state: a writer's estimate.
    pub(crate) fn state_rows(&self) -> usize {
        self.0.iter().map(Decision::state_rows).sum()
    }

    pub(crate) fn public_rows(&self) -> usize {
        self.0.iter().map(Decision::public_rows).sum()
    }

    /// The new state's keyed rows, a part at a time ([`Decisions::markers`] are the rest).
    pub(crate) fn state(&self) -> impl Iterator<Item = Result<RecordBatch, ApplyError>> + '_ {
        self.0.iter().flat_map(Decision::state)
    }

    /// The new state's marker rows. Every share saw the stored markers and may keep
    /// them: of the shares' markers, the newest of each kind is kept, as one decision
    /// would have written it.
    pub(crate) fn markers(&self) -> Result<Vec<RecordBatch>, ApplyError> {
        match &self.0[..] {
            [one] => one.markers(),
            shares => {
                let mut markers = Vec::new();
                for share in shares {
                    markers.extend(share.markers()?);
                }
                newest_markers(&shares[0].rules.state_schema(), &markers)
            }
        }
    }

    /// The visible table's new rows, a part at a time.
    pub(crate) fn public(&self) -> impl Iterator<Item = Result<RecordBatch, ApplyError>> + '_ {
        self.0.iter().flat_map(Decision::public)
    }

    /// Both tables' rows, built at once.
    pub(crate) fn into_decided(self) -> Result<Decided, ApplyError> {
        let mut state = self.state().collect::<Result<Vec<_>, _>>()?;
        state.extend(self.markers()?);
        let public = self.public().collect::<Result<Vec<_>, _>>()?;
        Ok(Decided {
            applied: Applied {
                state,
                public,
                metrics: self.metrics(),
            },
            recomputed: self.recomputed(),
        })
    }
}

/// The rows of `batch` in `n` shares: each keyed row in the share of its key's hash,
/// each marker row in every share.
fn share_rows(rules: &Rules, batch: &RecordBatch, n: usize) -> Result<Vec<Vec<u32>>, ApplyError> {
    let hashes = hashes(&key_columns(batch, &rules.keys))?;
    let ops = batch.column(rules.op_col()).as_primitive::<Int8Type>();
    let mut rows: Vec<Vec<u32>> = vec![Vec::with_capacity(batch.num_rows() / n + 1); n];
    for (r, (&op, &hash)) in ops.values().iter().zip(&hashes).enumerate() {
        let r = u32::try_from(r).map_err(|_| overflow())?;
        match is_keyed(op) {
            // Below `n`, a usize.
            true => rows[usize::try_from(hash % n as u64).unwrap_or(0)].push(r),
            false => rows.iter_mut().for_each(|share| share.push(r)),
        }
    }
    Ok(rows)
}

/// `batch` as one batch per share of `rows`, a column at a time: each column of `batch`
/// is let go once its shares are copied, so the split holds one column twice at most.
fn split(batch: RecordBatch, rows: Vec<Vec<u32>>) -> Result<Vec<RecordBatch>, ApplyError> {
    let indices: Vec<UInt32Array> = rows.into_iter().map(UInt32Array::from).collect();
    let schema = batch.schema();
    let mut shares: Vec<Vec<ArrayRef>> =
        vec![Vec::with_capacity(schema.fields().len()); indices.len()];
    let (_, columns, _) = batch.into_parts();
    for column in columns {
        for (share, at) in shares.iter_mut().zip(&indices) {
            share.push(take(column.as_ref(), at, None)?);
        }
    }
    shares
        .into_iter()
        .zip(&indices)
        .map(|(columns, at)| {
            let options = RecordBatchOptions::new().with_row_count(Some(at.len()));
            Ok(RecordBatch::try_new_with_options(
                Arc::clone(&schema),
                columns,
                &options,
            )?)
        })
        .collect()
}

fn overflow() -> ApplyError {
    ApplyError::too_many("rows")
}

/// The keyed rows of a state batch (in the events' columns or a narrow state's), and its
/// marker rows.
pub(super) fn without_markers(
    batch: &RecordBatch,
) -> Result<(Option<RecordBatch>, Option<RecordBatch>), ApplyError> {
    let ops = batch
        .column(batch.schema().index_of(OP)?)
        .as_primitive::<Int8Type>();
    let keyed: Vec<bool> = ops.values().iter().map(|&op| is_keyed(op)).collect();
    if keyed.iter().all(|&k| k) {
        return Ok((Some(batch.clone()), None));
    }
    let marker: Vec<bool> = keyed.iter().map(|k| !k).collect();
    Ok((filtered(batch, &keyed)?, filtered(batch, &marker)?))
}

/// Of the marker rows (of `schema`), the newest GC horizon and the newest TRUNCATE, in
/// that order.
pub(crate) fn newest_markers(
    schema: &SchemaRef,
    markers: &[RecordBatch],
) -> Result<Vec<RecordBatch>, ApplyError> {
    if markers.is_empty() {
        return Ok(vec![]);
    }
    let all = concat_batches(schema, markers)?;
    let seq_column = Arc::clone(all.column(schema.index_of(SEQ)?));
    let seq = RowConverter::new(vec![SortField::new(seq_column.data_type().clone())])?
        .convert_columns(&[seq_column])?;
    let ops = all.column(schema.index_of(OP)?).as_primitive::<Int8Type>();
    let mut picks = Vec::new();
    for kind in [Op::GcHorizon, Op::Truncate] {
        let newest = (0..all.num_rows())
            .filter(|&r| ops.value(r) == kind as i8)
            .max_by(|&a, &b| seq.row(a).cmp(&seq.row(b)));
        if let Some(r) = newest {
            picks.push(u32::try_from(r).map_err(|_| overflow())?);
        }
    }
    Ok(vec![take_record_batch(&all, &UInt32Array::from(picks))?])
}
