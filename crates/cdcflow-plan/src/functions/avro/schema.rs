//! The reader schema of `from_avro`: the Avro schema (JSON) the flow writes, and the
//! Arrow type of its values, as Spark gives them.
//!
//! arrow-avro decodes records; a schema that is not a record (`"string"`, an array, a
//! union) is read as a record of one field named `value`, which Avro encodes with the
//! same bytes as the value alone (a record is its fields' encodings one after another),
//! and the field is taken out again.

use std::sync::Arc;

use arrow_avro::reader::ReaderBuilder;
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use datafusion::arrow::array::{ArrayRef, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};

/// The name of the record a schema that is not one is wrapped in.
const WRAPPER: &str = "cdcflow_from_avro_value";

#[derive(Debug, Clone)]
pub(super) struct ReaderSchema {
    /// The schema as decoded: a record (wrapped when the flow's is not one).
    json: String,
    wrapped: bool,
}

impl ReaderSchema {
    /// The reader schema of the flow's text; an error says what is wrong with it.
    pub fn parse(text: &str) -> Result<ReaderSchema, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let record = value.get("type").and_then(|t| t.as_str()) == Some("record");
        let reader = ReaderSchema {
            json: if record {
                text.to_string()
            } else {
                wrap(&value)
            },
            wrapped: !record,
        };
        reader.arrow_type()?;
        Ok(reader)
    }

    pub fn json(&self) -> &str {
        &self.json
    }

    /// A writer schema as the decoder reads it beside this reader schema.
    pub fn writer_json(&self, writer: &str) -> String {
        let value: Option<serde_json::Value> = serde_json::from_str(writer).ok();
        match (self.wrapped, value) {
            (true, Some(v)) if v.get("type").and_then(|t| t.as_str()) != Some("record") => wrap(&v),
            _ => writer.to_string(),
        }
    }

    /// The type of `from_avro`'s result: the record's struct (or the wrapped value's
    /// type), with Spark's types where Arrow's reader chose others.
    pub fn arrow_type(&self) -> Result<DataType, String> {
        let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
        store
            .set(Fingerprint::Id(0), AvroSchema::new(self.json.clone()))
            .map_err(|e| e.to_string())?;
        let decoder = ReaderBuilder::new()
            .with_reader_schema(AvroSchema::new(self.json.clone()))
            .with_writer_schema_store(store)
            .build_decoder()
            .map_err(|e| e.to_string())?;
        let fields = decoder.schema().fields().clone();
        let decoded = match self.wrapped {
            true => fields[0].data_type().clone(),
            false => DataType::Struct(fields),
        };
        Ok(spark_type(&decoded))
    }

    /// The values of decoded records: the records, or their wrapped field.
    pub fn unwrap(&self, records: StructArray) -> ArrayRef {
        match self.wrapped {
            true => Arc::clone(records.column(0)),
            false => Arc::new(records),
        }
    }
}

fn wrap(schema: &serde_json::Value) -> String {
    serde_json::json!({
        "type": "record",
        "name": WRAPPER,
        "fields": [{"name": "value", "type": schema}],
    })
    .to_string()
}

/// Spark's type for what arrow-avro decodes: enums as strings (not dictionaries),
/// fixed as binary, timestamps in microseconds, every field nullable (a value that is
/// not a record gives a null).
fn spark_type(t: &DataType) -> DataType {
    let field = |f: &Field| {
        Field::new(f.name(), spark_type(f.data_type()), true).with_metadata(Default::default())
    };
    match t {
        DataType::Dictionary(_, v) => spark_type(v),
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary | DataType::FixedSizeBinary(_) => {
            DataType::Binary
        }
        DataType::Timestamp(_, tz) => {
            DataType::Timestamp(TimeUnit::Microsecond, tz.as_ref().map(|_| Arc::from("UTC")))
        }
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(|f| field(f)).collect::<Fields>())
        }
        DataType::List(f) | DataType::LargeList(f) => DataType::List(Arc::new(field(f))),
        DataType::Map(entries, sorted) => DataType::Map(
            Arc::new(Field::new(
                entries.name(),
                match entries.data_type() {
                    DataType::Struct(kv) => DataType::Struct(
                        kv.iter()
                            .enumerate()
                            // A map's keys are never null.
                            .map(|(i, f)| Field::new(f.name(), spark_type(f.data_type()), i > 0))
                            .collect::<Fields>(),
                    ),
                    other => spark_type(other),
                },
                false,
            )),
            *sorted,
        ),
        other => other.clone(),
    }
}
