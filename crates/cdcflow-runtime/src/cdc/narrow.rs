//! Plain SCD type 1 with a narrow state: per key only the winning event's sequence and
//! operation are stored, the values of a live key being its published row.
//!
//! A batch touches few keys, so their stored rows are taken out of the state, given
//! their values back from the published table (one hash probe over it, which also
//! drops the published rows of the touched keys) and decided by the general kernel.
//! Everything else is kept by bulk filters.
//!
//! Commits go published table first, state second. A crash between them leaves the
//! published table one batch ahead; the batch is then applied again to the older
//! state, which gives the same rows: a stored upsert only keeps its published row when
//! it beats every incoming event, and then that row is its own.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, UInt32Array, new_null_array,
};
use datafusion::arrow::compute::{concat_batches, interleave, take_record_batch};
use datafusion::arrow::datatypes::{Int8Type, Int64Type};
use datafusion::arrow::error::ArrowError;

use super::kernel::{Applied, Op, Rules, apply_events, filtered};
use super::keyset::{KeySet, NONE, hashes};
use crate::par;

pub(super) fn apply(
    rules: &Rules,
    stored: Vec<RecordBatch>,
    published: Vec<RecordBatch>,
    events: &RecordBatch,
    now_micros: i64,
) -> Result<Applied, ArrowError> {
    let event_ops = events.column(rules.op_col()).as_primitive::<Int8Type>();
    let touched = KeySet::new(
        key_columns(events, &rules.keys),
        (0..events.num_rows()).filter(|&r| is_keyed(event_ops.value(r))),
    )?;
    let truncating = event_ops.values().contains(&(Op::Truncate as i8));
    let horizon = now_micros.saturating_sub(rules.tombstone_retention_micros);

    let split = Split::of(rules, stored, &touched, truncating, horizon)?;
    let found = Found::scan(rules, &split.members, published, &touched, truncating)?;
    let wide = widen(rules, &split.members, &found.values, &found.at)?;
    let decided = apply_events(rules, &[wide], Some(&[]), events, now_micros)?;
    let Applied {
        state: decided_state,
        public: changed,
        metrics,
    } = decided.applied;
    found.check_missing(rules, &split.members, &decided_state)?;

    let narrow = rules.narrow_columns();
    let mut state = split.kept;
    for batch in &decided_state {
        state.push(batch.project(&narrow)?);
    }
    // A new TRUNCATE decided every key again, from the state alone.
    let mut public = match decided.recomputed {
        true => vec![],
        false => found.untouched,
    };
    public.extend(changed);
    Ok(Applied {
        state,
        public,
        metrics,
    })
}

fn is_keyed(op: i8) -> bool {
    op == Op::Upsert as i8 || op == Op::Delete as i8
}

fn key_columns(batch: &RecordBatch, keys: &[usize]) -> Vec<ArrayRef> {
    keys.iter().map(|&k| Arc::clone(batch.column(k))).collect()
}

/// The stored rows a batch decides again (members) and those it keeps as they are.
struct Split {
    members: RecordBatch,
    kept: Vec<RecordBatch>,
}

impl Split {
    /// Members: rows of touched keys, markers, tombstones past their retention (to be
    /// collected) and, when a TRUNCATE arrives, every row.
    fn of(
        rules: &Rules,
        stored: Vec<RecordBatch>,
        touched: &KeySet,
        truncating: bool,
        horizon: i64,
    ) -> Result<Self, ArrowError> {
        let narrow_keys: Vec<usize> = (0..rules.keys.len()).collect();
        let (op_col, recorded_col) = (rules.keys.len() + 1, rules.keys.len() + 2);
        let parts = par::map(stored, |batch| {
            let keys = key_columns(&batch, &narrow_keys);
            let found = touched.find(&keys, &hashes(&keys)?)?;
            let ops = batch.column(op_col).as_primitive::<Int8Type>();
            let recorded = batch.column(recorded_col).as_primitive::<Int64Type>();
            let member: Vec<bool> = (0..batch.num_rows())
                .map(|r| {
                    let op = ops.value(r);
                    !is_keyed(op)
                        || truncating
                        || found[r] != NONE
                        || (op == Op::Delete as i8 && recorded.value(r) < horizon)
                })
                .collect();
            let keep: Vec<bool> = member.iter().map(|m| !m).collect();
            Ok::<_, ArrowError>((filtered(&batch, &member)?, filtered(&batch, &keep)?))
        })?;
        let mut members = Vec::new();
        let mut kept = Vec::new();
        for (m, k) in parts {
            members.extend(m);
            kept.extend(k);
        }
        Ok(Self {
            members: concat_batches(&rules.state_schema(), &members)?,
            kept,
        })
    }
}

/// What one pass over the published rows found: the values of the member upserts, and
/// the rows of untouched keys.
struct Found {
    /// The published rows of member upserts, a batch per published batch with any.
    values: Vec<RecordBatch>,
    /// Per member row: (batch, row) of `values` holding its key's published row.
    at: Vec<Option<(usize, usize)>>,
    untouched: Vec<RecordBatch>,
}

impl Found {
    fn scan(
        rules: &Rules,
        members: &RecordBatch,
        published: Vec<RecordBatch>,
        touched: &KeySet,
        truncating: bool,
    ) -> Result<Self, ArrowError> {
        let narrow_keys: Vec<usize> = (0..rules.keys.len()).collect();
        let ops = members
            .column(rules.keys.len() + 1)
            .as_primitive::<Int8Type>();
        let wanted = KeySet::new(
            key_columns(members, &narrow_keys),
            (0..members.num_rows()).filter(|&r| ops.value(r) == Op::Upsert as i8),
        )?;
        let parts = par::map(published, |batch| {
            let keys = key_columns(&batch, &rules.keys);
            let hashes = hashes(&keys)?;
            let keep: Vec<bool> = touched
                .find(&keys, &hashes)?
                .iter()
                .map(|&t| t == NONE)
                .collect();
            // Upsert members are of touched keys, unless a TRUNCATE made every row one.
            let candidates = (0..batch.num_rows()).filter(|&r| truncating || !keep[r]);
            let hits = wanted.find_rows(&keys, &hashes, candidates)?;
            let rows = UInt32Array::from_iter_values(hits.iter().map(|&(r, _)| r as u32));
            let values = take_record_batch(&batch, &rows)?;
            let members: Vec<u32> = hits.into_iter().map(|(_, m)| m).collect();
            Ok::<_, ArrowError>((filtered(&batch, &keep)?, values, members))
        })?;
        let mut found = Self {
            values: Vec::new(),
            at: vec![None; members.num_rows()],
            untouched: Vec::new(),
        };
        for (kept, values, hit_members) in parts {
            found.untouched.extend(kept);
            if hit_members.is_empty() {
                continue;
            }
            let b = found.values.len();
            for (r, m) in hit_members.into_iter().enumerate() {
                found.at[m as usize].get_or_insert((b, r));
            }
            found.values.push(values);
        }
        Ok(found)
    }

    /// Fails when a stored upsert without a published row stayed its key's winner:
    /// its values are lost (the published table was changed behind the pipeline's
    /// back), and publishing nulls in their place would be silent damage.
    fn check_missing(
        &self,
        rules: &Rules,
        members: &RecordBatch,
        decided_state: &[RecordBatch],
    ) -> Result<(), ArrowError> {
        let ops = members
            .column(rules.keys.len() + 1)
            .as_primitive::<Int8Type>();
        let missing: Vec<usize> = (0..members.num_rows())
            .filter(|&r| ops.value(r) == Op::Upsert as i8 && self.at[r].is_none())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        // A lost row is its key and sequence among the upserts the apply kept.
        let mut lost_columns: Vec<ArrayRef> =
            key_columns(members, &(0..rules.keys.len()).collect::<Vec<_>>());
        lost_columns.push(Arc::clone(members.column(rules.keys.len())));
        let lost = KeySet::new(lost_columns, missing)?;
        let mut columns = rules.keys.clone();
        columns.push(rules.seq_col());
        let mut count = 0;
        for batch in decided_state {
            let kept = key_columns(batch, &columns);
            let ops = batch.column(rules.op_col()).as_primitive::<Int8Type>();
            count += lost
                .find(&kept, &hashes(&kept)?)?
                .iter()
                .enumerate()
                .filter(|&(r, &l)| l != NONE && ops.value(r) == Op::Upsert as i8)
                .count();
        }
        match count {
            0 => Ok(()),
            n => Err(ArrowError::InvalidArgumentError(format!(
                "{n} key(s) live in the AUTO CDC state have no row in the published table (was it changed outside the pipeline?); run a full refresh of the table"
            ))),
        }
    }
}

/// The members as events with values: keys, sequence and operation from the state, the
/// other columns from the published rows at `at` in `values` (null where there is none:
/// deletes and markers).
fn widen(
    rules: &Rules,
    members: &RecordBatch,
    values: &[RecordBatch],
    at: &[Option<(usize, usize)>],
) -> Result<RecordBatch, ArrowError> {
    let schema = rules.event_schema();
    let narrow = rules.narrow_columns();
    let none = values.len();
    let indices: Vec<(usize, usize)> = at.iter().map(|a| a.unwrap_or((none, 0))).collect();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (c, field) in schema.fields().iter().enumerate() {
        if let Some(n) = narrow.iter().position(|&w| w == c) {
            columns.push(Arc::clone(members.column(n)));
            continue;
        }
        let null = new_null_array(field.data_type(), 1);
        let mut sources: Vec<&dyn Array> = values.iter().map(|b| b.column(c).as_ref()).collect();
        sources.push(null.as_ref());
        columns.push(interleave(&sources, &indices)?);
    }
    RecordBatch::try_new(schema, columns)
}
