//! `PARTITIONED BY` and `CLUSTER BY` as Delta readers see them: the partition columns
//! are in the log and the folder names, not in the files; an independent reader reads
//! the same rows and prunes on them; clustered files are sorted; a changed
//! partitioning needs a full refresh of a streaming table, and a materialized view
//! takes it at once. The rows themselves are the golden case `tests/run/partitioned_tables`.

use std::fs;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::{Array, StringArray};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::run_examples::{json_rows, python_json, python_with_deltalake};
use crate::{cdcflow, repo, stderr, stdout};

const CASE: &str = "tests/run/partitioned_tables";

/// The case's pipeline in a temporary folder, run with its first `steps` landing batches.
fn case_run(steps: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let case = repo().join(CASE);
    for f in ["pipeline.yaml", "flows.sql"] {
        fs::copy(case.join(f), dir.path().join(f)).expect("copy");
    }
    let landing = dir.path().join("landing");
    fs::create_dir_all(&landing).expect("mkdir");
    for step in 1..=steps {
        let from = case.join(format!("steps/{step}/files/landing"));
        for entry in fs::read_dir(from).expect("landing batch") {
            let entry = entry.expect("entry");
            fs::copy(entry.path(), landing.join(entry.file_name())).expect("copy");
        }
        run_ok(dir.path(), &[]);
    }
    dir
}

fn run_ok(dir: &Path, extra: &[&str]) -> String {
    let mut args = vec!["run", "-p", dir.to_str().expect("utf-8")];
    args.extend(extra);
    let out = cdcflow(&args);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

/// Every action of every commit of the table at `table`, in order.
fn log_actions(table: &Path) -> Vec<serde_json::Value> {
    let mut commits: Vec<PathBuf> = fs::read_dir(table.join("_delta_log"))
        .expect("log")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    commits.sort();
    commits
        .iter()
        .flat_map(|c| {
            fs::read_to_string(c)
                .expect("commit")
                .lines()
                .map(|l| serde_json::from_str(l).expect("json action"))
                .collect::<Vec<serde_json::Value>>()
        })
        .collect()
}

fn detail(dir: &Path, table: &str) -> serde_json::Value {
    let rows = json_rows(
        dir.to_str().expect("utf-8"),
        &format!("DESCRIBE DETAIL {table}"),
    );
    rows.into_iter().next().expect("one row")
}

#[test]
fn partition_columns_live_in_the_log_and_folder_names_not_in_the_files() {
    let dir = case_run(2);
    let people = dir.path().join("_storage/tables/people");
    let actions = log_actions(&people);
    let metadata = actions
        .iter()
        .find_map(|a| a.get("metaData"))
        .expect("metaData");
    assert_eq!(
        metadata["partitionColumns"],
        serde_json::json!(["region"]),
        "named as the schema names it (the clause says `Region`)"
    );
    let adds: Vec<&serde_json::Value> = actions.iter().filter_map(|a| a.get("add")).collect();
    assert!(!adds.is_empty());
    for add in &adds {
        let path = add["path"].as_str().expect("path");
        assert!(path.starts_with("region="), "{path}");
        assert!(add["partitionValues"].get("region").is_some(), "{add}");
    }
    assert!(
        adds.iter()
            .any(|a| a["partitionValues"]["region"].is_null()),
        "the null region is a partition of its own"
    );
    assert!(
        adds.iter()
            .any(|a| a["partitionValues"]["region"] == "New York/5"),
        "a value with a space and a slash is kept as it is: {adds:?}"
    );
    // The files hold the other columns only.
    let north = fs::read_dir(people.join("region=north"))
        .expect("the north partition's folder")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "parquet"))
        .expect("a data file");
    let reader = ParquetRecordBatchReaderBuilder::try_new(fs::File::open(&north).expect("open"))
        .expect("parquet");
    let names: Vec<String> = reader
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["id", "name"], "{}", north.display());

    let p = dir.path().to_str().expect("utf-8");
    let north_ids: Vec<serde_json::Value> = json_rows(
        p,
        "SELECT id FROM people WHERE region = 'north' ORDER BY id",
    )
    .into_iter()
    .map(|r| r["id"].clone())
    .collect();
    assert_eq!(north_ids, [4, 5]);
    assert_eq!(
        detail(dir.path(), "people")["partitionColumns"],
        serde_json::json!(["region"])
    );
    assert_eq!(
        detail(dir.path(), "people")["clusteringColumns"],
        serde_json::json!([])
    );
    assert_eq!(
        detail(dir.path(), "by_name")["clusteringColumns"],
        serde_json::json!(["name"])
    );
    assert_eq!(
        detail(dir.path(), "by_name")["partitionColumns"],
        serde_json::json!([])
    );
}

#[test]
fn an_independent_delta_reader_reads_the_partitioned_table_and_prunes_on_it() {
    let python = python_with_deltalake();
    let dir = case_run(2);
    let table = dir.path().join("_storage/tables/people");
    let script = r#"
import json, os, sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
t = DeltaTable(sys.argv[1])
q = QueryBuilder().register("t", t)
rows = pa.table(q.execute("SELECT id, name, region FROM t ORDER BY id")).to_pylist()
south = pa.table(q.execute("SELECT id FROM t WHERE region = 'south'")).to_pylist()
files = t.file_uris([("region", "=", "New York/5")])
print(json.dumps({"rows": rows, "south": south, "new_york_files": len(files),
                  "partitions": t.metadata().partition_columns}))
sys.stdout.flush()
os._exit(0)
"#;
    let theirs = python_json(&python, script, &table);
    let ours = json_rows(
        dir.path().to_str().expect("utf-8"),
        "SELECT id, name, region FROM people ORDER BY id",
    );
    assert_eq!(theirs["rows"], serde_json::Value::Array(ours));
    assert_eq!(theirs["south"], serde_json::json!([{"id": 1}]));
    assert_eq!(theirs["partitions"], serde_json::json!(["region"]));
    assert!(
        theirs["new_york_files"].as_u64().is_some_and(|n| n >= 1),
        "{theirs}"
    );
}

#[test]
fn a_clustered_tables_files_are_sorted_by_its_clustering_columns() {
    let dir = case_run(2);
    let table = dir.path().join("_storage/tables/by_name");
    let mut files = 0;
    for add in log_actions(&table).iter().filter_map(|a| a.get("add")) {
        let path = table.join(add["path"].as_str().expect("path"));
        let reader = ParquetRecordBatchReaderBuilder::try_new(fs::File::open(&path).expect("open"))
            .expect("parquet")
            .build()
            .expect("reader");
        let mut names: Vec<String> = Vec::new();
        for batch in reader {
            let batch = batch.expect("batch");
            let column = batch
                .column_by_name("name")
                .expect("name column")
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("strings")
                .clone();
            names.extend((0..column.len()).map(|i| column.value(i).to_string()));
        }
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "{}", path.display());
        files += 1;
    }
    assert!(files > 0);
}

#[test]
fn a_changed_partitioning_needs_a_full_refresh_of_an_append_table_and_none_elsewhere() {
    let dir = case_run(1);
    let p = dir.path().to_str().expect("utf-8");
    let flows = dir.path().join("flows.sql");
    let text = fs::read_to_string(&flows).expect("flows");
    let edit = |from: &str, to: &str| {
        let text = fs::read_to_string(&flows).expect("flows");
        assert!(text.contains(from), "{from}");
        fs::write(&flows, text.replace(from, to)).expect("write");
    };
    edit(
        "STREAMING TABLE changes PARTITIONED BY (region)",
        "STREAMING TABLE changes PARTITIONED BY (op)",
    );
    edit(
        "STREAMING TABLE people PARTITIONED BY (Region);",
        "STREAMING TABLE people PARTITIONED BY (name);",
    );
    edit(
        "MATERIALIZED VIEW per_region PARTITIONED BY (region)",
        "MATERIALIZED VIEW per_region",
    );
    assert_ne!(text, fs::read_to_string(&flows).expect("flows"));
    let case = repo().join(CASE);
    fs::copy(
        case.join("steps/2/files/landing/0002.json"),
        dir.path().join("landing/0002.json"),
    )
    .expect("land");
    // An append would lay the table out two ways: refused, naming the fix.
    let out = cdcflow(&["run", "-p", p]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`changes`")
            && err.contains(
                "is partitioned by (region) in storage, but its definition says partitioned by (op)"
            ),
        "{err}"
    );
    assert!(err.contains("cdcflow run --full-refresh changes"), "{err}");
    assert!(json_rows(p, "SELECT id FROM changes WHERE seq = 2").is_empty());

    // A full refresh rebuilds it (and its streaming readers) in the new layouts.
    run_ok(dir.path(), &["--full-refresh", "changes", "--cascade"]);
    assert_eq!(
        detail(dir.path(), "changes")["partitionColumns"],
        serde_json::json!(["op"])
    );
    assert_eq!(
        detail(dir.path(), "people")["partitionColumns"],
        serde_json::json!(["name"])
    );
    assert_eq!(
        detail(dir.path(), "per_region")["partitionColumns"],
        serde_json::json!([])
    );
    let csv = |sql: &str| {
        let out = cdcflow(&["query", "-p", p, sql, "--format", "csv"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let expected = fs::read_to_string(case.join("steps/2/expect/people.csv")).expect("expected");
    assert_eq!(csv("SELECT * FROM people ORDER BY id"), expected);

    // An AUTO CDC target's batch rewrites it whole in a changed layout: no refresh.
    edit(
        "STREAMING TABLE people PARTITIONED BY (name);",
        "STREAMING TABLE people PARTITIONED BY (region);",
    );
    fs::write(
        dir.path().join("landing/0003.json"),
        "{\"id\": 7, \"name\": \"Gus\", \"region\": \"west\", \"op\": \"U\", \"seq\": 1}\n",
    )
    .expect("land");
    let landed = dir.path().join("landing/0003.json");
    let file = fs::File::options().write(true).open(&landed).expect("open");
    file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        .expect("mtime");
    run_ok(dir.path(), &[]);
    assert_eq!(
        detail(dir.path(), "people")["partitionColumns"],
        serde_json::json!(["region"])
    );
    assert_eq!(
        csv("SELECT * FROM people ORDER BY id"),
        format!("{expected}7,Gus,west\n")
    );
}

#[test]
fn compaction_rewrites_each_partition_on_its_own_and_settles() {
    let dir = case_run(2);
    let p = dir.path().to_str().expect("utf-8");
    let before = json_rows(p, "SELECT * FROM people ORDER BY id");
    let removed = |out: &std::process::Output| -> u64 {
        assert!(out.status.success(), "{}{}", stdout(out), stderr(out));
        stdout(out)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
            .filter_map(|r| r["files_removed"].as_u64())
            .sum()
    };
    assert!(removed(&cdcflow(&["optimize", "-p", p, "people", "--json"])) > 0);
    assert_eq!(json_rows(p, "SELECT * FROM people ORDER BY id"), before);
    // Files of different partitions are never merged, so a second pass finds each
    // partition compacted already instead of rewriting them all again.
    assert_eq!(
        removed(&cdcflow(&["optimize", "-p", p, "people", "--json"])),
        0
    );
    // Vacuum finds the rewritten files in their partition folders, escaped names too.
    let out = cdcflow(&["vacuum", "-p", p, "people", "--retain", "0", "--force"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(json_rows(p, "SELECT * FROM people ORDER BY id"), before);
    let table = dir.path().join("_storage/tables/people");
    let on_disk = parquet_files(&table);
    assert!(
        on_disk.iter().any(|f| f.contains("region=New%20York%2F5/")),
        "{on_disk:?}"
    );
    let live = json_rows(p, "DESCRIBE DETAIL people")[0]["numFiles"].clone();
    assert_eq!(serde_json::json!(on_disk.len()), live, "{on_disk:?}");
}

/// The Parquet files under `dir`, relative to it.
fn parquet_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                // The log's checkpoints are Parquet too.
                if !path.ends_with("_delta_log") {
                    folders.push(path);
                }
            } else if path.extension().is_some_and(|x| x == "parquet") {
                let relative = path.strip_prefix(dir).expect("inside");
                out.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    out
}
