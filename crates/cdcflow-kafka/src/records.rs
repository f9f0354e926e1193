//! Kafka records as Arrow rows with the columns Databricks gives them
//! ([`cdcflow_plan::read_kafka::record_schema`]).

use std::sync::Arc;

use cdcflow_plan::read_kafka::{header_fields, record_schema};
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, Int32Array, Int64Array, ListBuilder, RecordBatch, StringArray,
    StringBuilder, StructBuilder, TimestampMicrosecondArray,
};
use datafusion::arrow::error::ArrowError;
use rskafka::record::RecordAndOffset;

/// The records of one partition of a topic, in offset order.
pub struct PartitionRecords<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub records: &'a [RecordAndOffset],
}

/// One batch of rows from the records of several partitions.
pub fn to_batch(
    parts: &[PartitionRecords<'_>],
    include_headers: bool,
) -> Result<RecordBatch, ArrowError> {
    let schema = record_schema(include_headers);
    let all = || {
        parts
            .iter()
            .flat_map(|p| p.records.iter().map(move |r| (p, r)))
    };
    let mut keys = BinaryBuilder::new();
    let mut values = BinaryBuilder::new();
    for (_, r) in all() {
        keys.append_option(r.record.key.as_deref());
        values.append_option(r.record.value.as_deref());
    }
    let topics: StringArray = all().map(|(p, _)| Some(p.topic)).collect();
    let partitions: Int32Array = all().map(|(p, _)| Some(p.partition)).collect();
    let offsets: Int64Array = all().map(|(_, r)| Some(r.offset)).collect();
    let timestamps = TimestampMicrosecondArray::from_iter(
        all().map(|(_, r)| Some(r.record.timestamp.timestamp_micros())),
    )
    .with_timezone("UTC");
    // The client does not say whether a timestamp is the producer's (0, CreateTime)
    // or the broker's (1, LogAppendTime): unknown rather than a guess.
    let timestamp_types = Int32Array::new_null(offsets.len());
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(keys.finish()),
        Arc::new(values.finish()),
        Arc::new(topics),
        Arc::new(partitions),
        Arc::new(offsets),
        Arc::new(timestamps),
        Arc::new(timestamp_types),
    ];
    if include_headers {
        let entry = StructBuilder::new(
            header_fields(),
            vec![
                Box::new(StringBuilder::new()),
                Box::new(BinaryBuilder::new()),
            ],
        );
        let mut headers = ListBuilder::new(entry).with_field(Arc::new(
            datafusion::arrow::datatypes::Field::new_list_field(
                datafusion::arrow::datatypes::DataType::Struct(header_fields()),
                true,
            ),
        ));
        for (_, r) in all() {
            let entry = headers.values();
            for (k, v) in &r.record.headers {
                entry
                    .field_builder::<StringBuilder>(0)
                    .ok_or_else(|| ArrowError::SchemaError("header key".into()))?
                    .append_value(k);
                entry
                    .field_builder::<BinaryBuilder>(1)
                    .ok_or_else(|| ArrowError::SchemaError("header value".into()))?
                    .append_value(v);
                entry.append(true);
            }
            headers.append(true);
        }
        columns.push(Arc::new(headers.finish()));
    }
    RecordBatch::try_new(schema, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use datafusion::arrow::array::{Array, AsArray};
    use rskafka::record::Record;

    fn record(offset: i64, key: &str, value: Option<&str>) -> RecordAndOffset {
        RecordAndOffset {
            record: Record {
                key: Some(key.as_bytes().to_vec()),
                value: value.map(|v| v.as_bytes().to_vec()),
                headers: [("h".to_string(), b"x".to_vec())].into(),
                timestamp: Utc.timestamp_millis_opt(1_700_000_000_000).unwrap(),
            },
            offset,
        }
    }

    #[test]
    fn records_become_the_documented_columns() {
        let a = [record(4, "k1", Some("v1")), record(5, "k2", None)];
        let b = [record(0, "k3", Some("v3"))];
        let parts = [
            PartitionRecords {
                topic: "t",
                partition: 0,
                records: &a,
            },
            PartitionRecords {
                topic: "t",
                partition: 1,
                records: &b,
            },
        ];
        let batch = to_batch(&parts, true).unwrap();
        assert_eq!(batch.num_rows(), 3);
        let values = batch.column(1).as_binary::<i32>();
        assert_eq!(values.value(0), b"v1");
        assert!(values.is_null(1));
        let offsets = batch
            .column(4)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(offsets.values().to_vec(), [4, 5, 0]);
        let headers = batch.column(7).as_list::<i32>();
        assert_eq!(headers.value(2).len(), 1);
        assert_eq!(to_batch(&parts, false).unwrap().num_columns(), 7);
    }
}
