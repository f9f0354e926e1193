//! The kernel's decision, built into rows a part at a time. A decision holds its inputs
//! (the stored rows and the events it decided) and, for each output row, the input rows
//! its cells come from. The new state and the visible table are gathered from them
//! [`OUT_ROWS`] rows at a time, so a caller that writes each part before it asks for the
//! next holds neither table's new rows whole, let alone both at once (docs/runtime.md,
//! "The memory of a batch").

use std::ops::Range;
use std::sync::Arc;

use super::apply_error::ApplyError;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int8Array, RecordBatch, StructArray, new_null_array,
};
use datafusion::arrow::compute::{filter_record_batch, interleave};
use datafusion::arrow::datatypes::Int8Type;

use super::rules::{ApplyMetrics, Op, Rules, is_keyed};

/// Rows per output batch (bounds the gather indexes held at once).
pub(super) const OUT_ROWS: usize = 64 * 1024;

/// `batch` without the rows whose `keep` is false; `None` when none is left. A batch
/// kept whole is not copied.
pub(crate) fn filtered(
    batch: &RecordBatch,
    keep: &[bool],
) -> Result<Option<RecordBatch>, ApplyError> {
    if keep.iter().all(|&k| k) {
        return Ok(Some(batch.clone()));
    }
    if !keep.iter().any(|&k| k) {
        return Ok(None);
    }
    let mask = BooleanArray::from(keep.to_vec());
    Ok(filter_record_batch(batch, &mask).map(Some)?)
}

/// A row of one of the inputs: `c` is the chunk (stored batches first, the incoming
/// events last), `r` the row in it. Ordering by position puts stored rows first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct P {
    pub(super) c: u32,
    pub(super) r: u32,
}

impl P {
    /// Row `r` of chunk `c`.
    pub(super) fn at(c: usize, r: usize) -> Self {
        Self {
            c: small(c),
            r: small(r),
        }
    }
}

/// A count or position of the apply's rows as the `u32` it is kept in. The apply takes
/// no input of more chunks or rows than that ([`fits_positions`]), so this never
/// truncates.
#[expect(
    clippy::cast_possible_truncation,
    reason = "fits_positions refuses inputs whose counts do not fit u32"
)]
pub(super) fn small(n: usize) -> u32 {
    debug_assert!(u32::try_from(n).is_ok(), "{n} rows passed fits_positions");
    n as u32
}

/// Refuses inputs that [`P`] cannot address: more than 2^32 - 1 chunks or rows in one.
pub(super) fn fits_positions(inputs: &[RecordBatch]) -> Result<(), ApplyError> {
    let limit = u32::MAX as usize;
    match inputs.len() < limit && inputs.iter().all(|b| b.num_rows() < limit) {
        true => Ok(()),
        false => Err(ApplyError::too_many("rows")),
    }
}

/// No row: a null cell, or an open version's `__END_AT`.
pub(super) const NONE: P = P { c: u32::MAX, r: 0 };

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
    pub(super) fn get(&self, c: usize) -> P {
        match self {
            Self::One(p) => *p,
            Self::Mixed(v, _) => v[c],
        }
    }

    /// The cells of struct column `c`'s fields, where they differ from the column's.
    pub(super) fn fields(&self, c: usize) -> Option<&[P]> {
        match self {
            Self::One(_) => None,
            Self::Mixed(_, fields) => fields
                .iter()
                .find(|(column, _)| *column == c)
                .map(|(_, f)| f.as_slice()),
        }
    }

    /// The cell of field `f` of struct column `c`.
    pub(super) fn field(&self, c: usize, f: usize) -> P {
        self.fields(c).map_or(self.get(c), |fields| fields[f])
    }
}

/// What the kernel decided on its inputs, not yet built into rows.
pub(crate) struct Decision {
    pub(super) rules: Rules,
    /// The stored batches, then the events: what every row is taken from.
    pub(super) inputs: Vec<RecordBatch>,
    /// Per stored batch, the rows that stay in the state as they are.
    pub(super) keep: Vec<Vec<bool>>,
    /// The state's other rows, key by key in sequence order.
    pub(super) kept: Vec<P>,
    /// The collected-tombstone horizon the new state records.
    pub(super) gc: Option<P>,
    /// The newest TRUNCATE the new state records.
    pub(super) truncate: Option<P>,
    pub(super) out: Output,
    pub(crate) metrics: ApplyMetrics,
    /// Whether every key was decided again.
    pub(crate) recomputed: bool,
}

impl Decision {
    /// About the rows of the new state (its markers aside): a writer's estimate.
    pub(crate) fn state_rows(&self) -> usize {
        let stay: usize = self
            .keep
            .iter()
            .map(|keep| keep.iter().filter(|&&k| k).count())
            .sum();
        stay + self.kept.len()
    }

    /// The rows of the visible table the decision gives.
    pub(crate) fn public_rows(&self) -> usize {
        self.out.base.len()
    }

    /// The new state's keyed rows, at most [`OUT_ROWS`] at a time: the stored rows that
    /// stay as they are (slices of the input where a part keeps every row), then the
    /// rows gathered. Its marker rows are [`Decision::markers`].
    pub(crate) fn state(&self) -> impl Iterator<Item = Result<RecordBatch, ApplyError>> + '_ {
        let stay = self
            .keep
            .iter()
            .enumerate()
            .flat_map(|(c, keep)| parts(keep.len()).map(move |rows| (c, rows)))
            .filter_map(|(c, rows)| self.stay(c, rows, true).transpose());
        // Each input's operation column, downcast once rather than once a row.
        let ops: Vec<&[i8]> = self
            .inputs
            .iter()
            .map(|b| {
                b.column(self.rules.op_col())
                    .as_primitive::<Int8Type>()
                    .values()
                    .as_ref()
            })
            .collect();
        let gathered = self.kept.chunks(OUT_ROWS).map(move |part| {
            let rows: Vec<(P, i8)> = part
                .iter()
                .map(|&p| (p, ops[p.c as usize][p.r as usize]))
                .collect();
            self.gather_state(&rows, false)
        });
        stay.chain(gathered)
    }

    /// The new state's marker rows (without a key): the stored ones that stay, then the
    /// collected-tombstone horizon and the TRUNCATE it records.
    pub(crate) fn markers(&self) -> Result<Vec<RecordBatch>, ApplyError> {
        let mut out = Vec::new();
        for (c, keep) in self.keep.iter().enumerate() {
            out.extend(self.stay(c, 0..keep.len(), false)?);
        }
        let rows: Vec<(P, i8)> = [(self.gc, Op::GcHorizon), (self.truncate, Op::Truncate)]
            .into_iter()
            .filter_map(|(p, op)| p.map(|p| (p, op as i8)))
            .collect();
        if !rows.is_empty() {
            out.push(self.gather_state(&rows, true)?);
        }
        Ok(out)
    }

    /// The visible table's rows, at most [`OUT_ROWS`] at a time.
    pub(crate) fn public(&self) -> impl Iterator<Item = Result<RecordBatch, ApplyError>> + '_ {
        parts(self.out.base.len()).map(|rows| self.out.part(self, rows))
    }

    /// Rows `rows` of stored batch `c` that stay in the state, in its columns: the keyed
    /// ones, or (not `keyed`) the markers.
    fn stay(
        &self,
        c: usize,
        rows: Range<usize>,
        keyed: bool,
    ) -> Result<Option<RecordBatch>, ApplyError> {
        let batch = self.inputs[c].slice(rows.start, rows.len());
        let ops = batch.column(self.rules.op_col()).as_primitive::<Int8Type>();
        let keep: Vec<bool> = self.keep[c][rows]
            .iter()
            .zip(ops.values())
            .map(|(&k, &op)| k && is_keyed(op) == keyed)
            .collect();
        Ok(filtered(&batch, &keep)?
            .map(|b| b.project(&self.rules.state_columns()))
            .transpose()?)
    }

    /// State rows (each with its operation) in the state's columns; `markers` carry
    /// only their sequence value and recording time.
    fn gather_state(&self, rows: &[(P, i8)], markers: bool) -> Result<RecordBatch, ApplyError> {
        let events = self.rules.event_schema();
        let n = self.rules.columns.fields().len();
        let none = (self.inputs.len(), 0);
        let mut columns: Vec<ArrayRef> = Vec::new();
        for c in self.rules.state_columns() {
            if c == self.rules.op_col() {
                let ops: Int8Array = rows.iter().map(|&(_, op)| Some(op)).collect();
                columns.push(Arc::new(ops));
                continue;
            }
            let null = new_null_array(events.field(c).data_type(), 1);
            let indices: Vec<(usize, usize)> = rows
                .iter()
                .map(|&(p, _)| match markers && c < n {
                    true => none,
                    false => (p.c as usize, p.r as usize),
                })
                .collect();
            columns.push(self.gather(c, &null, &indices)?);
        }
        Ok(RecordBatch::try_new(self.rules.state_schema(), columns)?)
    }

    /// Column `c` of the inputs at `indices`; input index `inputs.len()` is `null`.
    fn gather(
        &self,
        c: usize,
        null: &ArrayRef,
        indices: &[(usize, usize)],
    ) -> Result<ArrayRef, ApplyError> {
        let mut sources: Vec<&dyn Array> =
            self.inputs.iter().map(|b| b.column(c).as_ref()).collect();
        sources.push(null.as_ref());
        Ok(interleave(&sources, indices)?)
    }

    /// Struct column `c` as `gathered` (the column's cells), with the fields `fields`
    /// names taken from their own cells: the struct's validity stays the column's.
    fn gather_fields(
        &self,
        c: usize,
        null: &ArrayRef,
        gathered: &ArrayRef,
        fields: &[Option<Indices>],
    ) -> Result<ArrayRef, ApplyError> {
        let whole = gathered.as_struct();
        let mut children = whole.columns().to_vec();
        for (f, indices) in fields.iter().enumerate() {
            let Some(indices) = indices else { continue };
            let mut sources: Vec<&dyn Array> = self
                .inputs
                .iter()
                .map(|b| b.column(c).as_struct().column(f).as_ref())
                .collect();
            sources.push(null.as_struct().column(f).as_ref());
            children[f] = interleave(&sources, indices)?;
        }
        Ok(Arc::new(StructArray::try_new(
            whole.fields().clone(),
            children,
            whole.nulls().cloned(),
        )?))
    }
}

/// The row ranges of at most [`OUT_ROWS`] rows of `n` rows.
fn parts(n: usize) -> impl Iterator<Item = Range<usize>> {
    (0..n)
        .step_by(OUT_ROWS)
        .map(move |start| start..(start + OUT_ROWS).min(n))
}

/// Visible rows under construction: the source of each row's cells and, for SCD type
/// 2, the rows whose sequence values give `__START_AT` and `__END_AT`.
pub(super) struct Output {
    base: Vec<P>,
    /// Rows whose cells come from several events: (row, cells, struct fields' cells),
    /// by row.
    mixed: Vec<(usize, Vec<P>, Vec<FieldCells>)>,
    /// Whether rows are versions (SCD type 2): only then are `start` and `end` kept.
    versions: bool,
    start: Vec<P>,
    end: Vec<P>,
}

impl Output {
    pub(super) fn new(versions: bool) -> Self {
        Self {
            base: Vec::new(),
            mixed: Vec::new(),
            versions,
            start: Vec::new(),
            end: Vec::new(),
        }
    }

    pub(super) fn reserve(&mut self, rows: usize) {
        self.base.reserve(rows);
    }

    pub(super) fn push(&mut self, cells: Cells, start: P, end: P) {
        match cells {
            Cells::One(p) => self.base.push(p),
            Cells::Mixed(v, fields) => {
                self.base.push(v[0]);
                self.mixed.push((self.base.len() - 1, v, fields));
            }
        }
        if self.versions {
            self.start.push(start);
            self.end.push(end);
        }
    }

    /// Visible rows `rows`, gathered from `decision`'s inputs.
    fn part(&self, decision: &Decision, rows: Range<usize>) -> Result<RecordBatch, ApplyError> {
        let rules = &decision.rules;
        let schema = rules.public_schema();
        let n = rules.columns.fields().len();
        let nulls: Vec<ArrayRef> = rules
            .event_schema()
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), 1))
            .collect();
        let none = decision.inputs.len();
        let index = |p: P| match p == NONE {
            true => (none, 0),
            false => (p.c as usize, p.r as usize),
        };
        let (start, end) = (rows.start, rows.end);
        let mixed = {
            let from = self.mixed.partition_point(|(row, ..)| *row < start);
            let to = self.mixed.partition_point(|(row, ..)| *row < end);
            &self.mixed[from..to]
        };
        // One index for every column; a column gets its own copy only where a row
        // takes that column from another event (IGNORE NULL UPDATES).
        let base: Vec<(usize, usize)> = self.base[rows].iter().map(|&p| index(p)).collect();
        let mut own: Vec<Option<Vec<(usize, usize)>>> = vec![None; n];
        // Struct columns some row takes field by field: per field, the rows' cells
        // where they differ from the column's.
        let mut own_fields: Vec<(usize, Vec<Option<Indices>>)> = Vec::new();
        let mut field_cells: Vec<(usize, usize, Vec<P>)> = Vec::new();
        for (row, v, fields) in mixed {
            for (c, slot) in own.iter_mut().enumerate() {
                let cell = index(v[c]);
                if cell != base[row - start] {
                    slot.get_or_insert_with(|| base.clone())[row - start] = cell;
                }
            }
            for (c, cells) in fields {
                field_cells.push((*row - start, *c, cells.clone()));
            }
        }
        for (row, c, cells) in field_cells {
            let column = own[c].as_deref().unwrap_or(&base);
            let at = match own_fields.iter().position(|(k, _)| *k == c) {
                Some(i) => i,
                None => {
                    own_fields.push((c, vec![None; cells.len()]));
                    own_fields.len() - 1
                }
            };
            for (f, &p) in cells.iter().enumerate() {
                if index(p) != column[row] {
                    own_fields[at].1[f].get_or_insert_with(|| column.to_vec())[row] = index(p);
                }
            }
        }
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (c, indices) in own.iter().enumerate() {
            let indices = indices.as_deref().unwrap_or(&base);
            let gathered = decision.gather(c, &nulls[c], indices)?;
            match own_fields.iter().find(|(k, _)| *k == c) {
                Some((_, fields)) => {
                    columns.push(decision.gather_fields(c, &nulls[c], &gathered, fields)?)
                }
                None => columns.push(gathered),
            }
        }
        if self.versions {
            let seq = rules.seq_col();
            for bound in [&self.start, &self.end] {
                let indices: Vec<(usize, usize)> =
                    bound[start..end].iter().map(|&p| index(p)).collect();
                columns.push(decision.gather(seq, &nulls[seq], &indices)?);
            }
        }
        rules.with_generated(columns)
    }
}
