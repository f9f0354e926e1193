//! A snapshot's version: one value of the flow's version type, held as a one-row batch
//! (the relation `last_snapshot_version()` and `current_snapshot_version()` give),
//! compared in the type's order, and kept in the batch's offsets as that batch in
//! Arrow's IPC format (hex), so that every type comes back exactly.

use std::cmp::Ordering;
use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, TimestampMicrosecondArray};
use datafusion::arrow::compute::cast_with_options;
use datafusion::arrow::datatypes::{SchemaRef, TimestampMicrosecondType};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::arrow::util::display::array_value_to_string;

use super::STRICT;
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
        let array = cast_with_options(array, schema.field(0).data_type(), &STRICT)?;
        Ok(Self {
            row: RecordBatch::try_new(Arc::clone(schema), vec![array])?,
        })
    }

    /// The value, as the user would write it.
    pub fn display(&self) -> String {
        array_value_to_string(self.row.column(0), 0).unwrap_or_else(|_| "?".into())
    }

    /// The value for the batch's offsets: the batch in Arrow IPC (hex), and as shown.
    pub fn to_json(&self) -> Result<serde_json::Value, RunError> {
        let mut bytes = Vec::new();
        let mut writer = StreamWriter::try_new(&mut bytes, &self.row.schema())?;
        writer.write(&self.row)?;
        writer.finish()?;
        drop(writer);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(serde_json::json!({ "arrow_ipc": hex, "shown": self.display() }))
    }

    /// The version kept as `json` by [`Version::to_json`], of `schema`.
    pub fn from_json(schema: &SchemaRef, json: &serde_json::Value) -> Result<Self, RunError> {
        let changed = || {
            RunError::input(format!(
                "the last snapshot version recorded, {}, is not a {}",
                json.get("shown").unwrap_or(json),
                schema.field(0).data_type()
            ))
            .with_help("the version query's type changed since; run `cdcflow run --full-refresh TABLE` to apply the snapshots again")
        };
        let hex = json
            .get("arrow_ipc")
            .and_then(|h| h.as_str())
            .ok_or_else(changed)?;
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(changed)?;
        let mut reader = StreamReader::try_new(Cursor::new(bytes), None)?;
        let row = reader.next().transpose()?.ok_or_else(changed)?;
        if row.num_rows() != 1 || row.schema().field(0).data_type() != schema.field(0).data_type() {
            return Err(changed());
        }
        Ok(Self {
            row: RecordBatch::try_new(Arc::clone(schema), row.columns().to_vec())?,
        })
    }

    /// A periodic version one microsecond after this one.
    pub fn micros_after(&self) -> Result<Self, RunError> {
        let micros = self
            .row
            .column(0)
            .as_primitive_opt::<TimestampMicrosecondType>()
            .map(|a| a.value(0))
            .ok_or_else(|| {
                RunError::internal("a periodic snapshot version that is no timestamp")
            })?;
        Self::run_start(&self.row.schema(), micros + 1)
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

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Decimal128Array, Int32Array, StringArray, StructArray};
    use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema};

    use super::*;

    fn schema(t: DataType) -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("version", t, false)]))
    }

    #[test]
    fn every_version_type_comes_back_from_the_offsets_exactly_and_in_order() {
        let fields = Fields::from(vec![
            Field::new("day", DataType::Int32, false),
            Field::new("path", DataType::Utf8, false),
        ]);
        let structs = |day: i32, path: &str| -> ArrayRef {
            Arc::new(StructArray::new(
                fields.clone(),
                vec![
                    Arc::new(Int32Array::from(vec![day])),
                    Arc::new(StringArray::from(vec![path])),
                ],
                None,
            ))
        };
        let decimal = |v: i128| -> ArrayRef {
            Arc::new(
                Decimal128Array::from(vec![v])
                    .with_precision_and_scale(38, 6)
                    .expect("decimal"),
            )
        };
        let cases: Vec<(DataType, ArrayRef, ArrayRef)> = vec![
            (
                DataType::Struct(fields.clone()),
                structs(2, "b.csv"),
                structs(10, "a.csv"),
            ),
            (
                DataType::Decimal128(38, 6),
                decimal(12_345_678_901_234_567_890_123),
                decimal(12_345_678_901_234_567_890_124),
            ),
        ];
        for (t, earlier, later) in cases {
            let s = schema(t.clone());
            let (a, b) = (
                Version::of(&s, &earlier).expect("a"),
                Version::of(&s, &later).expect("b"),
            );
            let back = Version::from_json(&s, &a.to_json().expect("json")).expect("back");
            assert_eq!(back.row, a.row, "{t}");
            assert_eq!(back.cmp(&b).expect("cmp"), Ordering::Less, "{t}");
        }
        let s = schema(DataType::Timestamp(
            datafusion::arrow::datatypes::TimeUnit::Microsecond,
            Some("UTC".into()),
        ));
        let t = Version::run_start(&s, 1_704_067_200_000_000).expect("ts");
        let back = Version::from_json(&s, &t.to_json().expect("json")).expect("back");
        assert_eq!(back.display(), "2024-01-01T00:00:00Z");
        assert_eq!(
            t.micros_after().expect("after").cmp(&t).expect("cmp"),
            Ordering::Greater
        );
        // A version of another type than the flow's now is refused, naming the fix.
        let err = Version::from_json(&schema(DataType::Int64), &t.to_json().expect("json"))
            .expect_err("type changed");
        assert!(err.to_string().contains("is not a Int64"), "{err}");
    }
}
