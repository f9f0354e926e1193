//! A snapshot's version: one value of the flow's version type, held as a one-row batch
//! (the relation `last_snapshot_version()` and `current_snapshot_version()` give),
//! compared in the type's order, and kept in the batch's offsets as JSON.

use std::cmp::Ordering;
use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::json::{ArrayWriter, ReaderBuilder};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::arrow::util::display::array_value_to_string;

use crate::RunError;

/// Where a batch's offsets keep the version of the snapshot it applied.
pub(super) const OFFSETS_KEY: &str = "snapshot_version";

/// One snapshot version.
#[derive(Debug, Clone)]
pub(super) struct Version {
    /// One row, one column.
    pub row: RecordBatch,
}

impl Version {
    /// A periodic snapshot's version: the run's start.
    pub fn run_start(schema: &SchemaRef, now_micros: i64) -> Result<Self, RunError> {
        let array = TimestampMicrosecondArray::from(vec![now_micros]).with_timezone("UTC");
        Self::of(schema, &(Arc::new(array) as ArrayRef))
    }

    /// The version whose value is `array`'s one element.
    pub fn of(schema: &SchemaRef, array: &ArrayRef) -> Result<Self, RunError> {
        let array = datafusion::arrow::compute::cast(array, schema.field(0).data_type())?;
        Ok(Self {
            row: RecordBatch::try_new(Arc::clone(schema), vec![array])?,
        })
    }

    /// The value, as the user would write it.
    pub fn display(&self) -> String {
        array_value_to_string(self.row.column(0), 0).unwrap_or_else(|_| "?".into())
    }

    /// The value as JSON, for the batch's offsets.
    pub fn to_json(&self) -> Result<serde_json::Value, RunError> {
        let mut writer = ArrayWriter::new(Vec::new());
        writer.write(&self.row)?;
        writer.finish()?;
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&writer.into_inner())
            .map_err(|e| RunError::internal(format!("a snapshot version as JSON: {e}")))?;
        rows.into_iter()
            .next()
            .ok_or_else(|| RunError::internal("a snapshot version wrote no JSON"))
    }

    /// The version kept as `json` by [`Version::to_json`], of `schema`.
    pub fn from_json(schema: &SchemaRef, json: &serde_json::Value) -> Result<Self, RunError> {
        let text = serde_json::to_vec(json)
            .map_err(|e| RunError::internal(format!("a snapshot version as JSON: {e}")))?;
        let mut reader = ReaderBuilder::new(Arc::clone(schema)).build(Cursor::new(text))?;
        let row = reader
            .next()
            .transpose()?
            .filter(|b| b.num_rows() == 1)
            .ok_or_else(|| {
                RunError::input(format!(
                    "the last snapshot version recorded, {json}, is not a {}",
                    schema.field(0).data_type()
                ))
                .with_help("the version query's type changed since; run `cdcflow run --full-refresh TABLE` to apply the snapshots again")
            })?;
        Ok(Self { row })
    }

    /// How `self` orders against `other`, in the version type's order.
    pub fn cmp(&self, other: &Version) -> Result<Ordering, RunError> {
        let field = self.row.schema().field(0).clone();
        let converter = RowConverter::new(vec![SortField::new(field.data_type().clone())])?;
        let a = converter.convert_columns(&[Arc::clone(self.row.column(0))])?;
        let b = converter.convert_columns(&[Arc::clone(other.row.column(0))])?;
        Ok(a.row(0).cmp(&b.row(0)))
    }
}
