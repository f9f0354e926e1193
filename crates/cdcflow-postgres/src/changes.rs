//! The rows a PostgreSQL source yields: the table's columns, then the change metadata
//! ([`ChangeKind`], commit LSN, position in the transaction, commit time, transaction
//! id). Rows are gathered as text and turned into one Arrow batch at the end.

use std::sync::Arc;

use cdcflow_plan::read_postgres::metadata_fields;
use cdcflow_runtime::sources::{CarriedCell, RejectedRow};
use datafusion::arrow::array::{
    ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::PgError;
use crate::rejected::SetApart;
use crate::types::{TextColumn, arrow_type};

/// What happened to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Copied by the initial snapshot.
    Snapshot,
    Insert,
    Update,
    Delete,
    /// The table was truncated: the row's columns are all null.
    Truncate,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Insert => "insert",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Truncate => "truncate",
        }
    }
}

/// A column of the source table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableColumn {
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
    pub not_null: bool,
    /// Declared STRING by the pipeline (`schema =>`): kept as PostgreSQL prints it.
    pub keep_text: bool,
    /// Its default (`DEFAULT …`, as the catalog prints it), when it has one: added to a
    /// table with rows, it gives them a value the WAL never carries.
    pub default: Option<String>,
}

impl TableColumn {
    pub fn arrow_type(&self) -> DataType {
        match self.keep_text {
            true => DataType::Utf8,
            false => arrow_type(self.type_oid, self.type_modifier),
        }
    }
}

/// The schema of the rows of a table with `columns`.
pub fn change_schema(columns: &[TableColumn]) -> SchemaRef {
    let mut fields: Vec<Field> = columns
        .iter()
        // Nullable: a delete carries only the key, a truncate no column at all.
        .map(|c| Field::new(&c.name, c.arrow_type(), true))
        .collect();
    fields.extend(metadata_fields());
    Arc::new(Schema::new(fields))
}

/// Where a change sits in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeMeta {
    pub kind: ChangeKind,
    /// The commit LSN of its transaction (the snapshot's consistent point for
    /// snapshot rows).
    pub commit_lsn: u64,
    /// Its position within the transaction, from 1 (0 for snapshot rows, so that a
    /// change committed at the consistent point itself still sorts after them).
    pub seq: i64,
    pub commit_micros: Option<i64>,
    pub xid: Option<u32>,
}

/// Rows gathered as text.
#[derive(Debug)]
pub struct ChangeRows {
    columns: Vec<TableColumn>,
    values: Vec<TextColumn>,
    meta: Vec<ChangeMeta>,
    /// The replica identity's columns, once the stream has described the table.
    keys: Vec<usize>,
    /// Cells an update left out (unchanged TOASTed values) whose key has no row
    /// before it in these rows: (row, column), to be carried over from the rows stored
    /// before.
    unresolved: Vec<Unresolved>,
}

/// A left-out cell no earlier row of these rows gives.
#[derive(Debug, Clone, PartialEq)]
struct Unresolved {
    row: usize,
    column: usize,
    /// The key to take it from, when not the row's own (a key change).
    key: Option<Vec<Option<String>>>,
}

impl ChangeRows {
    pub fn new(columns: Vec<TableColumn>) -> Self {
        let values = vec![TextColumn::default(); columns.len()];
        Self {
            columns,
            values,
            meta: vec![],
            keys: vec![],
            unresolved: vec![],
        }
    }

    /// The replica identity's columns, as the stream flags them.
    pub fn set_keys(&mut self, flags: &[bool]) {
        self.keys = flags
            .iter()
            .enumerate()
            .filter(|(_, key)| **key)
            .map(|(i, _)| i)
            .collect();
    }

    /// The names of the replica identity's columns.
    pub fn key_names(&self) -> Vec<String> {
        self.keys
            .iter()
            .filter_map(|i| self.columns.get(*i))
            .map(|c| c.name.clone())
            .collect()
    }

    /// Cells left out by updates that no earlier row of these rows gives.
    pub fn unresolved(&self) -> Vec<CarriedCell> {
        self.unresolved
            .iter()
            .filter_map(|u| {
                Some(CarriedCell {
                    row: u.row,
                    column: self.columns.get(u.column)?.name.clone(),
                    key: u.key.as_ref().map(|k| {
                        self.keys
                            .iter()
                            .map(|&i| k.get(i).cloned().flatten().unwrap_or_default())
                            .collect()
                    }),
                })
            })
            .collect()
    }

    /// Adds a change whose `unchanged` columns the stream left out: each takes the
    /// value of the latest earlier row of the same key (PostgreSQL leaves out a
    /// TOASTed value only when the update did not change it); without such a row the
    /// cell is [`Self::unresolved`].
    /// `old_key`: the row's values before an update that changed its key (the value
    /// left out is the old row's).
    pub fn push_change(
        &mut self,
        mut values: Vec<Option<String>>,
        meta: ChangeMeta,
        unchanged: &[usize],
        old_key: Option<&[Option<String>]>,
    ) -> Result<(), PgError> {
        if unchanged.is_empty() {
            return self.push(values, meta);
        }
        let row = self.meta.len();
        let before = self.latest_row_of(old_key.unwrap_or(&values));
        for &c in unchanged {
            let carried =
                before.filter(|b| !self.unresolved.iter().any(|u| u.row == *b && u.column == c));
            match carried {
                Some(b) => values[c] = self.values[c].values[b].clone(),
                None => {
                    // An unresolved row before takes its value from the key it was
                    // to take it from: the one it names, or else its own, named here
                    // when this row changed the key (never this row's new key).
                    let key = before
                        .and_then(|b| {
                            let u = self
                                .unresolved
                                .iter()
                                .find(|u| u.row == b && u.column == c)?;
                            Some(
                                u.key
                                    .clone()
                                    .or_else(|| old_key.map(|_| self.key_of_row(b))),
                            )
                        })
                        .unwrap_or_else(|| old_key.map(<[Option<String>]>::to_vec));
                    self.unresolved.push(Unresolved {
                        row,
                        column: c,
                        key,
                    });
                }
            }
        }
        self.push(values, meta)
    }

    /// Row `r`'s key columns, in the table's column order (the other columns null).
    fn key_of_row(&self, r: usize) -> Vec<Option<String>> {
        (0..self.columns.len())
            .map(|c| match self.keys.contains(&c) {
                true => self.values[c].values[r].clone(),
                false => None,
            })
            .collect()
    }

    /// The latest row holding the key of `values` (not a delete or truncate).
    fn latest_row_of(&self, values: &[Option<String>]) -> Option<usize> {
        if self.keys.is_empty() {
            return None;
        }
        (0..self.meta.len()).rev().find(|&r| {
            !matches!(self.meta[r].kind, ChangeKind::Delete | ChangeKind::Truncate)
                && self
                    .keys
                    .iter()
                    .all(|&k| self.values[k].values[r] == values[k])
        })
    }

    /// The text of row `row`'s value in column `column` (`None`: null, or no such
    /// cell).
    pub fn cell(&self, row: usize, column: usize) -> Option<&str> {
        self.values.get(column)?.values.get(row)?.as_deref()
    }

    pub fn columns(&self) -> &[TableColumn] {
        &self.columns
    }

    pub fn len(&self) -> usize {
        self.meta.len()
    }

    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Adds a row; `values` in the table's column order.
    pub fn push(&mut self, values: Vec<Option<String>>, meta: ChangeMeta) -> Result<(), PgError> {
        if values.len() != self.columns.len() {
            return Err(PgError::Protocol(format!(
                "a row of {} values for a table of {} columns",
                values.len(),
                self.columns.len()
            )));
        }
        for (column, value) in self.values.iter_mut().zip(values) {
            column.values.push(value);
        }
        self.meta.push(meta);
        Ok(())
    }

    /// The rows as one Arrow batch of [`change_schema`], but for those with a value
    /// their column's type has none of, which are set apart ([`crate::rejected`]).
    pub fn finish(self) -> Result<Finished, PgError> {
        let schema = change_schema(&self.columns);
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        let mut apart = SetApart::default();
        for (column, values) in self.columns.iter().zip(&self.values) {
            let converted = values.convert(&column.name, &column.arrow_type())?;
            for (row, why) in converted.rejected {
                apart.add(row, why);
            }
            arrays.push(converted.array);
        }
        let lsn = |m: &ChangeMeta| i64::try_from(m.commit_lsn).unwrap_or(i64::MAX);
        arrays.push(Arc::new(StringArray::from_iter_values(
            self.meta.iter().map(|m| m.kind.as_str()),
        )));
        arrays.push(Arc::new(Int64Array::from_iter_values(
            self.meta.iter().map(lsn),
        )));
        arrays.push(Arc::new(Int64Array::from_iter_values(
            self.meta.iter().map(|m| m.seq),
        )));
        arrays.push(Arc::new(
            TimestampMicrosecondArray::from_iter(self.meta.iter().map(|m| m.commit_micros))
                .with_timezone("UTC"),
        ));
        arrays.push(Arc::new(Int64Array::from_iter(
            self.meta.iter().map(|m| m.xid.map(i64::from)),
        )));
        let rows = RecordBatch::try_new(schema, arrays)
            .and_then(|rows| match apart.is_empty() {
                true => Ok(rows),
                false => filter_record_batch(&rows, &apart.kept(rows.num_rows())),
            })
            .map_err(|e| PgError::Protocol(e.to_string()))?;
        Ok(Finished {
            rows,
            unresolved: apart.renumber(self.unresolved()),
            rejected: apart.records(&self.columns, &self.values, &self.meta),
        })
    }
}

/// The rows of one read, gathered.
#[derive(Debug)]
pub struct Finished {
    /// The rows kept, in order.
    pub rows: RecordBatch,
    /// Cells of those rows that updates left out and no earlier row gives.
    pub unresolved: Vec<CarriedCell>,
    /// The rows set apart, with why.
    pub rejected: Vec<RejectedRow>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> ChangeRows {
        let column = |name: &str| TableColumn {
            name: name.into(),
            type_oid: 25,
            type_modifier: -1,
            not_null: false,
            keep_text: false,
            default: None,
        };
        let mut rows = ChangeRows::new(vec![column("id"), column("v"), column("notes")]);
        rows.set_keys(&[true, false, false]);
        rows
    }

    fn meta(kind: ChangeKind, seq: i64) -> ChangeMeta {
        ChangeMeta {
            kind,
            commit_lsn: 100,
            seq,
            commit_micros: None,
            xid: None,
        }
    }

    fn some(values: &[&str]) -> Vec<Option<String>> {
        values.iter().map(|v| Some((*v).to_string())).collect()
    }

    #[test]
    fn a_value_left_out_across_a_key_change_is_taken_from_the_old_key() {
        // UPDATE t SET v = 'b' WHERE id = 1; UPDATE t SET id = 2 WHERE id = 1; with
        // `notes` TOASTed and untouched, and key 1's row stored before this read.
        let mut rows = rows();
        rows.push_change(
            vec![Some("1".into()), Some("b".into()), None],
            meta(ChangeKind::Update, 1),
            &[2],
            None,
        )
        .unwrap();
        rows.push_change(
            vec![Some("1".into()), None, None],
            meta(ChangeKind::Delete, 2),
            &[],
            None,
        )
        .unwrap();
        rows.push_change(
            vec![Some("2".into()), Some("b".into()), None],
            meta(ChangeKind::Update, 3),
            &[2],
            Some(&[Some("1".into()), None, None]),
        )
        .unwrap();
        let cells = rows.unresolved();
        assert_eq!(cells.len(), 2, "{cells:?}");
        // Both cells come from key 1's stored row: the first under its own key, the
        // second naming the old key (never key 2, which has no row before).
        assert_eq!((cells[0].row, cells[0].key.clone()), (0, None));
        assert_eq!(
            (cells[1].row, cells[1].key.clone()),
            (2, Some(vec!["1".into()]))
        );
    }

    #[test]
    fn a_value_left_out_is_carried_from_the_same_keys_row_before() {
        let mut rows = rows();
        rows.push(some(&["1", "a", "long"]), meta(ChangeKind::Insert, 1))
            .unwrap();
        rows.push_change(
            vec![Some("2".into()), Some("a".into()), None],
            meta(ChangeKind::Update, 2),
            &[2],
            Some(&[Some("1".into()), None, None]),
        )
        .unwrap();
        assert!(rows.unresolved().is_empty());
        let batch = rows.finish().unwrap().rows;
        let notes = batch
            .column(2)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(notes.value(1), "long");
    }
}
