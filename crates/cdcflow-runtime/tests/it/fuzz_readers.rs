//! The landing file readers never panic: arbitrary bytes, and mutations of good JSON,
//! CSV and Parquet files, are read, quarantined or refused with an error.

use std::collections::BTreeMap;
use std::sync::Arc;

use cdcflow_plan::read_files::{FileFormat, ReadFiles};
use cdcflow_runtime::files::read_file;
use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use proptest::prelude::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(
                datafusion::arrow::datatypes::TimeUnit::Microsecond,
                Some("UTC".into()),
            ),
            true,
        ),
    ]))
}

fn source(format: FileFormat, dir: &std::path::Path) -> ReadFiles {
    ReadFiles {
        table: "t".into(),
        path_text: "landing".into(),
        path: dir.to_path_buf(),
        format,
        declared_schema: Some(schema()),
        options: BTreeMap::new(),
        streaming: true,
        auto_loader: false,
        schema_hints: None,
        inferred_schema: None,
        metadata: false,
        landing: true,
        span: cdcflow_plan::Span::empty(),
    }
}

fn good(format: FileFormat) -> Vec<u8> {
    match format {
        FileFormat::Json => b"{\"id\": 1, \"name\": \"a\", \"ts\": \"2024-01-01T00:00:00Z\"}\n{\"id\": 2, \"name\": null, \"ts\": null}\n".to_vec(),
        FileFormat::Csv => b"id,name,ts\n1,a,2024-01-01T00:00:00Z\n2,,\n".to_vec(),
        FileFormat::Text => b"{\"op\":\"c\"}\nnull\n\xc3\xa9t\xc3\xa9\n".to_vec(),
        FileFormat::Parquet => {
            let s = Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("name", DataType::Utf8, true),
            ]));
            let batch = RecordBatch::try_new(
                Arc::clone(&s),
                vec![Arc::new(Int64Array::from(vec![1, 2])), Arc::new(StringArray::from(vec![Some("a"), None]))],
            )
            .expect("batch");
            let mut out = Vec::new();
            let mut w = ArrowWriter::try_new(&mut out, s, None).expect("writer");
            w.write(&batch).expect("write");
            w.close().expect("close");
            out
        }
    }
}

fn format() -> impl Strategy<Value = FileFormat> {
    prop_oneof![
        Just(FileFormat::Json),
        Just(FileFormat::Csv),
        Just(FileFormat::Parquet),
        Just(FileFormat::Text)
    ]
}

fn read(format: FileFormat, bytes: &[u8]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f");
    std::fs::write(&path, bytes).expect("write");
    let _ = read_file(&source(format, dir.path()), &schema(), &path);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(format in format(), bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        read(format, &bytes);
    }

    #[test]
    fn mutated_good_files_never_panic(
        format in format(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut bytes = good(format);
        for (at, byte, kind) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match kind {
                0 => bytes[i] = byte,
                1 => { bytes.remove(i); }
                _ => bytes.truncate(i),
            }
        }
        read(format, &bytes);
    }
}
