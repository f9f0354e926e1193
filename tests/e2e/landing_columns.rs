//! How the columns of landing Parquet files meet the source's schema: inferred columns
//! are nullable whatever a writer declared, a file with other columns is schema drift,
//! and a file with none of the declared columns, or with a value that does not convert
//! to the declared type, is quarantined, never rows of nulls.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;

use crate::run_examples::json_rows;
use crate::{cdcflow, stderr, stdout};

/// A pipeline whose bronze table `raw` appends the Parquet files of `landing/`,
/// read as `read_files` gives them (`options` after the format).
fn bronze_pipeline(options: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("pipeline.yaml"), "name: columns\n").expect("write");
    fs::write(
        dir.path().join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'parquet'{options});\n"
        ),
    )
    .expect("write");
    fs::create_dir_all(dir.path().join("landing")).expect("mkdir");
    dir
}

/// A Parquet file of the named columns, each required (`false`) or nullable.
fn land(path: &Path, columns: Vec<(&str, ArrayRef, bool)>) {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, values, nullable)| {
                Field::new(*name, values.data_type().clone(), *nullable)
            })
            .collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        columns.into_iter().map(|(_, values, _)| values).collect(),
    )
    .expect("batch");
    let mut w = ArrowWriter::try_new(fs::File::create(path).expect("create"), schema, None)
        .expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
}

fn ints(values: Vec<i64>) -> ArrayRef {
    Arc::new(Int64Array::from(values))
}

fn texts(values: Vec<Option<&str>>) -> ArrayRef {
    Arc::new(StringArray::from(values))
}

/// Runs the pipeline, which must succeed; its summary.
fn run(dir: &Path) -> String {
    let out = cdcflow(&["run", "-p", dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

fn rows(dir: &Path, sql: &str) -> Vec<serde_json::Value> {
    json_rows(dir.to_str().expect("utf-8"), sql)
}

#[test]
fn inferred_parquet_columns_are_nullable_and_a_file_with_other_columns_is_schema_drift() {
    let dir = bronze_pipeline("");
    let landing = dir.path().join("landing");
    // The first file's writer declared both columns required.
    land(
        &landing.join("1.parquet"),
        vec![
            ("id", ints(vec![1, 2]), false),
            ("name", texts(vec![Some("a"), Some("b")]), false),
        ],
    );
    run(dir.path());
    land(
        &landing.join("2.parquet"),
        vec![
            ("id", ints(vec![3]), false),
            ("name", texts(vec![None]), true),
        ],
    );
    let summary = run(dir.path());
    assert!(!summary.contains("quarantined"), "{summary}");
    // Other names: new columns reach bronze and the run says so; the file's rows
    // carry their values, not nulls.
    land(
        &landing.join("3.parquet"),
        vec![
            ("key", ints(vec![7]), false),
            ("label", texts(vec![Some("x")]), false),
        ],
    );
    let summary = run(dir.path());
    assert!(
        summary.contains("schema change: `raw` gained column(s) `key` Int64, `label` Utf8"),
        "{summary}"
    );
    assert!(!summary.contains("quarantined"), "{summary}");
    assert_eq!(
        rows(
            dir.path(),
            "SELECT id, name, key, label FROM raw ORDER BY id, key"
        ),
        vec![
            serde_json::json!({"id": 1, "name": "a", "key": null, "label": null}),
            serde_json::json!({"id": 2, "name": "b", "key": null, "label": null}),
            serde_json::json!({"id": 3, "name": null, "key": null, "label": null}),
            serde_json::json!({"id": null, "name": null, "key": 7, "label": "x"}),
        ]
    );
}

#[test]
fn a_parquet_file_with_none_of_the_declared_columns_or_an_unconvertible_value_is_quarantined_not_read_as_nulls()
 {
    let dir = bronze_pipeline(", schema => 'id BIGINT, name STRING'");
    let landing = dir.path().join("landing");
    land(
        &landing.join("1.parquet"),
        vec![
            ("id", ints(vec![1]), true),
            ("name", texts(vec![Some("a")]), true),
        ],
    );
    // A column the schema lacks is left out, as a JSON field the schema lacks is; a
    // declared column the file lacks is null, as a JSON field a record lacks is.
    land(
        &landing.join("2.parquet"),
        vec![("id", ints(vec![2]), true), ("extra", ints(vec![0]), true)],
    );
    land(
        &landing.join("3.parquet"),
        vec![
            ("key", ints(vec![7]), true),
            ("label", texts(vec![Some("x")]), true),
        ],
    );
    // A value that does not convert to the declared type is not read as null either.
    land(
        &landing.join("4.parquet"),
        vec![
            ("id", texts(vec![Some("4"), Some("four")]), true),
            ("name", texts(vec![Some("d"), Some("e")]), true),
        ],
    );
    let summary = run(dir.path());
    assert!(
        summary.contains("2 malformed record(s) quarantined in `raw__quarantine`"),
        "{summary}"
    );
    assert_eq!(
        rows(dir.path(), "SELECT id, name FROM raw ORDER BY id"),
        vec![
            serde_json::json!({"id": 1, "name": "a"}),
            serde_json::json!({"id": 2, "name": null}),
        ]
    );
    let quarantined = rows(
        dir.path(),
        "SELECT file, line, error FROM raw__quarantine ORDER BY file",
    );
    assert_eq!(quarantined.len(), 2, "{quarantined:?}");
    assert_eq!(quarantined[1]["file"], "landing/4.parquet");
    let error = quarantined[1]["error"].as_str().expect("error text");
    assert!(error.contains("four"), "{error}");
    assert_eq!(quarantined[0]["file"], "landing/3.parquet");
    assert_eq!(quarantined[0]["line"], serde_json::Value::Null);
    let error = quarantined[0]["error"].as_str().expect("error text");
    assert!(
        error.contains("none of the schema's columns (`id`, `name`) is in the file, whose columns are `key`, `label`"),
        "{error}"
    );
}
