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

use crate::cdc::apply_error::ApplyError;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, UInt32Array, UInt64Array, new_null_array,
};
use datafusion::arrow::compute::{concat_batches, interleave, take, take_record_batch};
use datafusion::arrow::datatypes::{Int8Type, Int64Type};

use super::keyset::key_columns;
use super::keyset::{KeySet, NONE, hashes};
use super::shares::Decisions;
use crate::cdc::kernel::{Applied, ApplyMetrics, Decided, Op, Rules, Visible, filtered, is_keyed};
use crate::cdc::slice::{Slice, buckets};
use crate::par;

/// Applies `events` (rows of [`Rules::event_schema`]) to the `stored` state (rows of
/// [`Rules::state_schema`]).
///
/// Only keys with incoming events are decided again (every key when a new TRUNCATE
/// arrived or `visible` is [`Visible::Recompute`]): their stored events are found by a
/// hash probe, merged with the incoming ones and folded. All other rows are kept by
/// bulk filters, zero-copy for batches without a touched key, so the cost follows the
/// size of the change more than the size of the table. The inputs are taken so that a
/// narrow state's apply can let each input batch go once it is filtered.
pub fn apply(
    rules: &Rules,
    stored: Vec<RecordBatch>,
    visible: Visible,
    events: &RecordBatch,
    now_micros: i64,
) -> Result<Applied, ApplyError> {
    let recompute = matches!(visible, Visible::Recompute);
    if rules.narrow_state() && recompute {
        return Err(ApplyError::Defect(
            "an SCD type 1 state keeps no values: its published rows are needed".into(),
        ));
    }
    let touch = Touch::new(rules, events, recompute, now_micros)?;
    let mut members = Vec::new();
    let mut kept = Vec::new();
    for (m, k) in par::map(stored, |batch| touch.split(&batch))? {
        members.extend(m);
        kept.extend(k);
    }
    let members = concat_batches(&rules.state_schema(), &members)?;
    let published = match visible {
        Visible::Rows(published) => published,
        Visible::Recompute => vec![],
    };
    let wanted = touch.wanted(&members)?;
    let mut keep = Vec::with_capacity(published.len());
    let mut hits = Vec::with_capacity(published.len());
    for probed in par::map(published.iter().collect(), |batch: &RecordBatch| {
        touch.probe(batch, wanted.as_ref())
    })? {
        keep.push(probed.keep);
        hits.push(probed.hits);
    }
    // The published rows of untouched keys are set apart while the kernel decides.
    let (decided, untouched) = std::thread::scope(|scope| {
        let filtering = scope.spawn(move || keep_rows(published, keep));
        let decided = touch.decide(members, hits, events.clone());
        let untouched = filtering
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (decided, untouched)
    });
    let (decided, untouched) = (decided?, untouched?);
    let mut state = kept;
    state.extend(decided.state);
    // Every key decided again (a new TRUNCATE, or a recompute): from the state alone.
    let mut public = match decided.recomputed {
        true => vec![],
        false => untouched,
    };
    public.extend(decided.public);
    Ok(Applied {
        state,
        public,
        metrics: decided.metrics,
    })
}

/// What a batch's events decide about the stored rows, row by row: whether a state row
/// is a member (decided again) or kept as it is, whether a published row is kept, and
/// for a narrow state the values of the member upserts. Batches of the stored tables
/// can be given to it in any order, on any thread, as they are read.
pub(crate) struct Touch {
    rules: Rules,
    layout: Layout,
    touched: KeySet,
    recompute: bool,
    /// Every stored key is a member: a recompute, or a new TRUNCATE.
    every_key: bool,
    /// SCD type 1 tombstones recorded before it are collected.
    horizon: i64,
    now_micros: i64,
    /// The slice of the batch's keys this apply decides, when it is one of several:
    /// the tombstones it collects are its own keys' (`cdc/slice.rs`).
    owner: Option<Slice>,
}

/// A published batch probed by [`Touch::probe`].
pub(crate) struct Probed {
    /// The rows no incoming event touches.
    pub keep: Vec<bool>,
    /// Narrow state: the rows holding member upserts' values, and each one's member.
    pub hits: Option<(RecordBatch, Vec<u32>)>,
}

/// What the kernel decided for the members: the new state rows of the touched keys
/// (in the state's columns) and their published rows.
pub(crate) struct TouchedDecided {
    pub state: Vec<RecordBatch>,
    pub public: Vec<RecordBatch>,
    pub metrics: ApplyMetrics,
    /// Every key was decided again: the published table is `public` alone.
    pub recomputed: bool,
}

impl Touch {
    pub(crate) fn new(
        rules: &Rules,
        events: &RecordBatch,
        recompute: bool,
        now_micros: i64,
    ) -> Result<Self, ApplyError> {
        let event_ops = events.column(rules.op_col()).as_primitive::<Int8Type>();
        let touched = KeySet::new(
            key_columns(events, &rules.keys),
            (0..events.num_rows()).filter(|&r| is_keyed(event_ops.value(r))),
        )?;
        // A TRUNCATE may concern every key.
        let every_key = recompute || event_ops.values().contains(&(Op::Truncate as i8));
        Ok(Self {
            rules: rules.clone(),
            layout: Layout::of(rules),
            touched,
            recompute,
            every_key,
            horizon: match rules.scd2 {
                true => i64::MIN,
                false => now_micros.saturating_sub(rules.tombstone_retention_micros),
            },
            now_micros,
            owner: None,
        })
    }

    /// Decides only `slice`'s keys: the batch's events are that slice's, and of the
    /// tombstones past their retention only its own keys' are collected, so that each
    /// tombstone is collected by one slice.
    pub(crate) fn only_slice(&mut self, slice: Slice) {
        self.owner = Some(slice);
    }

    /// Lets the touched keys go, once every stored row has been sorted into members and
    /// the rest: the kernel needs only the members and the events. No row is a member
    /// or touched afterwards.
    pub(crate) fn forget_touched(&mut self) {
        self.touched = KeySet::default();
    }

    /// Where a stored state row keeps its operation and its recording time.
    pub(crate) fn op(&self) -> usize {
        self.layout.op
    }

    pub(crate) fn recorded(&self) -> usize {
        self.layout.recorded
    }

    /// SCD type 1 tombstones recorded before this time are collected (members).
    pub(crate) fn horizon(&self) -> i64 {
        self.horizon
    }

    /// Every stored row is a member: nothing is kept as it is.
    pub(crate) fn every_key(&self) -> bool {
        self.every_key
    }

    /// A stored batch as its members (rows of touched keys, of every key when
    /// `every_key`, markers, and SCD type 1 tombstones past their retention, to be
    /// collected) and the rows it keeps.
    pub(crate) fn split(
        &self,
        batch: &RecordBatch,
    ) -> Result<(Option<RecordBatch>, Option<RecordBatch>), ApplyError> {
        let member = self.members(batch)?;
        let keep: Vec<bool> = member.iter().map(|m| !m).collect();
        Ok((filtered(batch, &member)?, filtered(batch, &keep)?))
    }

    /// Per row of a stored batch, whether it is a member (see [`Touch::split`]).
    pub(crate) fn members(&self, batch: &RecordBatch) -> Result<Vec<bool>, ApplyError> {
        let layout = &self.layout;
        let keys = key_columns(batch, &layout.keys);
        let found = self.touched.find(&keys, &hashes(&keys)?)?;
        let ops = batch.column(layout.op).as_primitive::<Int8Type>();
        let recorded = batch.column(layout.recorded).as_primitive::<Int64Type>();
        let mut collected = Vec::new();
        let mut member: Vec<bool> = (0..batch.num_rows())
            .map(|r| {
                let op = ops.value(r);
                if !is_keyed(op) || self.every_key || found[r] != NONE {
                    return true;
                }
                let expired = op == Op::Delete as i8 && recorded.value(r) < self.horizon;
                // Kept only for a slice, which collects its own keys' alone.
                if expired && self.owner.is_some() {
                    collected.push(r);
                }
                expired
            })
            .collect();
        if let Some(slice) = self.owner
            && !collected.is_empty()
        {
            let rows = UInt64Array::from_iter_values(collected.iter().map(|&r| r as u64));
            let keys = keys
                .iter()
                .map(|k| take(k, &rows, None))
                .collect::<Result<Vec<_>, _>>()?;
            for (&r, bucket) in collected.iter().zip(buckets(&keys)?) {
                member[r] = slice.owns(bucket);
            }
        }
        Ok(member)
    }

    /// Per row of published `keys` (the key columns, in KEYS order), whether an
    /// incoming event touches it.
    pub(crate) fn touches(&self, keys: &[ArrayRef]) -> Result<Vec<bool>, ApplyError> {
        Ok(self
            .touched
            .find(keys, &hashes(keys)?)?
            .iter()
            .map(|&t| t != NONE)
            .collect())
    }

    /// A narrow state's member upserts that an incoming upsert ties (same key and
    /// sequence): the kernel ranks them by their values, so those must be fetched from
    /// the published rows. `None` for a state that keeps values.
    pub(crate) fn tied(
        &self,
        members: &RecordBatch,
        events: &RecordBatch,
    ) -> Result<Option<KeySet>, ApplyError> {
        if !self.rules.narrow_state() {
            return Ok(None);
        }
        let rules = &self.rules;
        let mut event_columns = key_columns(events, &rules.keys);
        event_columns.push(Arc::clone(events.column(rules.seq_col())));
        let event_ops = events.column(rules.op_col()).as_primitive::<Int8Type>();
        let upserts = KeySet::new(
            event_columns,
            (0..events.num_rows()).filter(|&r| event_ops.value(r) == Op::Upsert as i8),
        )?;
        let mut member_columns = key_columns(members, &self.layout.keys);
        member_columns.push(Arc::clone(members.column(self.layout.seq)));
        let ops = members.column(self.layout.op).as_primitive::<Int8Type>();
        let found = upserts.find(&member_columns, &hashes(&member_columns)?)?;
        KeySet::new(
            key_columns(members, &self.layout.keys),
            (0..members.num_rows())
                .filter(|&r| ops.value(r) == Op::Upsert as i8 && found[r] != NONE),
        )
        .map(Some)
    }

    /// A narrow state's member upserts, whose values the published rows hold.
    pub(crate) fn wanted(&self, members: &RecordBatch) -> Result<Option<KeySet>, ApplyError> {
        if !self.rules.narrow_state() {
            return Ok(None);
        }
        let ops = members.column(self.layout.op).as_primitive::<Int8Type>();
        KeySet::new(
            key_columns(members, &self.layout.keys),
            (0..members.num_rows()).filter(|&r| ops.value(r) == Op::Upsert as i8),
        )
        .map(Some)
    }

    /// A published batch: the rows whose key no incoming event touches, and those
    /// holding the values of the `wanted` member upserts.
    pub(crate) fn probe(
        &self,
        batch: &RecordBatch,
        wanted: Option<&KeySet>,
    ) -> Result<Probed, ApplyError> {
        let keys = key_columns(batch, &self.rules.keys);
        let hashes = hashes(&keys)?;
        let keep: Vec<bool> = self
            .touched
            .find(&keys, &hashes)?
            .iter()
            .map(|&t| t == NONE)
            .collect();
        let Some(wanted) = wanted else {
            return Ok(Probed { keep, hits: None });
        };
        // Upsert members are of touched keys, unless every row is one.
        let candidates = (0..batch.num_rows()).filter(|&r| self.every_key || !keep[r]);
        let found = wanted.find_rows(&keys, &hashes, candidates)?;
        let rows = found
            .iter()
            .map(|&(r, _)| u32::try_from(r).map_err(|_| ApplyError::too_many("rows")))
            .collect::<Result<UInt32Array, _>>()?;
        let values = take_record_batch(batch, &rows)?;
        let members = found.into_iter().map(|(_, m)| m).collect();
        Ok(Probed {
            keep,
            hits: Some((values, members)),
        })
    }

    /// The kernel's decision on the `members` (all of them, in the state's columns)
    /// and the batch's `events`, given the `hits` of every published batch probed.
    /// Both are taken, to be let go once the kernel has them in shares.
    pub(crate) fn decide(
        &self,
        members: RecordBatch,
        hits: Vec<Option<(RecordBatch, Vec<u32>)>>,
        events: RecordBatch,
    ) -> Result<TouchedDecided, ApplyError> {
        let (decided, stayed) = self.decide_keeping(members, hits, events)?;
        match stayed.map_or(0, |s| s.len()) {
            0 => Ok(decided),
            n => Err(lost_values(n)),
        }
    }

    /// [`Touch::decide`] where a narrow state's member upserts may come without their
    /// values: those that stay their key's winner keep their published row, which the
    /// caller leaves as it is. Their keys come back (their rows in `public` have no
    /// values and are to be dropped).
    pub(crate) fn decide_keeping(
        &self,
        members: RecordBatch,
        hits: Vec<Option<(RecordBatch, Vec<u32>)>>,
        events: RecordBatch,
    ) -> Result<(TouchedDecided, Option<KeySet>), ApplyError> {
        let pending = self.decide_pending(members, hits, events)?;
        let Decided {
            applied:
                Applied {
                    state,
                    public,
                    metrics,
                },
            recomputed,
        } = pending.decisions.into_decided()?;
        let stayed = match &pending.values {
            Some(values) => Some(values.stayed(&self.layout, &state)?),
            None => None,
        };
        let decided = TouchedDecided {
            state,
            public,
            metrics,
            recomputed,
        };
        Ok((decided, stayed))
    }

    /// [`Touch::decide_keeping`], its rows not yet built: the caller builds and writes
    /// them a part at a time, and asks [`Pending::stayed`] once it has the state's rows.
    pub(crate) fn decide_pending(
        &self,
        members: RecordBatch,
        hits: Vec<Option<(RecordBatch, Vec<u32>)>>,
        events: RecordBatch,
    ) -> Result<Pending, ApplyError> {
        let rules = &self.rules;
        let values = rules
            .narrow_state()
            .then(|| Values::of(members.clone(), hits))
            .transpose()?;
        let members = match &values {
            Some(v) => widen(rules, &v.members, &v.values, &v.at)?,
            None => members,
        };
        let decisions = super::shares::decide(
            rules,
            members,
            self.recompute,
            self.every_key,
            events,
            self.now_micros,
        )?;
        Ok(Pending { decisions, values })
    }
}

/// A decision on the touched keys whose rows are not built yet.
pub(crate) struct Pending {
    pub decisions: Decisions,
    /// A narrow state's member upserts and their published values, if found.
    values: Option<Values>,
}

impl Pending {
    /// Whether the state is narrow: its member upserts may come without their values,
    /// and those that stay their key's winner keep their published rows
    /// ([`Pending::stayed`]).
    pub(crate) fn narrow(&self) -> bool {
        self.values.is_some()
    }

    /// The keys of the stored upserts without values that stayed their key's winner,
    /// given all the rows of the new (narrow) `state`; `None` for a wide state.
    pub(crate) fn stayed(
        &self,
        touch: &Touch,
        state: &[RecordBatch],
    ) -> Result<Option<KeySet>, ApplyError> {
        self.values
            .as_ref()
            .map(|values| values.stayed(&touch.layout, state))
            .transpose()
    }
}

fn lost_values(n: usize) -> ApplyError {
    ApplyError::LostValues { keys: n }
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
) -> Result<Vec<RecordBatch>, ApplyError> {
    let parts = par::map(
        published.into_iter().zip(keep).collect(),
        |(batch, keep)| filtered(&batch, &keep),
    )?;
    Ok(parts.into_iter().flatten().collect())
}

/// The published rows of a narrow state's member upserts.
struct Values {
    /// The stored rows decided again.
    members: RecordBatch,
    /// The published rows of member upserts, a batch per published batch with any.
    values: Vec<RecordBatch>,
    /// Per member row: (batch, row) of `values` holding its key's published row
    /// (`u32`s: there is one per member).
    at: Vec<Option<(u32, u32)>>,
}

impl Values {
    /// The values of the narrow `members`' upserts: the first published row found for
    /// each, of the `hits` of every published batch.
    fn of(
        members: RecordBatch,
        hits: Vec<Option<(RecordBatch, Vec<u32>)>>,
    ) -> Result<Self, ApplyError> {
        let mut found = Self {
            at: vec![None; members.num_rows()],
            members,
            values: Vec::new(),
        };
        for (batch, hit_members) in hits.into_iter().flatten() {
            if hit_members.is_empty() {
                continue;
            }
            let b =
                u32::try_from(found.values.len()).map_err(|_| ApplyError::too_many("batches"))?;
            for (r, m) in (0u32..).zip(hit_members) {
                found.at[m as usize].get_or_insert((b, r));
            }
            found.values.push(batch);
        }
        Ok(found)
    }
}

impl Values {
    /// The keys of the stored upserts without values that stayed their key's winner
    /// in `decided_state` (rows of the narrow state): their published rows are theirs,
    /// unchanged.
    fn stayed(&self, layout: &Layout, decided_state: &[RecordBatch]) -> Result<KeySet, ApplyError> {
        let keys = key_columns(&self.members, &layout.keys);
        let ops = self.members.column(layout.op).as_primitive::<Int8Type>();
        let missing: Vec<usize> = (0..self.members.num_rows())
            .filter(|&r| ops.value(r) == Op::Upsert as i8 && self.at[r].is_none())
            .collect();
        if missing.is_empty() {
            return KeySet::new(keys, []);
        }
        // A member without values is its key and sequence among the upserts kept.
        let mut missing_columns = keys.clone();
        missing_columns.push(Arc::clone(self.members.column(layout.seq)));
        let missing = KeySet::new(missing_columns, missing)?;
        let mut columns = layout.keys.clone();
        columns.push(layout.seq);
        let mut stayed = Vec::new();
        for batch in decided_state {
            let kept = key_columns(batch, &columns);
            let ops = batch.column(layout.op).as_primitive::<Int8Type>();
            stayed.extend(
                missing
                    .find(&kept, &hashes(&kept)?)?
                    .iter()
                    .enumerate()
                    .filter(|&(r, &m)| m != NONE && ops.value(r) == Op::Upsert as i8)
                    .map(|(_, &m)| m as usize),
            );
        }
        KeySet::new(keys, stayed)
    }
}

/// The members as events with values: keys, sequence and operation from the state, the
/// other columns from the published rows at `at` in `values` (null where there is none:
/// deletes and markers).
fn widen(
    rules: &Rules,
    members: &RecordBatch,
    values: &[RecordBatch],
    at: &[Option<(u32, u32)>],
) -> Result<RecordBatch, ApplyError> {
    let schema = rules.event_schema();
    let narrow = rules.narrow_columns();
    let none = values.len();
    let indices: Vec<(usize, usize)> = at
        .iter()
        .map(|a| a.map_or((none, 0), |(b, r)| (b as usize, r as usize)))
        .collect();
    // A column per core at a time: the gathers are independent.
    let columns = par::map(
        schema.fields().iter().enumerate().collect(),
        |(c, field)| {
            if let Some(n) = narrow.iter().position(|&w| w == c) {
                return Ok(Arc::clone(members.column(n)));
            }
            let null = new_null_array(field.data_type(), 1);
            let mut sources: Vec<&dyn Array> =
                values.iter().map(|b| b.column(c).as_ref()).collect();
            sources.push(null.as_ref());
            interleave(&sources, &indices)
        },
    )?;
    Ok(RecordBatch::try_new(schema, columns)?)
}
