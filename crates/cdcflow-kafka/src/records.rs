//! Kafka records as Arrow rows with the columns Databricks gives them
//! ([`cdcflow_plan::read_kafka::record_schema`]).

use std::sync::Arc;

use cdcflow_plan::read_kafka::{header_fields, record_schema};
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, Int32Array, Int64Array, ListBuilder, RecordBatch, StringArray,
    StringBuilder, StructBuilder, TimestampMicrosecondArray,
};
use datafusion::arrow::error::ArrowError;
use rdkafka::Message;
use rdkafka::message::{Headers, Timestamp};

/// One record as read, copied out of the client's buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Milliseconds since the epoch; `None` when the record has none.
    pub timestamp_millis: Option<i64>,
    /// Spark's `timestampType`: 0 the producer's time (CreateTime), 1 the broker's
    /// (LogAppendTime), -1 none.
    pub timestamp_type: i32,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Record {
    /// The record of a message the client delivered; its headers only when asked for
    /// (`includeHeaders`: copying them is work on every record).
    pub fn of(m: &impl Message, with_headers: bool) -> Record {
        let (timestamp_millis, timestamp_type) = match m.timestamp() {
            Timestamp::CreateTime(t) => (Some(t), 0),
            Timestamp::LogAppendTime(t) => (Some(t), 1),
            Timestamp::NotAvailable => (None, -1),
        };
        let headers = m
            .headers()
            .filter(|_| with_headers)
            .map(|h| {
                h.iter()
                    .map(|e| (e.key.to_string(), e.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        Record {
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            timestamp_millis,
            timestamp_type,
            headers,
        }
    }
}

/// The records of one partition of a topic, in offset order.
pub struct PartitionRecords<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub records: &'a [Record],
}

/// Rows per batch: DataFusion's batch size. A scan hands on a larger batch as slices of
/// this many rows, and a slice's `key` and `value` buffers are the whole batch's, which
/// `CAST(value AS STRING)` validates as UTF-8 whole, once per slice: a read of n
/// records would check n²/8,192 bytes.
const ROWS_PER_BATCH: usize = 8192;

/// The rows of the records of several partitions, in batches of [`ROWS_PER_BATCH`]
/// rows each with buffers of their own.
pub fn to_batches(
    parts: &[PartitionRecords<'_>],
    include_headers: bool,
) -> Result<Vec<RecordBatch>, ArrowError> {
    let all: Vec<(&PartitionRecords<'_>, &Record)> = parts
        .iter()
        .flat_map(|p| p.records.iter().map(move |r| (p, r)))
        .collect();
    if all.is_empty() {
        return Ok(vec![to_batch(&[], include_headers)?]);
    }
    all.chunks(ROWS_PER_BATCH)
        .map(|rows| to_batch(rows, include_headers))
        .collect()
}

/// One batch of `rows` (each with its partition).
fn to_batch(
    rows: &[(&PartitionRecords<'_>, &Record)],
    include_headers: bool,
) -> Result<RecordBatch, ArrowError> {
    let schema = record_schema(include_headers);
    let all = || rows.iter().copied();
    let mut keys = BinaryBuilder::new();
    let mut values = BinaryBuilder::new();
    for (_, r) in all() {
        keys.append_option(r.key.as_deref());
        values.append_option(r.value.as_deref());
    }
    let topics: StringArray = all().map(|(p, _)| Some(p.topic)).collect();
    let partitions: Int32Array = all().map(|(p, _)| Some(p.partition)).collect();
    let offsets: Int64Array = all().map(|(_, r)| Some(r.offset)).collect();
    let timestamps = TimestampMicrosecondArray::from_iter(
        all().map(|(_, r)| r.timestamp_millis.map(|t| t.saturating_mul(1_000))),
    )
    .with_timezone("UTC");
    let timestamp_types: Int32Array = all().map(|(_, r)| Some(r.timestamp_type)).collect();
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
            for (k, v) in &r.headers {
                entry
                    .field_builder::<StringBuilder>(0)
                    .ok_or_else(|| ArrowError::SchemaError("header key".into()))?
                    .append_value(k);
                entry
                    .field_builder::<BinaryBuilder>(1)
                    .ok_or_else(|| ArrowError::SchemaError("header value".into()))?
                    .append_option(v.as_deref());
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
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Int32Type, Int64Type, TimestampMicrosecondType};

    fn record(offset: i64, key: &str, value: Option<&str>) -> Record {
        Record {
            offset,
            key: Some(key.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            timestamp_millis: Some(1_700_000_000_000 + offset),
            timestamp_type: 1,
            headers: vec![("h".to_string(), Some(b"x".to_vec())), ("n".into(), None)],
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
        let batches = to_batches(&parts, true).unwrap();
        assert_eq!(batches.len(), 1);
        let batch = &batches[0];
        assert_eq!(batch.num_rows(), 3);
        let values = batch.column(1).as_binary::<i32>();
        assert_eq!(values.value(0), b"v1");
        assert!(values.is_null(1));
        let offsets = batch.column(4).as_primitive::<Int64Type>();
        assert_eq!(offsets.values().to_vec(), [4, 5, 0]);
        let timestamps = batch.column(5).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(timestamps.value(1), 1_700_000_000_005_000);
        let types = batch.column(6).as_primitive::<Int32Type>();
        assert_eq!(types.values().to_vec(), [1, 1, 1]);
        let headers = batch.column(7).as_list::<i32>();
        assert_eq!(headers.value(2).len(), 2);
        let header = headers.value(2);
        let values = header.as_struct().column(1).as_binary::<i32>();
        assert_eq!(values.value(0), b"x");
        assert!(values.is_null(1));
        assert_eq!(to_batches(&parts, false).unwrap()[0].num_columns(), 7);
    }

    #[test]
    fn many_records_come_in_batches_of_their_own_buffers() {
        let many: Vec<Record> = (0..20_000).map(|i| record(i, "k", Some("value"))).collect();
        let parts = [PartitionRecords {
            topic: "t",
            partition: 0,
            records: &many,
        }];
        let batches = to_batches(&parts, false).unwrap();
        let rows: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(rows, [8192, 8192, 3616]);
        let values = batches[1].column(1).as_binary::<i32>();
        assert_eq!(values.values().len(), 8192 * "value".len());
        let offsets = batches[2].column(4).as_primitive::<Int64Type>();
        assert_eq!(offsets.value(0), 16_384);
    }

    #[test]
    fn the_timestamp_type_is_sparks() {
        use rdkafka::message::OwnedMessage;
        let of = |timestamp| {
            let m = OwnedMessage::new(None, None, "t".into(), timestamp, 0, 7, None);
            let r = Record::of(&m, true);
            (r.timestamp_millis, r.timestamp_type, r.offset)
        };
        assert_eq!(of(Timestamp::CreateTime(5)), (Some(5), 0, 7));
        assert_eq!(of(Timestamp::LogAppendTime(6)), (Some(6), 1, 7));
        assert_eq!(of(Timestamp::NotAvailable), (None, -1, 7));
    }
}
