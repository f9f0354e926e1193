//! One batch applied to the keys it touches. A batch touches few keys, so the state rows
//! of those keys (the members) are taken out of the stored state by a hash probe,
//! decided with the batch's events by the kernel, and put back; all other state rows are
//! kept by bulk filters, and the published rows of untouched keys as they are. Each input
//! batch is let go once it is filtered, and the filtering runs on every core.
//!
//! A narrow state (plain SCD type 1) keeps no values: the members get theirs back from
//! the published table in the same pass that drops the touched keys' published rows.
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

use super::kernel::{Applied, Op, Rules, Visible, filtered};
use super::keyset::{KeySet, NONE, hashes};
use crate::par;

pub(super) fn apply(
    rules: &Rules,
    stored: Vec<RecordBatch>,
    visible: Visible,
    events: &RecordBatch,
    now_micros: i64,
) -> Result<Applied, ArrowError> {
    let event_ops = events.column(rules.op_col()).as_primitive::<Int8Type>();
    let touched = KeySet::new(
        key_columns(events, &rules.keys),
        (0..events.num_rows()).filter(|&r| is_keyed(event_ops.value(r))),
    )?;
    let recompute = matches!(visible, Visible::Recompute);
    // A TRUNCATE may concern every key.
    let every_key = recompute || event_ops.values().contains(&(Op::Truncate as i8));
    let layout = Layout::of(rules);
    let split = Split::of(rules, &layout, stored, &touched, every_key, now_micros)?;
    let published = match visible {
        Visible::Rows(published) => published,
        Visible::Recompute => vec![],
    };
    let narrow = rules.narrow_state().then_some(&split.members);
    let Probe { keep, values } =
        Probe::of(rules, &layout, narrow, &published, &touched, every_key)?;
    let members = match &values {
        Some(v) => widen(rules, &split.members, &v.values, &v.at)?,
        None => split.members.clone(),
    };
    // The published rows of untouched keys are set apart while the kernel decides.
    let (decided, untouched) = std::thread::scope(|scope| {
        let filtering = scope.spawn(move || keep_rows(published, keep));
        let decided =
            super::shares::decide(rules, members, recompute, every_key, events, now_micros);
        let untouched = filtering
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (decided, untouched)
    });
    let (decided, untouched) = (decided?, untouched?);
    let Applied {
        state: decided_state,
        public: changed,
        metrics,
    } = decided.applied;
    let mut state = split.kept;
    if let Some(values) = &values {
        values.check_missing(&layout, &decided_state, rules)?;
        let narrow = rules.narrow_columns();
        for batch in &decided_state {
            state.push(batch.project(&narrow)?);
        }
    } else {
        state.extend(decided_state);
    }
    // Every key decided again (a new TRUNCATE, or a recompute): from the state alone.
    let mut public = match decided.recomputed {
        true => vec![],
        false => untouched,
    };
    public.extend(changed);
    Ok(Applied {
        state,
        public,
        metrics,
    })
}

/// Where a stored state row keeps its key, operation and recording time.
struct Layout {
    keys: Vec<usize>,
    seq: usize,
    op: usize,
    recorded: usize,
}

impl Layout {
    fn of(rules: &Rules) -> Self {
        if rules.narrow_state() {
            let k = rules.keys.len();
            return Self {
                keys: (0..k).collect(),
                seq: k,
                op: k + 1,
                recorded: k + 2,
            };
        }
        Self {
            keys: rules.keys.clone(),
            seq: rules.seq_col(),
            op: rules.op_col(),
            recorded: rules.recorded_col(),
        }
    }
}

/// The `published` rows whose `keep` is set.
fn keep_rows(
    published: Vec<RecordBatch>,
    keep: Vec<Vec<bool>>,
) -> Result<Vec<RecordBatch>, ArrowError> {
    let parts = par::map(
        published.into_iter().zip(keep).collect(),
        |(batch, keep)| filtered(&batch, &keep),
    )?;
    Ok(parts.into_iter().flatten().collect())
}

pub(super) fn is_keyed(op: i8) -> bool {
    op == Op::Upsert as i8 || op == Op::Delete as i8
}

pub(super) fn key_columns(batch: &RecordBatch, keys: &[usize]) -> Vec<ArrayRef> {
    keys.iter().map(|&k| Arc::clone(batch.column(k))).collect()
}

/// The stored rows a batch decides again (members) and those it keeps as they are.
struct Split {
    members: RecordBatch,
    kept: Vec<RecordBatch>,
}

impl Split {
    /// Members: rows of touched keys (of every key when `every_key`), markers, and SCD
    /// type 1 tombstones past their retention (to be collected).
    fn of(
        rules: &Rules,
        layout: &Layout,
        stored: Vec<RecordBatch>,
        touched: &KeySet,
        every_key: bool,
        now_micros: i64,
    ) -> Result<Self, ArrowError> {
        let horizon = match rules.scd2 {
            true => i64::MIN,
            false => now_micros.saturating_sub(rules.tombstone_retention_micros),
        };
        let parts = par::map(stored, |batch| {
            let keys = key_columns(&batch, &layout.keys);
            let found = touched.find(&keys, &hashes(&keys)?)?;
            let ops = batch.column(layout.op).as_primitive::<Int8Type>();
            let recorded = batch.column(layout.recorded).as_primitive::<Int64Type>();
            let member: Vec<bool> = (0..batch.num_rows())
                .map(|r| {
                    let op = ops.value(r);
                    !is_keyed(op)
                        || every_key
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

/// What one pass over the published rows found: per batch, the rows whose key no
/// incoming event touches, and for a narrow state the values of the member upserts.
struct Probe {
    keep: Vec<Vec<bool>>,
    values: Option<Values>,
}

/// The published rows of a narrow state's member upserts.
struct Values {
    /// The stored rows decided again.
    members: RecordBatch,
    /// The published rows of member upserts, a batch per published batch with any.
    values: Vec<RecordBatch>,
    /// Per member row: (batch, row) of `values` holding its key's published row.
    at: Vec<Option<(usize, usize)>>,
}

impl Probe {
    fn of(
        rules: &Rules,
        layout: &Layout,
        narrow_members: Option<&RecordBatch>,
        published: &[RecordBatch],
        touched: &KeySet,
        every_key: bool,
    ) -> Result<Self, ArrowError> {
        let wanted = match narrow_members {
            Some(members) => {
                let ops = members.column(layout.op).as_primitive::<Int8Type>();
                Some(KeySet::new(
                    key_columns(members, &layout.keys),
                    (0..members.num_rows()).filter(|&r| ops.value(r) == Op::Upsert as i8),
                )?)
            }
            None => None,
        };
        let parts = par::map(published.iter().collect(), |batch: &RecordBatch| {
            let keys = key_columns(batch, &rules.keys);
            let hashes = hashes(&keys)?;
            let keep: Vec<bool> = touched
                .find(&keys, &hashes)?
                .iter()
                .map(|&t| t == NONE)
                .collect();
            let Some(wanted) = &wanted else {
                return Ok::<_, ArrowError>((keep, None));
            };
            // Upsert members are of touched keys, unless every row is one.
            let candidates = (0..batch.num_rows()).filter(|&r| every_key || !keep[r]);
            let hits = wanted.find_rows(&keys, &hashes, candidates)?;
            let rows = UInt32Array::from_iter_values(hits.iter().map(|&(r, _)| r as u32));
            let values = take_record_batch(batch, &rows)?;
            let members: Vec<u32> = hits.into_iter().map(|(_, m)| m).collect();
            Ok((keep, Some((values, members))))
        })?;
        let mut values = narrow_members.map(|members| Values {
            members: members.clone(),
            values: Vec::new(),
            at: vec![None; members.num_rows()],
        });
        let mut keep = Vec::with_capacity(parts.len());
        for (kept, hits) in parts {
            keep.push(kept);
            let (Some(found), Some((batch, hit_members))) = (values.as_mut(), hits) else {
                continue;
            };
            if hit_members.is_empty() {
                continue;
            }
            let b = found.values.len();
            for (r, m) in hit_members.into_iter().enumerate() {
                found.at[m as usize].get_or_insert((b, r));
            }
            found.values.push(batch);
        }
        Ok(Self { keep, values })
    }
}

impl Values {
    /// Fails when a stored upsert without a published row stayed its key's winner:
    /// its values are lost (the published table was changed behind the pipeline's
    /// back), and publishing nulls in their place would be silent damage.
    fn check_missing(
        &self,
        layout: &Layout,
        decided_state: &[RecordBatch],
        rules: &Rules,
    ) -> Result<(), ArrowError> {
        let ops = self.members.column(layout.op).as_primitive::<Int8Type>();
        let missing: Vec<usize> = (0..self.members.num_rows())
            .filter(|&r| ops.value(r) == Op::Upsert as i8 && self.at[r].is_none())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        // A lost row is its key and sequence among the upserts the apply kept.
        let mut lost_columns: Vec<ArrayRef> = key_columns(&self.members, &layout.keys);
        lost_columns.push(Arc::clone(self.members.column(layout.seq)));
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
