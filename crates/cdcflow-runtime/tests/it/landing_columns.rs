//! A landing Parquet file whose columns the source's schema does not list: new columns
//! of an inferred schema make the file wait for a run that infers them; a declared
//! schema reads the columns it names.

use std::collections::BTreeMap;
use std::sync::Arc;

use cdcflow_plan::read_files::{FileFormat, ReadFiles};
use cdcflow_runtime::files::read_file;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;

fn id_name() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// A `read_files` source over `dir` whose schema is `schema`, declared or inferred
/// (as the pipeline's load left it).
fn source(dir: &std::path::Path, schema: SchemaRef, declared: bool) -> ReadFiles {
    ReadFiles {
        table: "t".into(),
        path_text: "landing".into(),
        path: dir.to_path_buf(),
        format: FileFormat::Parquet,
        declared_schema: declared.then(|| Arc::clone(&schema)),
        options: BTreeMap::new(),
        streaming: true,
        auto_loader: false,
        schema_hints: None,
        inferred_schema: (!declared).then_some(schema),
        metadata: false,
        landing: true,
        span: cdcflow_plan::Span::empty(),
    }
}

/// A Parquet file with `id`, `name` and `email`, one row.
fn with_email(dir: &std::path::Path) -> std::path::PathBuf {
    let batch = RecordBatch::try_from_iter(vec![
        ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("name", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
        (
            "email",
            Arc::new(StringArray::from(vec!["a@x"])) as ArrayRef,
        ),
    ])
    .expect("batch");
    let path = dir.join("1.parquet");
    let file = std::fs::File::create(&path).expect("create");
    let mut w = ArrowWriter::try_new(file, batch.schema(), None).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    path
}

#[test]
fn a_parquet_file_with_columns_an_inferred_schema_lacks_waits_for_a_run_that_infers_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = with_email(dir.path());
    let read = read_file(&source(dir.path(), id_name(), false), &id_name(), &path).expect("read");
    assert_eq!(read.new_columns, ["email"]);
    assert!(read.batches.is_empty(), "read without its new column");
    assert!(read.bad.is_empty(), "{:?}", read.bad);
}

#[test]
fn a_declared_schema_reads_the_columns_it_names_from_a_parquet_file_with_more() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = with_email(dir.path());
    let read = read_file(&source(dir.path(), id_name(), true), &id_name(), &path).expect("read");
    assert!(read.new_columns.is_empty());
    assert_eq!(read.batches.len(), 1);
    assert_eq!(read.batches[0].schema(), id_name());
    assert_eq!(read.batches[0].num_rows(), 1);
}
