//! The AUTO CDC apply kernel: stored state plus a batch of change events gives the new
//! state and the visible table. Pure and synchronous: no I/O, so it is tested directly
//! against a reference model (tests/it/model.rs), and the runtime only feeds it and
//! stores what it returns.
//!
//! The state is a set of events (see [`Rules::event_schema`]); the visible table is a
//! function of that set alone, which is what makes the result independent of arrival
//! order, batch boundaries and duplicate delivery. Which events the state keeps:
//! - SCD type 1: the winning event of each key (a tombstone when it is a delete), or,
//!   with IGNORE NULL UPDATES, the key's last delete and every upsert after it (a late
//!   upsert can still fill columns a newer upsert left null);
//! - SCD type 2: one event per key and sequence value (late events split history and
//!   TRACK HISTORY runs can be re-split, so nothing can be forgotten);
//! - marker rows without a key: the newest TRUNCATE, and the horizon of collected
//!   tombstones.

use std::ops::Range;
use std::sync::Arc;

use super::apply_error::ApplyError;
use datafusion::arrow::array::{
    ArrayRef, AsArray, DynComparator, Int8Array, Int64Array, RecordBatch, make_comparator,
};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{Field, Int8Type, Int64Type};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::HashMap;

mod admission;
#[cfg(test)]
mod fixture;
mod history;
mod ignore_null;
mod ordering;
mod publish;

use super::decision::{Cells, FieldCells, NONE, Output, P, fits_positions, small};
pub(crate) use super::decision::{Decision, filtered};
pub(crate) use super::rules::is_keyed;
pub use super::rules::{
    ApplyMetrics, GeneratedColumn, OP, Op, RECORDED_AT, Rules, SEQ, SHARED_ROWS,
};
use admission::Markers;

/// The result of [`apply`]: the new state and visible table, in batches.
#[derive(Debug, Clone)]
pub struct Applied {
    pub state: Vec<RecordBatch>,
    pub public: Vec<RecordBatch>,
    pub metrics: ApplyMetrics,
}

impl Applied {
    /// Rows of the visible table.
    pub fn public_rows(&self) -> usize {
        self.public.iter().map(RecordBatch::num_rows).sum()
    }
}

/// The visible table as it stands, when the caller has it.
#[derive(Debug, Clone)]
pub enum Visible {
    /// The published rows, consistent with the stored state (or, after a crash between
    /// the two commits of a batch, one batch ahead of it): rows of keys without incoming
    /// events are kept from here.
    Rows(Vec<RecordBatch>),
    /// Not at hand, or not trusted: every key is derived from the state again. A
    /// [narrow state](Rules::narrow_state) cannot do this.
    Recompute,
}

/// A batch's decision built into rows, and whether it decided every key again.
pub(crate) struct Decided {
    pub applied: Applied,
    pub recomputed: bool,
}

/// The kernel proper, on a state that keeps every event's values: the decision on the
/// new state rows of `stored` and the visible rows of the keys with incoming events (of
/// every key when `recompute` or a new TRUNCATE arrived). The inputs are taken: the
/// decision holds them, to build its rows from (`decision.rs`).
pub(crate) fn decide_events(
    rules: &Rules,
    stored: Vec<RecordBatch>,
    recompute: bool,
    events: RecordBatch,
    now_micros: i64,
) -> Result<Decision, ApplyError> {
    let mut inputs: Vec<RecordBatch> = stored.into_iter().filter(|b| b.num_rows() > 0).collect();
    inputs.push(events);
    fits_positions(&inputs)?;
    let event_chunk = small(inputs.len() - 1);
    let metrics = ApplyMetrics {
        events: inputs.last().map_or(0, |e| e.num_rows() as u64),
        ..ApplyMetrics::default()
    };
    // The view's comparable keys and sequence values, as large as the inputs' own
    // columns of them, go with it once the walk is done: the rows are gathered from
    // the inputs alone.
    let (probe, walked, recompute) = {
        let chunks: Vec<&RecordBatch> = inputs.iter().collect();
        let view = View::new(rules, &chunks, event_chunk)?;
        let markers = view.markers();
        // A TRUNCATE newer than the stored one concerns every key.
        let recompute = recompute || markers.truncate.is_some_and(|t| view.is_new(t));
        let mut walk = Walk {
            view: &view,
            markers,
            horizon: now_micros.saturating_sub(rules.tombstone_retention_micros),
            metrics,
            kept: Vec::new(),
            out: Output::new(rules.scd2),
            new_gc: None,
        };
        let probe = walk.run(recompute);
        let Walk {
            kept,
            out,
            new_gc,
            markers,
            mut metrics,
            ..
        } = walk;
        metrics.late = metrics.late_applied + metrics.late_dropped;
        (
            probe,
            (kept, out, new_gc.or(markers.gc), markers.truncate, metrics),
            recompute,
        )
    };
    let (kept, out, gc, truncate, metrics) = walked;
    Ok(Decision {
        rules: rules.clone(),
        inputs,
        keep: probe.keep,
        kept,
        gc,
        truncate,
        out,
        metrics,
        recomputed: recompute,
    })
}

/// One input batch with a comparator per column.
struct Chunk<'a> {
    batch: &'a RecordBatch,
    ops: &'a Int8Array,
    recorded: &'a Int64Array,
    cells: Vec<DynComparator>,
}

/// One input batch's keys and sequence values as comparable bytes: what orders events.
struct Order {
    keys: Encoded,
    seq: Encoded,
}

/// Rows of comparable bytes ([`Rows`]), kept flat when every row has the same width, as
/// the encodings of fixed-width types do (an integer key or sequence: nine bytes): the
/// eight-byte offset per row [`Rows`] keeps would nearly double them.
enum Encoded {
    Flat { data: Vec<u8>, width: usize },
    Rows(Rows),
}

impl Encoded {
    fn of(rows: Rows) -> Self {
        let Some(width) = rows.iter().next().map(|r| r.data().len()) else {
            return Self::Rows(rows);
        };
        if !rows.iter().all(|r| r.data().len() == width) {
            return Self::Rows(rows);
        }
        let mut data = Vec::with_capacity(width * rows.num_rows());
        for row in rows.iter() {
            data.extend_from_slice(row.data());
        }
        Self::Flat { data, width }
    }

    /// Row `i`'s bytes; rows compare as their bytes do.
    fn row(&self, i: usize) -> &[u8] {
        match self {
            Self::Flat { data, width } => &data[i * width..(i + 1) * width],
            Self::Rows(rows) => rows.row(i).data(),
        }
    }
}

/// The inputs of an apply, addressed by [`P`].
struct View<'a> {
    rules: &'a Rules,
    chunks: Vec<Chunk<'a>>,
    /// Per chunk.
    order: Vec<Order>,
    event_chunk: u32,
}

fn converter(fields: &[&Field]) -> Result<RowConverter, ApplyError> {
    Ok(RowConverter::new(
        fields
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?)
}

impl<'a> View<'a> {
    fn new(
        rules: &'a Rules,
        inputs: &[&'a RecordBatch],
        event_chunk: u32,
    ) -> Result<Self, ApplyError> {
        let schema = rules.event_schema();
        let key_fields: Vec<&Field> = rules.keys.iter().map(|&k| schema.field(k)).collect();
        // One converter each, so rows of different chunks compare.
        let key_conv = converter(&key_fields)?;
        let seq_conv = converter(&[schema.field(rules.seq_col())])?;
        let n = rules.columns.fields().len();
        let mut chunks = Vec::with_capacity(inputs.len());
        let mut order = Vec::with_capacity(inputs.len());
        for batch in inputs {
            let key_cols: Vec<ArrayRef> = rules
                .keys
                .iter()
                .map(|&k| Arc::clone(batch.column(k)))
                .collect();
            let cells = batch.columns()[..n]
                .iter()
                .map(|c| make_comparator(c.as_ref(), c.as_ref(), SortOptions::default()))
                .collect::<Result<Vec<_>, _>>()?;
            chunks.push(Chunk {
                batch,
                ops: batch
                    .column(rules.op_col())
                    .as_primitive_opt::<Int8Type>()
                    .ok_or_else(|| ApplyError::Defect(format!("{OP} is not Int8")))?,
                recorded: batch
                    .column(rules.recorded_col())
                    .as_primitive_opt::<Int64Type>()
                    .ok_or_else(|| ApplyError::Defect(format!("{RECORDED_AT} is not Int64")))?,
                cells,
            });
            let seq = Arc::clone(batch.column(rules.seq_col()));
            order.push(Order {
                keys: Encoded::of(key_conv.convert_columns(&key_cols)?),
                seq: Encoded::of(seq_conv.convert_columns(&[seq])?),
            });
        }
        Ok(Self {
            rules,
            chunks,
            order,
            event_chunk,
        })
    }

    fn chunk(&self, p: P) -> &Chunk<'a> {
        &self.chunks[p.c as usize]
    }

    fn op(&self, p: P) -> Option<Op> {
        Op::of(self.chunk(p).ops.value(p.r as usize))
    }

    fn is_new(&self, p: P) -> bool {
        p.c == self.event_chunk
    }

    fn key(&self, p: P) -> &[u8] {
        self.order[p.c as usize].keys.row(p.r as usize)
    }

    /// The keyed rows of the chunks in `range`, in chunk order.
    fn keyed(&self, chunks: Range<usize>) -> Vec<P> {
        let mut out = Vec::new();
        for c in chunks {
            for (r, &op) in self.chunks[c].ops.values().iter().enumerate() {
                if Op::of(op).is_some_and(Op::is_keyed) {
                    out.push(P::at(c, r));
                }
            }
        }
        out
    }
}

/// The key-by-key walk over stored and incoming events.
struct Walk<'v, 'a> {
    view: &'v View<'a>,
    markers: Markers,
    horizon: i64,
    metrics: ApplyMetrics,
    /// State rows of the touched keys, key by key in sequence order.
    kept: Vec<P>,
    out: Output,
    /// The collected tombstone that moves the GC horizon, if one does.
    new_gc: Option<P>,
}

/// What the stored scan found: per stored batch, which rows stay as they are.
struct Probe {
    keep: Vec<Vec<bool>>,
}

impl<'v, 'a> Walk<'v, 'a> {
    fn run(&mut self, recompute: bool) -> Probe {
        let view: &'v View<'a> = self.view;
        let events = view.event_chunk as usize;
        let mut touched: HashMap<&'v [u8], u32> =
            HashMap::with_capacity(view.chunks[events].batch.num_rows());
        // One group per touched key, in order of first arrival: its incoming events
        // (`incoming[groups[g]]`, in rank order), then its stored ones. The arrivals
        // are let go once grouped.
        let (mut incoming, mut groups) = {
            let arrivals = view.keyed(events..events + 1);
            let group_of: Vec<u32> = arrivals
                .iter()
                .map(|&p| {
                    let next = small(touched.len());
                    *touched.entry(view.key(p)).or_insert(next)
                })
                .collect();
            bucket(&arrivals, &group_of, touched.len())
        };
        for range in &groups {
            incoming[rows(range)].sort_unstable_by(|&p, &q| view.event_order(p, q));
        }
        // Sized up front, as these lists are the walk's largest: grown by doubling they
        // would hold up to twice their rows, and both copies while they move.
        let stored_rows = view.chunks[..events].iter().map(|c| c.batch.num_rows());
        let mut members: Vec<(u32, P)> = Vec::with_capacity(stored_rows.sum());
        self.kept.reserve(groups.len());
        self.out.reserve(groups.len());
        let mut keep = Vec::with_capacity(view.event_chunk as usize);
        for c in 0..view.event_chunk {
            let chunk = &view.chunks[c as usize];
            let mut mask = vec![false; chunk.batch.num_rows()];
            for (r, slot) in mask.iter_mut().enumerate() {
                let p = P { c, r: small(r) };
                let Some(op) = view.op(p).filter(|o| o.is_keyed()) else {
                    continue; // markers are written anew
                };
                let key = view.key(p);
                let gid = match touched.get(key) {
                    Some(&g) => Some(g),
                    None if recompute => {
                        let g = small(groups.len());
                        touched.insert(key, g);
                        let end = small(incoming.len());
                        groups.push(end..end);
                        Some(g)
                    }
                    None => None,
                };
                match gid {
                    Some(g) => members.push((g, p)),
                    None if !view.rules.scd2
                        && op == Op::Delete
                        && view.expired(p, self.horizon) =>
                    {
                        // A tombstone alone is its key's whole state (SCD1).
                        self.collect(p);
                    }
                    None => *slot = true,
                }
            }
            keep.push(mask);
        }
        members.sort_unstable();
        // Buffers reused from key to key: most keys have one or two events.
        let mut scratch = Scratch::default();
        let mut m = 0;
        for (g, range) in groups.iter().enumerate() {
            let from = m;
            while m < members.len() && members[m].0 == small(g) {
                m += 1;
            }
            let stored = &mut scratch.stored;
            stored.clear();
            stored.extend(members[from..m].iter().map(|&(_, p)| p));
            if !stored.windows(2).all(|w| view.rank(w[0], w[1]).is_le()) {
                stored.sort_by(|&p, &q| view.rank(p, q).then_with(|| p.cmp(&q)));
            }
            merge_sorted(view, stored, &incoming[rows(range)], &mut scratch.merged);
            self.distinct(&scratch.merged, &mut scratch.distinct);
            self.admit(&scratch.distinct, &mut scratch.admitted);
            self.decide(&scratch.admitted);
        }
        Probe { keep }
    }
}

/// `items` grouped by `group_of` (a counting sort, stable): the items, and the range of
/// each of the `groups` groups in them (`u32`, as [`P`]'s rows: there is one a key).
fn bucket(items: &[P], group_of: &[u32], groups: usize) -> (Vec<P>, Vec<Range<u32>>) {
    let mut starts = vec![0u32; groups + 1];
    for &g in group_of {
        starts[g as usize + 1] += 1;
    }
    for g in 0..groups {
        starts[g + 1] += starts[g];
    }
    let ranges = (0..groups).map(|g| starts[g]..starts[g + 1]).collect();
    let mut out = vec![NONE; items.len()];
    for (&p, &g) in items.iter().zip(group_of) {
        out[starts[g as usize] as usize] = p;
        starts[g as usize] += 1;
    }
    (out, ranges)
}

/// A group's range of rows, to index with.
fn rows(range: &Range<u32>) -> Range<usize> {
    range.start as usize..range.end as usize
}

/// Event lists reused from key to key by [`Walk::run`].
#[derive(Default)]
struct Scratch {
    stored: Vec<P>,
    merged: Vec<P>,
    distinct: Vec<P>,
    admitted: Vec<P>,
}

/// Two sorted event lists of one key as one, in rank order (stored first on ties), into
/// `out`.
fn merge_sorted(view: &View, stored: &[P], incoming: &[P], out: &mut Vec<P>) {
    out.clear();
    let (mut i, mut j) = (0, 0);
    while i < stored.len() && j < incoming.len() {
        // Of equal events the stored one goes last, as in `event_order`.
        if view.rank(incoming[j], stored[i]).is_le() {
            out.push(incoming[j]);
            j += 1;
        } else {
            out.push(stored[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&stored[i..]);
    out.extend_from_slice(&incoming[j..]);
}
