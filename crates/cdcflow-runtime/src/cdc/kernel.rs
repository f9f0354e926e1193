//! The AUTO CDC apply kernel: stored state plus a batch of change events gives the new
//! state and the visible table. Pure and synchronous: no I/O, so it is tested directly
//! against a reference model (tests/it/model.rs), and the runtime only feeds it and
//! stores what it returns.
//!
//! The state is a set of events (see [`Rules::state_schema`]); the visible table is a
//! function of that set alone, which is what makes the result independent of arrival
//! order, batch boundaries and duplicate delivery. Which events the state keeps:
//! - SCD type 1: the winning event of each key (a tombstone when it is a delete), or,
//!   with IGNORE NULL UPDATES, the key's last delete and every upsert after it (a late
//!   upsert can still fill columns a newer upsert left null);
//! - SCD type 2: one event per key and sequence value (late events split history and
//!   TRACK HISTORY runs can be re-split, so nothing can be forgotten);
//! - marker rows without a key: the newest TRUNCATE, and the horizon of collected
//!   tombstones.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, DynComparator, Int8Array, Int64Array, RecordBatch, UInt32Array,
    make_comparator,
};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::compute::{concat_batches, take};
use datafusion::arrow::datatypes::{DataType, Field, Int8Type, Int64Type, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use serde::Serialize;

use cdcflow_plan::autocdc::{END_AT, START_AT};

/// The sequence value of an event (the SEQUENCE BY value, a struct for several fields).
pub const SEQ: &str = "__cdcflow_seq";
/// What an event does, an [`Op`].
pub const OP: &str = "__cdcflow_op";
/// When the event entered the state (µs since the epoch): tombstones expire from it.
pub const RECORDED_AT: &str = "__cdcflow_recorded_at";

/// The operation of an event, as stored in the [`OP`] column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum Op {
    Upsert = 0,
    Delete = 1,
    /// Removes every key whose state is older; has no key.
    Truncate = 2,
    /// Marker: the newest sequence value of a tombstone collected by GC; has no key.
    GcHorizon = 3,
}

impl Op {
    fn of(v: i8) -> Option<Self> {
        match v {
            0 => Some(Self::Upsert),
            1 => Some(Self::Delete),
            2 => Some(Self::Truncate),
            3 => Some(Self::GcHorizon),
            _ => None,
        }
    }

    fn is_keyed(self) -> bool {
        matches!(self, Self::Upsert | Self::Delete)
    }
}

/// How a target applies changes.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The target's own columns (keys included, `__START_AT`/`__END_AT` excluded).
    pub columns: SchemaRef,
    /// Indexes into `columns`.
    pub keys: Vec<usize>,
    pub scd2: bool,
    /// SCD type 2: the columns whose change opens a new version.
    pub tracked: Vec<usize>,
    /// Columns whose null in an upsert keeps the stored value.
    pub ignore_null: Vec<usize>,
    pub sequence_type: DataType,
    /// How long a tombstone is kept (SCD type 1).
    pub tombstone_retention_micros: i64,
}

impl Rules {
    /// The state table: the target's columns (all nullable: tombstones and markers carry
    /// no values), then the sequence, the operation and the recording time.
    pub fn state_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .columns
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new(SEQ, self.sequence_type.clone(), true));
        fields.push(Field::new(OP, DataType::Int8, false));
        fields.push(Field::new(RECORDED_AT, DataType::Int64, false));
        Arc::new(Schema::new(fields))
    }

    /// The visible table.
    pub fn public_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .columns
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        if self.scd2 {
            fields.push(Field::new(START_AT, self.sequence_type.clone(), true));
            fields.push(Field::new(END_AT, self.sequence_type.clone(), true));
        }
        Arc::new(Schema::new(fields))
    }

    fn seq_col(&self) -> usize {
        self.columns.fields().len()
    }

    fn op_col(&self) -> usize {
        self.seq_col() + 1
    }

    fn recorded_col(&self) -> usize {
        self.seq_col() + 2
    }
}

/// What one apply did, counted over the incoming events.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ApplyMetrics {
    /// Incoming events (keyed and truncates).
    pub events: u64,
    /// Keys whose newest event is now an incoming upsert.
    pub upserted: u64,
    /// Keys whose newest event is now an incoming delete.
    pub deleted: u64,
    /// Incoming events older than the stored state of their key (SCD1: dropped;
    /// SCD2: inserted into history).
    pub late: u64,
    /// Incoming events identical to one already applied or in the same batch.
    pub duplicates: u64,
    /// Incoming upserts older than a collected tombstone, for keys with no state:
    /// dropped and reported, since they may be resurrecting a deleted row.
    pub late_after_gc: u64,
    /// Visible rows removed by a TRUNCATE.
    pub truncated: u64,
    /// Tombstones collected after their retention.
    pub tombstones_collected: u64,
}

/// The result of [`apply`].
#[derive(Debug, Clone)]
pub struct Applied {
    pub state: RecordBatch,
    pub public: RecordBatch,
    pub metrics: ApplyMetrics,
}

/// Applies `events` (rows of [`Rules::state_schema`]) to `state`.
pub fn apply(
    rules: &Rules,
    state: &RecordBatch,
    events: &RecordBatch,
    now_micros: i64,
) -> Result<Applied, ArrowError> {
    let schema = rules.state_schema();
    let all = concat_batches(&schema, [state, events])?;
    let view = View::new(rules, &all, state.num_rows())?;
    let mut metrics = ApplyMetrics {
        events: (state.num_rows()..all.num_rows()).len() as u64,
        ..ApplyMetrics::default()
    };
    let markers = view.markers();
    let horizon = now_micros.saturating_sub(rules.tombstone_retention_micros);
    let plain_scd1 = !rules.scd2 && rules.ignore_null.is_empty();
    let (kept, public, new_gc) = if plain_scd1 {
        view.scd1_winners(&markers, horizon, &mut metrics)?
    } else {
        view.by_history(&markers, horizon, &mut metrics)?
    };
    let state = view.take_state(&kept, new_gc.or(markers.gc), markers.truncate)?;
    Ok(Applied {
        state,
        public,
        metrics,
    })
}

/// The stored and incoming events side by side, with their keys and sequence values
/// encoded as comparable bytes, and a comparator per column for ties (rare, so rows are
/// compared cell by cell rather than encoded whole).
struct View<'a> {
    rules: &'a Rules,
    all: &'a RecordBatch,
    stored: usize,
    ops: &'a Int8Array,
    recorded: &'a Int64Array,
    keys: Rows,
    seq: Rows,
    cells: Vec<DynComparator>,
}

/// The newest TRUNCATE and collected-tombstone horizon, as row indexes.
struct Markers {
    truncate: Option<usize>,
    gc: Option<usize>,
}

/// What a path returns: the state rows kept, the visible table, and the collected
/// tombstone that moved the GC horizon, if one did.
type PathResult = (Vec<usize>, RecordBatch, Option<usize>);

fn converter(fields: &[&Field]) -> Result<RowConverter, ArrowError> {
    RowConverter::new(
        fields
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )
}

impl<'a> View<'a> {
    fn new(rules: &'a Rules, all: &'a RecordBatch, stored: usize) -> Result<Self, ArrowError> {
        let schema = all.schema_ref();
        let key_fields: Vec<&Field> = rules.keys.iter().map(|&k| schema.field(k)).collect();
        let key_cols: Vec<ArrayRef> = rules
            .keys
            .iter()
            .map(|&k| Arc::clone(all.column(k)))
            .collect();
        let keys = converter(&key_fields)?.convert_columns(&key_cols)?;
        let seq_field = schema.field(rules.seq_col());
        let seq =
            converter(&[seq_field])?.convert_columns(&[Arc::clone(all.column(rules.seq_col()))])?;
        let n = rules.columns.fields().len();
        let cells = all.columns()[..n]
            .iter()
            .map(|c| make_comparator(c.as_ref(), c.as_ref(), SortOptions::default()))
            .collect::<Result<Vec<_>, _>>()?;
        let ops = all
            .column(rules.op_col())
            .as_primitive_opt::<Int8Type>()
            .ok_or_else(|| ArrowError::SchemaError(format!("{OP} is not Int8")))?;
        let recorded = all
            .column(rules.recorded_col())
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| ArrowError::SchemaError(format!("{RECORDED_AT} is not Int64")))?;
        Ok(Self {
            rules,
            all,
            stored,
            ops,
            recorded,
            keys,
            seq,
            cells,
        })
    }

    fn len(&self) -> usize {
        self.all.num_rows()
    }

    fn op(&self, i: usize) -> Option<Op> {
        Op::of(self.ops.value(i))
    }

    fn is_new(&self, i: usize) -> bool {
        i >= self.stored
    }

    fn key(&self, i: usize) -> &[u8] {
        self.keys.row(i).data()
    }

    fn seq_cmp(&self, i: usize, j: usize) -> Ordering {
        self.seq.row(i).cmp(&self.seq.row(j))
    }

    /// The order of two events of one key: sequence, then an upsert beats a delete, then
    /// the greater row (docs/semantics.md rule 4). Equal means the same event.
    fn rank(&self, i: usize, j: usize) -> Ordering {
        let upsert = |x: usize| self.op(x) == Some(Op::Upsert);
        self.seq_cmp(i, j)
            .then_with(|| upsert(i).cmp(&upsert(j)))
            .then_with(|| self.row_cmp(i, j))
    }

    /// Two rows compared column by column, nulls first.
    fn row_cmp(&self, i: usize, j: usize) -> Ordering {
        self.cells
            .iter()
            .map(|cmp| cmp(i, j))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    fn markers(&self) -> Markers {
        let mut truncate: Option<usize> = None;
        let mut gc: Option<usize> = None;
        for i in 0..self.len() {
            let slot = match self.op(i) {
                Some(Op::Truncate) => &mut truncate,
                Some(Op::GcHorizon) => &mut gc,
                _ => continue,
            };
            if slot.is_none_or(|m| self.seq_cmp(i, m) == Ordering::Greater) {
                *slot = Some(i);
            }
        }
        Markers { truncate, gc }
    }

    fn older_than(&self, i: usize, marker: Option<usize>) -> bool {
        marker.is_some_and(|m| self.seq_cmp(i, m) == Ordering::Less)
    }

    fn expired(&self, i: usize, horizon: i64) -> bool {
        self.op(i) == Some(Op::Delete) && self.recorded.value(i) < horizon
    }

    /// Records a tombstone collected by GC; `new_gc` keeps the newest when it moves
    /// the horizon.
    fn collect(
        &self,
        markers: &Markers,
        new_gc: &mut Option<usize>,
        i: usize,
        metrics: &mut ApplyMetrics,
    ) {
        metrics.tombstones_collected += 1;
        let newest = new_gc.or(markers.gc);
        if newest.is_none_or(|g| self.seq_cmp(i, g) == Ordering::Greater) {
            *new_gc = Some(i);
        }
    }

    /// SCD type 1 without IGNORE NULL UPDATES: only the winner of each key matters.
    fn scd1_winners(
        &self,
        markers: &Markers,
        horizon: i64,
        metrics: &mut ApplyMetrics,
    ) -> Result<PathResult, ArrowError> {
        let mut best: HashMap<&[u8], usize> = HashMap::with_capacity(self.len());
        for i in 0..self.len() {
            let Some(op) = self.op(i).filter(|o| o.is_keyed()) else {
                continue;
            };
            let key = self.key(i);
            if self.is_new(i) && self.older_than(i, markers.truncate) {
                metrics.late += 1;
                continue;
            }
            match best.get(key) {
                None => {
                    if self.is_new(i) && op == Op::Upsert && self.older_than(i, markers.gc) {
                        metrics.late_after_gc += 1;
                        continue;
                    }
                    best.insert(key, i);
                }
                Some(&j) => match self.rank(i, j) {
                    Ordering::Greater => {
                        best.insert(key, i);
                    }
                    Ordering::Equal => metrics.duplicates += 1,
                    Ordering::Less if !self.is_new(j) => metrics.late += 1,
                    // Superseded by a newer event of the same batch.
                    Ordering::Less => {}
                },
            }
        }
        let mut new_gc = None;
        let mut kept = Vec::with_capacity(best.len());
        let mut visible = Vec::with_capacity(best.len());
        for i in 0..self.len() {
            if !self.op(i).is_some_and(Op::is_keyed) || best.get(self.key(i)) != Some(&i) {
                continue;
            }
            if self.older_than(i, markers.truncate) {
                if self.op(i) == Some(Op::Upsert) {
                    metrics.truncated += 1;
                }
                continue;
            }
            if self.is_new(i) {
                match self.op(i) {
                    Some(Op::Upsert) => metrics.upserted += 1,
                    _ => metrics.deleted += 1,
                }
            }
            if self.expired(i, horizon) {
                self.collect(markers, &mut new_gc, i, metrics);
                continue;
            }
            kept.push(i);
            if self.op(i) == Some(Op::Upsert) {
                visible.push(i as u32);
            }
        }
        Ok((kept, self.take_rows(&visible)?, new_gc))
    }

    /// The general path: the ordered events of each key, folded into the visible rows
    /// (SCD type 1 with IGNORE NULL UPDATES, and SCD type 2).
    fn by_history(
        &self,
        markers: &Markers,
        horizon: i64,
        metrics: &mut ApplyMetrics,
    ) -> Result<PathResult, ArrowError> {
        let mut order: Vec<usize> = (0..self.len())
            .filter(|&i| self.op(i).is_some_and(Op::is_keyed))
            .collect();
        order.sort_unstable_by(|&a, &b| {
            self.key(a)
                .cmp(self.key(b))
                .then_with(|| self.rank(a, b))
                // Of two equal events the stored one comes last and stays.
                .then_with(|| b.cmp(&a))
        });
        let mut new_gc = None;
        let mut kept = Vec::new();
        let mut out = Output::default();
        let mut start = 0;
        while start < order.len() {
            let key = self.key(order[start]);
            let end = start + order[start..].partition_point(|&i| self.key(i) == key);
            let events = self.distinct(&order[start..end], metrics);
            start = end;
            let events = self.admit(events, markers, metrics);
            if events.is_empty() {
                continue;
            }
            if let Some(&last) = events.last()
                && self.is_new(last)
            {
                match self.op(last) {
                    Some(Op::Upsert) => metrics.upserted += 1,
                    _ => metrics.deleted += 1,
                }
            }
            if self.rules.scd2 {
                self.versions(&events, &mut out);
                kept.extend(events);
            } else {
                let from = events
                    .iter()
                    .rposition(|&i| self.op(i) == Some(Op::Delete))
                    .unwrap_or(0);
                let events = &events[from..];
                if let [only] = events
                    && self.expired(*only, horizon)
                {
                    self.collect(markers, &mut new_gc, *only, metrics);
                    continue;
                }
                if let Some(row) = self.fold(events) {
                    out.push(row, None, None);
                }
                kept.extend_from_slice(events);
            }
        }
        Ok((kept, out.build(self)?, new_gc))
    }

    /// Of a key's sorted events, per sequence value the greatest delete and the
    /// greatest upsert (in that order: at equal sequence the delete applies first, so the
    /// row exists afterwards but starts afresh; docs/semantics.md rule 4).
    fn distinct(&self, sorted: &[usize], metrics: &mut ApplyMetrics) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::with_capacity(sorted.len());
        let mut start = 0;
        while start < sorted.len() {
            let first = sorted[start];
            let op = self.op(first);
            let len = sorted[start..]
                .iter()
                .take_while(|&&j| self.seq_cmp(first, j) == Ordering::Equal && self.op(j) == op)
                .count();
            let group = &sorted[start..start + len];
            start += len;
            // Sorted by rank with equal stored events last: the last one stays.
            let Some((&chosen, losers)) = group.split_last() else {
                continue;
            };
            for &i in losers.iter().filter(|&&i| self.is_new(i)) {
                if self.rank(i, chosen) == Ordering::Equal {
                    metrics.duplicates += 1;
                } else if !self.is_new(chosen) {
                    metrics.late += 1;
                }
            }
            out.push(chosen);
        }
        out
    }

    /// Drops incoming events a TRUNCATE or a collected tombstone has made obsolete, and
    /// counts the late ones.
    fn admit(
        &self,
        events: Vec<usize>,
        markers: &Markers,
        metrics: &mut ApplyMetrics,
    ) -> Vec<usize> {
        let newest_stored = events.iter().rev().find(|&&i| !self.is_new(i)).copied();
        let no_state = newest_stored.is_none();
        let mut out = Vec::with_capacity(events.len());
        for i in events {
            if self.older_than(i, markers.truncate) {
                if self.is_new(i) {
                    metrics.late += 1;
                } else if self.op(i) == Some(Op::Upsert) {
                    metrics.truncated += 1;
                }
                continue;
            }
            if self.is_new(i) {
                if no_state && self.op(i) == Some(Op::Upsert) && self.older_than(i, markers.gc) {
                    metrics.late_after_gc += 1;
                    continue;
                }
                if newest_stored.is_some_and(|s| self.seq_cmp(i, s) == Ordering::Less) {
                    metrics.late += 1;
                }
            }
            out.push(i);
        }
        out
    }

    /// The row an upsert gives on top of `prev`: IGNORE NULL UPDATES columns keep the
    /// previous value when the upsert has null. Each entry is the source row of a column.
    fn merge(&self, prev: Option<&[usize]>, event: usize) -> Vec<usize> {
        let n = self.rules.columns.fields().len();
        let mut row = vec![event; n];
        if let Some(prev) = prev {
            for &c in &self.rules.ignore_null {
                if self.all.column(c).is_null(event) {
                    row[c] = prev[c];
                }
            }
        }
        row
    }

    /// SCD type 1: the visible row of a key's events, if it has one.
    fn fold(&self, events: &[usize]) -> Option<Vec<usize>> {
        let mut row: Option<Vec<usize>> = None;
        for &e in events {
            row = match self.op(e) {
                Some(Op::Upsert) => Some(self.merge(row.as_deref(), e)),
                _ => None,
            };
        }
        row
    }

    /// SCD type 2: the versions of a key's events.
    fn versions(&self, events: &[usize], out: &mut Output) {
        let mut open: Option<(usize, Vec<usize>)> = None;
        for &e in events {
            match self.op(e) {
                Some(Op::Upsert) => {
                    let row = self.merge(open.as_ref().map(|(_, r)| r.as_slice()), e);
                    open = match open.take() {
                        Some((start, prev)) if self.same_tracked(&prev, &row) => Some((start, row)),
                        Some((start, prev)) => {
                            out.push(prev, Some(start), Some(e));
                            Some((e, row))
                        }
                        None => Some((e, row)),
                    };
                }
                _ => {
                    if let Some((start, prev)) = open.take() {
                        out.push(prev, Some(start), Some(e));
                    }
                }
            }
        }
        if let Some((start, row)) = open {
            out.push(row, Some(start), None);
        }
    }

    fn same_tracked(&self, a: &[usize], b: &[usize]) -> bool {
        self.rules
            .tracked
            .iter()
            .all(|&c| a[c] == b[c] || self.cells[c](a[c], b[c]).is_eq())
    }

    fn take_rows(&self, rows: &[u32]) -> Result<RecordBatch, ArrowError> {
        let indices = UInt32Array::from(rows.to_vec());
        let n = self.rules.columns.fields().len();
        let columns = self.all.columns()[..n]
            .iter()
            .map(|c| take(c.as_ref(), &indices, None))
            .collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new(self.rules.public_schema(), columns)
    }

    /// The new state: the kept events, then the GC horizon and the newest TRUNCATE as
    /// marker rows without key or values.
    fn take_state(
        &self,
        kept: &[usize],
        gc: Option<usize>,
        truncate: Option<usize>,
    ) -> Result<RecordBatch, ArrowError> {
        let n = self.rules.columns.fields().len();
        let mut rows: Vec<Option<u32>> = kept.iter().map(|&i| Some(i as u32)).collect();
        let mut ops: Vec<i8> = kept.iter().map(|&i| self.ops.value(i)).collect();
        for (marker, op) in [(gc, Op::GcHorizon), (truncate, Op::Truncate)] {
            if let Some(m) = marker {
                rows.push(Some(m as u32));
                ops.push(op as i8);
            }
        }
        let markers = rows.len() - kept.len();
        let indices = UInt32Array::from(rows);
        let cell_indices: UInt32Array = indices
            .iter()
            .enumerate()
            .map(|(p, i)| if p < kept.len() { i } else { None })
            .collect();
        let mut columns = Vec::with_capacity(n + 3);
        for c in 0..n {
            columns.push(take(self.all.column(c).as_ref(), &cell_indices, None)?);
        }
        for c in [self.rules.seq_col(), self.rules.recorded_col()] {
            columns.push(take(self.all.column(c).as_ref(), &indices, None)?);
        }
        columns.insert(self.rules.op_col(), Arc::new(Int8Array::from(ops)));
        debug_assert!(markers <= 2);
        RecordBatch::try_new(self.rules.state_schema(), columns)
    }
}

/// Visible rows under construction: per row the source row of each column, and the
/// rows whose sequence values give `__START_AT` and `__END_AT`.
#[derive(Default)]
struct Output {
    cells: Vec<Vec<usize>>,
    start: Vec<Option<u32>>,
    end: Vec<Option<u32>>,
}

impl Output {
    fn push(&mut self, row: Vec<usize>, start: Option<usize>, end: Option<usize>) {
        self.cells.push(row);
        self.start.push(start.map(|s| s as u32));
        self.end.push(end.map(|e| e as u32));
    }

    fn build(self, view: &View) -> Result<RecordBatch, ArrowError> {
        let n = view.rules.columns.fields().len();
        let mut columns = Vec::with_capacity(n + 2);
        for c in 0..n {
            let indices: UInt32Array = self.cells.iter().map(|r| Some(r[c] as u32)).collect();
            columns.push(take(view.all.column(c).as_ref(), &indices, None)?);
        }
        if view.rules.scd2 {
            let seq = view.all.column(view.rules.seq_col());
            columns.push(take(seq.as_ref(), &UInt32Array::from(self.start), None)?);
            columns.push(take(seq.as_ref(), &UInt32Array::from(self.end), None)?);
        }
        RecordBatch::try_new(view.rules.public_schema(), columns)
    }
}
