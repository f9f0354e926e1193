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

use std::cmp::Ordering;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, DynComparator, Int8Array, Int64Array, RecordBatch,
    make_comparator,
};
use datafusion::arrow::compute::{SortOptions, cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Int8Type, Int64Type, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::HashMap;
use datafusion::physical_expr::PhysicalExpr;
use serde::Serialize;

use cdcflow_plan::autocdc::{END_AT, START_AT};

pub(crate) use super::decision::Decision;
use super::decision::Output;

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
    /// Batches with fewer member and event rows are decided on one thread, larger ones
    /// on every core ([`SHARED_ROWS`] unless a test wants every batch split).
    pub min_shared_rows: usize,
    /// The target's computed columns (`GENERATED ALWAYS AS (expr)`), made from each
    /// visible row's other columns and stored after them.
    pub generated: Vec<GeneratedColumn>,
}

/// A computed column of an AUTO CDC target: its field and its expression over the
/// visible row ([`Rules::computed_from`]).
#[derive(Debug, Clone)]
pub struct GeneratedColumn {
    pub field: Field,
    pub expr: Arc<dyn PhysicalExpr>,
    /// The expression as written, for messages.
    pub text: String,
}

/// The default [`Rules::min_shared_rows`]: below it, splitting costs more than it saves.
pub const SHARED_ROWS: usize = 32 * 1024;

impl Rules {
    /// An event, and a row of the state when it keeps values: the target's columns (all
    /// nullable: deletes and markers carry no values), then the sequence, the operation
    /// and the recording time.
    pub fn event_schema(&self) -> SchemaRef {
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

    /// Plain SCD type 1 (no IGNORE NULL UPDATES) keeps no values in its state: a live
    /// key's values are its published row, so the state stays narrow and each batch
    /// rewrites one wide table, not two.
    pub fn narrow_state(&self) -> bool {
        !self.scd2 && self.ignore_null.is_empty()
    }

    /// The state table: [`Rules::event_schema`], or for a [narrow
    /// state](Rules::narrow_state) the keys (in KEYS order), sequence, operation and
    /// recording time.
    pub fn state_schema(&self) -> SchemaRef {
        if !self.narrow_state() {
            return self.event_schema();
        }
        let events = self.event_schema();
        let fields: Vec<Field> = self
            .narrow_columns()
            .into_iter()
            .map(|c| events.field(c).clone())
            .collect();
        Arc::new(Schema::new(fields))
    }

    /// The columns of [`Rules::event_schema`] the state keeps ([`Rules::state_schema`]):
    /// a narrow state's few, else all.
    pub(crate) fn state_columns(&self) -> Vec<usize> {
        match self.narrow_state() {
            true => self.narrow_columns(),
            false => (0..self.event_schema().fields().len()).collect(),
        }
    }

    /// The columns of [`Rules::event_schema`] a narrow state keeps, in its order.
    pub fn narrow_columns(&self) -> Vec<usize> {
        let mut columns = self.keys.clone();
        columns.extend([self.seq_col(), self.op_col(), self.recorded_col()]);
        columns
    }

    /// The visible table: [`Rules::computed_from`], then the computed columns.
    pub fn public_schema(&self) -> SchemaRef {
        let base = self.computed_from();
        if self.generated.is_empty() {
            return base;
        }
        let mut fields: Vec<Field> = base.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(self.generated.iter().map(|g| g.field.clone()));
        Arc::new(Schema::new(fields))
    }

    /// The visible row the computed columns are made from: the target's columns, and
    /// `__START_AT`/`__END_AT` for SCD type 2.
    pub fn computed_from(&self) -> SchemaRef {
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

    /// `columns` (of [`Rules::computed_from`]) with the computed columns added.
    pub(super) fn with_generated(&self, columns: Vec<ArrayRef>) -> Result<RecordBatch, ArrowError> {
        let base = RecordBatch::try_new(self.computed_from(), columns)?;
        if self.generated.is_empty() {
            return Ok(base);
        }
        let mut columns = base.columns().to_vec();
        for g in &self.generated {
            let value = g
                .expr
                .evaluate(&base)
                .and_then(|v| v.into_array(base.num_rows()))
                .map_err(|e| {
                    ArrowError::ComputeError(format!("generated column `{}`: {e}", g.field.name()))
                })?;
            let value = cast(&value, g.field.data_type())?;
            if !g.field.is_nullable() && value.null_count() > 0 {
                return Err(ArrowError::ComputeError(format!(
                    "generated column `{}` is NOT NULL, but `{}` is null on {} row(s); nothing was committed",
                    g.field.name(),
                    g.text,
                    value.null_count()
                )));
            }
            columns.push(value);
        }
        RecordBatch::try_new(self.public_schema(), columns)
    }

    pub(crate) fn seq_col(&self) -> usize {
        self.columns.fields().len()
    }

    pub(crate) fn op_col(&self) -> usize {
        self.seq_col() + 1
    }

    pub(crate) fn recorded_col(&self) -> usize {
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
    /// Incoming events older than the stored state of their key: `late_applied` plus
    /// `late_dropped`.
    pub late: u64,
    /// Late events that changed the result: SCD2 inserts them into history (SCD1 with
    /// IGNORE NULL UPDATES may still fill a column a newer upsert left null).
    pub late_applied: u64,
    /// Late events that changed nothing: SCD1 keeps the newest event, a TRUNCATE
    /// removed what came before it, or an event of the same sequence value won.
    pub late_dropped: u64,
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

impl ApplyMetrics {
    /// Counts of another part of the same batch added in.
    pub(crate) fn add(&mut self, other: &Self) {
        self.events += other.events;
        self.upserted += other.upserted;
        self.deleted += other.deleted;
        self.late += other.late;
        self.late_applied += other.late_applied;
        self.late_dropped += other.late_dropped;
        self.duplicates += other.duplicates;
        self.late_after_gc += other.late_after_gc;
        self.truncated += other.truncated;
        self.tombstones_collected += other.tombstones_collected;
    }
}

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

/// Rows per output batch (bounds the gather indexes held at once).
pub(super) const OUT_ROWS: usize = 64 * 1024;

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

pub use super::touched::apply;

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
) -> Result<Decision, ArrowError> {
    let mut inputs: Vec<RecordBatch> = stored.into_iter().filter(|b| b.num_rows() > 0).collect();
    let event_chunk = inputs.len() as u32;
    let metrics = ApplyMetrics {
        events: events.num_rows() as u64,
        ..ApplyMetrics::default()
    };
    inputs.push(events);
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

/// `batch` without the rows whose `keep` is false; `None` when none is left. A batch
/// kept whole is not copied.
pub(crate) fn filtered(
    batch: &RecordBatch,
    keep: &[bool],
) -> Result<Option<RecordBatch>, ArrowError> {
    if keep.iter().all(|&k| k) {
        return Ok(Some(batch.clone()));
    }
    if !keep.iter().any(|&k| k) {
        return Ok(None);
    }
    let mask = BooleanArray::from(keep.to_vec());
    filter_record_batch(batch, &mask).map(Some)
}

/// A row of one of the inputs: `c` is the chunk (stored batches first, the incoming
/// events last), `r` the row in it. Ordering by position puts stored rows first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct P {
    pub(super) c: u32,
    pub(super) r: u32,
}

/// No row: a null cell, or an open version's `__END_AT`.
pub(super) const NONE: P = P { c: u32::MAX, r: 0 };

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
    /// Per chunk; empty once the walk is done ([`View::forget_order`]).
    order: Vec<Order>,
    event_chunk: u32,
}

/// The newest TRUNCATE and collected-tombstone horizon.
struct Markers {
    truncate: Option<P>,
    gc: Option<P>,
}

fn converter(fields: &[&Field]) -> Result<RowConverter, ArrowError> {
    RowConverter::new(
        fields
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )
}

impl<'a> View<'a> {
    fn new(
        rules: &'a Rules,
        inputs: &[&'a RecordBatch],
        event_chunk: u32,
    ) -> Result<Self, ArrowError> {
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
                    .ok_or_else(|| ArrowError::SchemaError(format!("{OP} is not Int8")))?,
                recorded: batch
                    .column(rules.recorded_col())
                    .as_primitive_opt::<Int64Type>()
                    .ok_or_else(|| {
                        ArrowError::SchemaError(format!("{RECORDED_AT} is not Int64"))
                    })?,
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

    fn seq_cmp(&self, p: P, q: P) -> Ordering {
        self.order[p.c as usize]
            .seq
            .row(p.r as usize)
            .cmp(self.order[q.c as usize].seq.row(q.r as usize))
    }

    /// Column `c` of two rows compared, nulls first.
    fn cell_cmp(&self, c: usize, p: P, q: P) -> Ordering {
        if p == q {
            return Ordering::Equal;
        }
        if p.c == q.c {
            return self.chunk(p).cells[c](p.r as usize, q.r as usize);
        }
        // Rows of different batches (rare: ties and merges across batches).
        let a = self.chunk(p).batch.column(c).slice(p.r as usize, 1);
        let b = self.chunk(q).batch.column(c).slice(q.r as usize, 1);
        make_comparator(a.as_ref(), b.as_ref(), SortOptions::default())
            .map_or(Ordering::Equal, |cmp| cmp(0, 0))
    }

    /// The order of two events of one key: sequence, then a delete before an upsert,
    /// then, between upserts, the greater row (docs/semantics.md rule 4). Equal means
    /// the same event: a delete is its key and sequence (its other columns are never
    /// shown, and a narrow state does not keep them).
    fn rank(&self, p: P, q: P) -> Ordering {
        let upsert = |x: P| self.op(x) == Some(Op::Upsert);
        self.seq_cmp(p, q)
            .then_with(|| upsert(p).cmp(&upsert(q)))
            .then_with(|| {
                if !upsert(p) {
                    return Ordering::Equal;
                }
                (0..self.rules.columns.fields().len())
                    .map(|c| self.cell_cmp(c, p, q))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
    }

    /// Key, then rank; of two equal events the stored (earlier) one comes last.
    fn event_order(&self, p: P, q: P) -> Ordering {
        self.key(p)
            .cmp(self.key(q))
            .then_with(|| self.rank(p, q))
            .then_with(|| q.cmp(&p))
    }

    fn markers(&self) -> Markers {
        let mut truncate: Option<P> = None;
        let mut gc: Option<P> = None;
        for (c, chunk) in self.chunks.iter().enumerate() {
            for (r, &op) in chunk.ops.values().iter().enumerate() {
                let slot = match Op::of(op) {
                    Some(Op::Truncate) => &mut truncate,
                    Some(Op::GcHorizon) => &mut gc,
                    _ => continue,
                };
                let p = P {
                    c: c as u32,
                    r: r as u32,
                };
                if slot.is_none_or(|m| self.seq_cmp(p, m) == Ordering::Greater) {
                    *slot = Some(p);
                }
            }
        }
        Markers { truncate, gc }
    }

    /// The keyed rows of the chunks in `range`, in chunk order.
    fn keyed(&self, chunks: Range<usize>) -> Vec<P> {
        let mut out = Vec::new();
        for c in chunks {
            for (r, &op) in self.chunks[c].ops.values().iter().enumerate() {
                if Op::of(op).is_some_and(Op::is_keyed) {
                    out.push(P {
                        c: c as u32,
                        r: r as u32,
                    });
                }
            }
        }
        out
    }

    fn older_than(&self, p: P, marker: Option<P>) -> bool {
        marker.is_some_and(|m| self.seq_cmp(p, m) == Ordering::Less)
    }

    fn expired(&self, p: P, horizon: i64) -> bool {
        self.op(p) == Some(Op::Delete) && self.chunk(p).recorded.value(p.r as usize) < horizon
    }

    fn is_null(&self, c: usize, p: P) -> bool {
        self.chunk(p).batch.column(c).is_null(p.r as usize)
    }

    /// The number of fields of column `c`, when it is a struct.
    fn struct_width(&self, c: usize) -> Option<usize> {
        match self.rules.columns.field(c).data_type() {
            DataType::Struct(fields) => Some(fields.len()),
            _ => None,
        }
    }

    /// Whether field `f` of struct column `c` is null at `p` (the struct being null too).
    fn field_is_null(&self, c: usize, f: usize, p: P) -> bool {
        let column = self.chunk(p).batch.column(c);
        column.is_null(p.r as usize) || column.as_struct().column(f).is_null(p.r as usize)
    }

    /// Field `f` of struct column `c` at `p` against at `q`.
    fn field_cmp(&self, c: usize, f: usize, p: P, q: P) -> Ordering {
        if p == q {
            return Ordering::Equal;
        }
        match (self.field_is_null(c, f, p), self.field_is_null(c, f, q)) {
            (true, true) => return Ordering::Equal,
            (true, false) | (false, true) => return Ordering::Less,
            _ => {}
        }
        let value = |x: P| {
            self.chunk(x)
                .batch
                .column(c)
                .as_struct()
                .column(f)
                .slice(x.r as usize, 1)
        };
        let (a, b) = (value(p), value(q));
        make_comparator(a.as_ref(), b.as_ref(), SortOptions::default())
            .map_or(Ordering::Equal, |cmp| cmp(0, 0))
    }
}

/// The source row of each column of a visible row: one event, or (IGNORE NULL UPDATES)
/// several.
#[derive(Debug, Clone)]
pub(super) enum Cells {
    One(P),
    /// A cell per column, and for a struct column whose fields come from several
    /// events (IGNORE NULL UPDATES on nested fields) a cell per field.
    Mixed(Vec<P>, Vec<FieldCells>),
}

/// A struct column (by index) and the cell of each of its fields.
pub(super) type FieldCells = (usize, Vec<P>);

/// Gather indices (chunk, row) of a column's rows.
pub(super) type Indices = Vec<(usize, usize)>;

impl Cells {
    fn get(&self, c: usize) -> P {
        match self {
            Self::One(p) => *p,
            Self::Mixed(v, _) => v[c],
        }
    }

    /// The cells of struct column `c`'s fields, where they differ from the column's.
    fn fields(&self, c: usize) -> Option<&[P]> {
        match self {
            Self::One(_) => None,
            Self::Mixed(_, fields) => fields
                .iter()
                .find(|(column, _)| *column == c)
                .map(|(_, f)| f.as_slice()),
        }
    }

    /// The cell of field `f` of struct column `c`.
    fn field(&self, c: usize, f: usize) -> P {
        self.fields(c).map_or(self.get(c), |fields| fields[f])
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
                    let next = touched.len() as u32;
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
                let p = P { c, r: r as u32 };
                let Some(op) = view.op(p).filter(|o| o.is_keyed()) else {
                    continue; // markers are written anew
                };
                let key = view.key(p);
                let gid = match touched.get(key) {
                    Some(&g) => Some(g),
                    None if recompute => {
                        let g = groups.len() as u32;
                        touched.insert(key, g);
                        let end = incoming.len() as u32;
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
            while m < members.len() && members[m].0 == g as u32 {
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

    /// A key with incoming events, given its distinct and admitted events in rank
    /// order: compacted and published.
    fn decide(&mut self, events: &[P]) {
        let view = self.view;
        let Some(&last) = events.last() else {
            return;
        };
        if view.is_new(last) {
            match view.op(last) {
                Some(Op::Upsert) => self.metrics.upserted += 1,
                _ => self.metrics.deleted += 1,
            }
        }
        let keep: &[P] = if view.rules.scd2 {
            events
        } else if view.rules.ignore_null.is_empty() {
            &events[events.len() - 1..]
        } else {
            // A late upsert may still fill a column a newer upsert left null, back to
            // the last delete.
            let from = events
                .iter()
                .rposition(|&p| view.op(p) == Some(Op::Delete))
                .unwrap_or(0);
            &events[from..]
        };
        self.count_late(events, events.len() - keep.len());
        if let [only] = keep
            && !view.rules.scd2
            && view.expired(*only, self.horizon)
        {
            self.collect(*only);
            return;
        }
        self.kept.extend_from_slice(keep);
        self.publish(keep);
    }

    /// Counts the incoming events of a key older than its newest stored one: applied
    /// when the key keeps them (`events[kept_from..]`), dropped when it does not.
    fn count_late(&mut self, events: &[P], kept_from: usize) {
        let view = self.view;
        let Some(&newest_stored) = events.iter().rev().find(|&&p| !view.is_new(p)) else {
            return;
        };
        for (i, &p) in events.iter().enumerate() {
            if view.is_new(p) && view.seq_cmp(p, newest_stored) == Ordering::Less {
                match i >= kept_from {
                    true => self.metrics.late_applied += 1,
                    false => self.metrics.late_dropped += 1,
                }
            }
        }
    }

    /// Per sequence value, the greatest delete and the greatest upsert (a delete first:
    /// at equal sequence the row exists afterwards but starts afresh), into `out`.
    fn distinct(&mut self, sorted: &[P], out: &mut Vec<P>) {
        let view = self.view;
        out.clear();
        let mut start = 0;
        while start < sorted.len() {
            let first = sorted[start];
            let op = view.op(first);
            let len = sorted[start..]
                .iter()
                .take_while(|&&q| view.seq_cmp(first, q) == Ordering::Equal && view.op(q) == op)
                .count();
            let group = &sorted[start..start + len];
            start += len;
            let Some((&chosen, losers)) = group.split_last() else {
                continue;
            };
            for &p in losers.iter().filter(|&&p| view.is_new(p)) {
                if view.rank(p, chosen) == Ordering::Equal {
                    self.metrics.duplicates += 1;
                } else if !view.is_new(chosen) {
                    self.metrics.late_dropped += 1;
                }
            }
            out.push(chosen);
        }
    }

    /// `events` without those a TRUNCATE or a collected tombstone made obsolete, into
    /// `out`; counts the late it drops ([`Self::decide`] counts the others).
    fn admit(&mut self, events: &[P], out: &mut Vec<P>) {
        let view = self.view;
        let no_state = events.iter().all(|&p| view.is_new(p));
        out.clear();
        for &p in events {
            if view.older_than(p, self.markers.truncate) {
                if view.is_new(p) {
                    self.metrics.late_dropped += 1;
                } else if view.op(p) == Some(Op::Upsert) {
                    self.metrics.truncated += 1;
                }
                continue;
            }
            if view.is_new(p)
                && no_state
                && view.op(p) == Some(Op::Upsert)
                && view.older_than(p, self.markers.gc)
            {
                self.metrics.late_after_gc += 1;
                continue;
            }
            out.push(p);
        }
    }

    fn collect(&mut self, p: P) {
        self.metrics.tombstones_collected += 1;
        let newest = self.new_gc.or(self.markers.gc);
        if newest.is_none_or(|g| self.view.seq_cmp(p, g) == Ordering::Greater) {
            self.new_gc = Some(p);
        }
    }

    /// The visible rows of a key's kept events.
    fn publish(&mut self, events: &[P]) {
        if self.view.rules.scd2 {
            self.versions(events);
        } else {
            let mut row: Option<Cells> = None;
            for &e in events {
                row = match self.view.op(e) {
                    Some(Op::Upsert) => Some(self.merge(row.as_ref(), e)),
                    _ => None,
                };
            }
            if let Some(row) = row {
                self.out.push(row, NONE, NONE);
            }
        }
    }

    /// The row an upsert gives on top of `prev`: IGNORE NULL UPDATES columns keep the
    /// previous value when the upsert has null, and so do the fields of a struct
    /// column (`addr = {city: null, zip: '0151'}` over `{oslo, 0150}` gives `{oslo,
    /// 0151}`, as the Databricks documentation describes), one level deep.
    fn merge(&self, prev: Option<&Cells>, event: P) -> Cells {
        let view = self.view;
        let Some(prev) = prev.filter(|_| !view.rules.ignore_null.is_empty()) else {
            return Cells::One(event);
        };
        let n = view.rules.columns.fields().len();
        let mut cells: Option<Vec<P>> = None;
        let mut fields: Vec<FieldCells> = Vec::new();
        for &c in &view.rules.ignore_null {
            if view.is_null(c, event) {
                if prev.get(c) != event {
                    cells.get_or_insert_with(|| vec![event; n])[c] = prev.get(c);
                    if let Some(kept) = prev.fields(c) {
                        fields.push((c, kept.to_vec()));
                    }
                }
                continue;
            }
            let Some(width) = view.struct_width(c) else {
                continue;
            };
            let mut own: Option<Vec<P>> = None;
            for f in 0..width {
                let before = prev.field(c, f);
                if view.field_is_null(c, f, event)
                    && before != event
                    && !view.field_is_null(c, f, before)
                {
                    own.get_or_insert_with(|| vec![event; width])[f] = before;
                }
            }
            if let Some(own) = own {
                cells.get_or_insert_with(|| vec![event; n]);
                fields.push((c, own));
            }
        }
        match cells {
            Some(cells) => Cells::Mixed(cells, fields),
            None => Cells::One(event),
        }
    }

    /// SCD type 2: the versions of a key's events.
    fn versions(&mut self, events: &[P]) {
        let mut open: Option<(P, Cells)> = None;
        for &e in events {
            if self.view.op(e) == Some(Op::Upsert) {
                let row = self.merge(open.as_ref().map(|(_, r)| r), e);
                open = match open.take() {
                    Some((start, prev)) if self.same_tracked(&prev, &row) => Some((start, row)),
                    Some((start, prev)) => {
                        self.out.push(prev, start, e);
                        Some((e, row))
                    }
                    None => Some((e, row)),
                };
            } else if let Some((start, prev)) = open.take() {
                self.out.push(prev, start, e);
            }
        }
        if let Some((start, row)) = open {
            self.out.push(row, start, NONE);
        }
    }

    fn same_tracked(&self, a: &Cells, b: &Cells) -> bool {
        self.view.rules.tracked.iter().all(|&c| {
            match (a.fields(c), b.fields(c), self.view.struct_width(c)) {
                (None, None, _) | (_, _, None) => self.view.cell_cmp(c, a.get(c), b.get(c)).is_eq(),
                (_, _, Some(width)) => (0..width).all(|f| {
                    self.view
                        .field_cmp(c, f, a.field(c, f), b.field(c, f))
                        .is_eq()
                }),
            }
        })
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
