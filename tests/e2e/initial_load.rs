//! A large first batch of an AUTO CDC target is read and applied a group of keys at a
//! time (`cdc/load.rs`): the tables equal those of the same events read whole, for a
//! single integer key (key ranges) and a composite key (key hashes), SCD types 1 and 2,
//! with deletes, re-inserts, duplicates and events out of order; `explain --physical`
//! shows the key groups as the partitions of the batch's scan.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;

use crate::{stderr, stdout};

const FLOWS: &str = r#"
CREATE OR REFRESH STREAMING TABLE bronze
AS SELECT * FROM STREAM read_files('${landing}', format => 'json',
  schema => 'region STRING, id BIGINT, name STRING, amount BIGINT, op STRING, seq BIGINT');

CREATE OR REFRESH STREAMING TABLE by_id;
CREATE FLOW by_id_cdc AS AUTO CDC INTO by_id
FROM STREAM(bronze) KEYS (id)
APPLY AS DELETE WHEN op = 'D'
SEQUENCE BY seq
COLUMNS * EXCEPT (op, seq)
STORED AS SCD TYPE 1;

CREATE OR REFRESH STREAMING TABLE history;
CREATE FLOW history_cdc AS AUTO CDC INTO history
FROM STREAM(bronze) KEYS (region, id)
APPLY AS DELETE WHEN op = 'D'
SEQUENCE BY seq
COLUMNS * EXCEPT (op, seq)
STORED AS SCD TYPE 2;
"#;

/// A pipeline whose landing folder holds `files` JSON files of change events.
fn pipeline(dir: &Path, files: usize) {
    fs::write(
        dir.join("pipeline.yaml"),
        "name: initial_load\nstorage: _storage\nlibraries: [flows.sql]\nconfiguration:\n  landing: landing\nlanding_settle_seconds: 0\n",
    )
    .expect("pipeline.yaml");
    fs::write(dir.join("flows.sql"), FLOWS).expect("flows.sql");
    let landing = dir.join("landing");
    fs::create_dir_all(&landing).expect("landing");
    // A fixed pseudo-random sequence: the same events for both pipelines.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    for f in 0..files {
        let mut text = String::new();
        for _ in 0..600 {
            let id = next(1500);
            let region = ["north", "south", "east"][next(3) as usize];
            let op = match next(10) {
                0 | 1 => "D",
                _ => "U",
            };
            let seq = next(20);
            let line = format!(
                r#"{{"region":"{region}","id":{id},"name":"n{}","amount":{},"op":"{op}","seq":{seq}}}"#,
                next(50),
                next(1000)
            );
            writeln!(text, "{line}").expect("write");
            if next(20) == 0 {
                // A re-delivery of the same event.
                writeln!(text, "{line}").expect("write");
            }
        }
        fs::write(landing.join(format!("{f:03}.json")), text).expect("landing file");
    }
}

fn run(dir: &Path, group_bytes: Option<&str>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cdcflow"));
    command
        .args(["run", "-p", dir.to_str().expect("utf-8")])
        .env("RUST_LOG", "cdcflow_runtime=info");
    if let Some(bytes) = group_bytes {
        command.env("CDCFLOW_LOAD_GROUP_BYTES", bytes);
    }
    let out = command.output().expect("run cdcflow");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    stderr(&out)
}

/// Lands the bronze table, and checks that the physical plan of the first batch of
/// `by_id_cdc` reads it in key groups.
fn explain_groups(dir: &Path) {
    let p = dir.to_str().expect("utf-8");
    let out = crate::cdcflow(&["run", "-p", p, "--flow", "bronze"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["explain", "-p", p, "--flow", "by_id_cdc", "--physical"])
        .env("CDCFLOW_LOAD_GROUP_BYTES", "4096")
        .output()
        .expect("run cdcflow");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("KeyGroupsExec: groups="), "{text}");
    assert!(text.contains("by=key range"), "{text}");
    assert!(text.contains("key_groups="), "{text}");
    assert!(!text.contains("RepartitionExec"), "{text}");
}

fn query(dir: &Path, sql: &str) -> String {
    let out = crate::cdcflow(&["query", "-p", dir.to_str().expect("utf-8"), sql]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

#[test]
fn a_first_batch_read_in_key_groups_gives_the_tables_of_one_read() {
    let (whole, grouped) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    pipeline(whole.path(), 12);
    pipeline(grouped.path(), 12);
    let log = run(whole.path(), None);
    assert!(
        !log.contains("key groups"),
        "a small load is read whole: {log}"
    );
    // The plan of the first batch scans the key groups, and the apply takes them
    // apart (explain writes nothing).
    explain_groups(grouped.path());
    // A few kilobytes a group: the bronze table's files make many groups.
    let log = run(grouped.path(), Some("4096"));
    for (flow, by) in [("by_id_cdc", "key range"), ("history_cdc", "key hash")] {
        assert!(
            log.lines()
                .any(|l| l.contains("initial load read in key groups")
                    && l.contains(flow)
                    && l.contains(by)),
            "{flow} was not read in groups by {by}: {log}"
        );
    }
    for sql in [
        "SELECT id, region, name, amount FROM by_id ORDER BY id",
        "SELECT region, id, name, amount, __START_AT, __END_AT FROM history ORDER BY region, id, __START_AT",
        "SELECT count(*) AS n FROM history WHERE __END_AT IS NULL",
    ] {
        let (a, b) = (query(whole.path(), sql), query(grouped.path(), sql));
        assert!(a.lines().count() >= 5, "{sql}: nothing to compare: {a}");
        assert_eq!(
            a, b,
            "{sql}: the grouped load differs from the load read whole"
        );
    }
    // A later batch applies over the grouped load as over any other.
    pipeline_more(whole.path());
    pipeline_more(grouped.path());
    run(whole.path(), None);
    run(grouped.path(), Some("4096"));
    let sql = "SELECT region, id, name, amount, __START_AT, __END_AT FROM history ORDER BY region, id, __START_AT";
    assert_eq!(query(whole.path(), sql), query(grouped.path(), sql));
}

/// A second landing file, of events on keys the load already holds.
fn pipeline_more(dir: &Path) {
    let text = "{\"region\":\"north\",\"id\":7,\"name\":\"late\",\"amount\":1,\"op\":\"U\",\"seq\":100}\n\
                {\"region\":\"south\",\"id\":8,\"name\":\"x\",\"amount\":2,\"op\":\"D\",\"seq\":100}\n";
    fs::write(dir.join("landing/999.json"), text).expect("landing file");
}
