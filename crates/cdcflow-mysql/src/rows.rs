//! The rows a read yields: the table's columns, then the change metadata (kind, binary
//! log position, place in the transaction, commit time, log file). Values are
//! gathered as text ([`crate::values`]) and turned into one Arrow batch at the end; a
//! row with a value its column's type has none of is set apart with the reason.

use std::collections::BTreeMap;
use std::sync::Arc;

use cdcflow_plan::read_mysql::change_schema;
use cdcflow_postgres::ChangeKind;
use cdcflow_postgres::types::TextColumn;
use cdcflow_runtime::sources::RejectedRow;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::filter_record_batch;
use mysql_async::Value;

use crate::columns::{TableColumn, table_schema};
use crate::connection::MysqlError;
use crate::values::text;

/// Where a change sits in the binary log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeMeta {
    pub kind: ChangeKind,
    /// The end of its transaction ([`crate::position::BinlogPos::order`]); the
    /// snapshot's position for snapshot rows.
    pub position: i64,
    /// Its place within the transaction, from 1 (0 for snapshot rows, so that a change
    /// that ends at the snapshot's position still sorts after them).
    pub seq: i64,
    pub commit_micros: Option<i64>,
    pub file: Arc<str>,
}

/// Rows gathered as text.
#[derive(Debug)]
pub struct ChangeRows {
    columns: Vec<TableColumn>,
    values: Vec<TextColumn>,
    meta: Vec<ChangeMeta>,
    /// Rows set apart, with their reasons.
    apart: BTreeMap<usize, Vec<String>>,
}

/// The rows of one read.
#[derive(Debug)]
pub struct Finished {
    pub rows: RecordBatch,
    pub rejected: Vec<RejectedRow>,
}

impl ChangeRows {
    pub fn new(columns: Vec<TableColumn>) -> Self {
        let values = vec![TextColumn::default(); columns.len()];
        Self {
            columns,
            values,
            meta: vec![],
            apart: BTreeMap::new(),
        }
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

    /// A row: one value per column, in the table's order (NULL for every column of a
    /// truncate).
    pub fn push(&mut self, values: &[Value], meta: ChangeMeta) {
        let row = self.meta.len();
        for (i, column) in self.columns.iter().enumerate() {
            let value = values.get(i).unwrap_or(&Value::NULL);
            let cell = match text(column, value) {
                Ok(cell) => cell,
                Err(why) => {
                    self.apart.entry(row).or_default().push(why);
                    None
                }
            };
            if let Some(column) = self.values.get_mut(i) {
                column.values.push(cell);
            }
        }
        self.meta.push(meta);
    }

    /// The rows kept as one batch, and those set apart.
    pub fn finish(mut self) -> Result<Finished, MysqlError> {
        let schema = change_schema(&table_schema(&self.columns));
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for (column, values) in self.columns.iter().zip(&self.values) {
            let converted = values
                .convert(&column.name, &column.arrow_type())
                .map_err(|e| MysqlError::new(e.to_string(), "report the column's type"))?;
            for (row, why) in converted.rejected {
                self.apart.entry(row).or_default().push(why);
            }
            arrays.push(converted.array);
        }
        arrays.push(Arc::new(StringArray::from_iter_values(
            self.meta.iter().map(|m| m.kind.as_str()),
        )));
        arrays.push(Arc::new(Int64Array::from_iter_values(
            self.meta.iter().map(|m| m.position),
        )));
        arrays.push(Arc::new(Int64Array::from_iter_values(
            self.meta.iter().map(|m| m.seq),
        )));
        arrays.push(Arc::new(
            TimestampMicrosecondArray::from_iter(self.meta.iter().map(|m| m.commit_micros))
                .with_timezone("UTC"),
        ));
        arrays.push(Arc::new(StringArray::from_iter_values(
            self.meta.iter().map(|m| m.file.as_ref()),
        )));
        let rows = RecordBatch::try_new(schema, arrays)
            .and_then(|rows| match self.apart.is_empty() {
                true => Ok(rows),
                false => {
                    let kept = BooleanArray::from_iter(
                        (0..rows.num_rows()).map(|r| Some(!self.apart.contains_key(&r))),
                    );
                    filter_record_batch(&rows, &kept)
                }
            })
            .map_err(|e| MysqlError::new(e.to_string(), "report this as a bug"))?;
        let rejected = self.records();
        Ok(Finished { rows, rejected })
    }

    /// Each row set apart as a JSON object of its values (as text) and its change
    /// metadata, with its reasons.
    fn records(&self) -> Vec<RejectedRow> {
        self.apart
            .iter()
            .map(|(row, reasons)| {
                let mut record = serde_json::Map::new();
                for (column, values) in self.columns.iter().zip(&self.values) {
                    let value = values.values.get(*row).cloned().flatten();
                    record.insert(
                        column.name.clone(),
                        value.map_or(serde_json::Value::Null, serde_json::Value::String),
                    );
                }
                if let Some(meta) = self.meta.get(*row) {
                    record.insert("_change_type".into(), meta.kind.as_str().into());
                    record.insert("_binlog_position".into(), meta.position.into());
                    record.insert("_change_seq".into(), meta.seq.into());
                    record.insert("_binlog_file".into(), meta.file.as_ref().into());
                }
                RejectedRow {
                    record: serde_json::Value::Object(record).to_string(),
                    error: reasons.join("; "),
                }
            })
            .collect()
    }
}
