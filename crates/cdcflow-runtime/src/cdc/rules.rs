//! The AUTO CDC rules a target is applied by ([`Rules`]): its columns, keys, sequence
//! and SCD type, the events' and the state's shapes, and what an apply counts
//! ([`ApplyMetrics`]). The kernel (`kernel.rs`) applies them; nothing here runs.

use std::sync::Arc;

use super::apply_error::ApplyError;
use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use serde::{Deserialize, Serialize};

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
    Upsert = cdcflow_plan::autocdc::UPSERT,
    Delete = cdcflow_plan::autocdc::DELETE,
    /// Removes every key whose state is older; has no key.
    Truncate = cdcflow_plan::autocdc::TRUNCATE,
    /// Marker: the newest sequence value of a tombstone collected by GC; has no key.
    GcHorizon = 3,
}

/// Whether a stored [`OP`] value is an event of a key (an upsert or a delete), not a
/// marker.
pub(crate) fn is_keyed(op: i8) -> bool {
    op == Op::Upsert as i8 || op == Op::Delete as i8
}

impl Op {
    pub(super) fn of(v: i8) -> Option<Self> {
        match v {
            0 => Some(Self::Upsert),
            1 => Some(Self::Delete),
            2 => Some(Self::Truncate),
            3 => Some(Self::GcHorizon),
            _ => None,
        }
    }

    pub(super) fn is_keyed(self) -> bool {
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
    pub(super) fn with_generated(&self, columns: Vec<ArrayRef>) -> Result<RecordBatch, ApplyError> {
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
                .map_err(|e| ApplyError::Generated {
                    column: g.field.name().clone(),
                    message: e.to_string(),
                })?;
            let value = cast(&value, g.field.data_type())?;
            if !g.field.is_nullable() && value.null_count() > 0 {
                return Err(ApplyError::Generated {
                    column: g.field.name().clone(),
                    message: format!(
                        "NOT NULL, but `{}` is null on {} row(s); nothing was committed",
                        g.text,
                        value.null_count()
                    ),
                });
            }
            columns.push(value);
        }
        Ok(RecordBatch::try_new(self.public_schema(), columns)?)
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
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
