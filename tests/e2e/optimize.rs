//! `cdcflow optimize`: compacts a pipeline's tables between runs without changing what
//! they hold, refuses while a run holds the pipeline, and a compaction killed at any
//! step leaves tables that later runs go on from exactly once.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::{cdcflow, copy_dir, repo, snapshot, stderr, stdout};

const SNAPSHOT: &[&str] = &[
    "SELECT * FROM bronze_order_changes ORDER BY log_position, order_id",
    "SELECT * FROM silver_orders_history ORDER BY order_id, __START_AT",
    "SELECT * FROM gold_orders_by_status ORDER BY status",
];

/// The orders example with its landing files held back, the first one cut in two: three
/// files to land one run each.
fn orders() -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let landing = dir.path().join("landing/orders");
    let first = fs::read_to_string(landing.join("0001.json")).expect("0001.json");
    let lines: Vec<&str> = first.lines().collect();
    let (a, b) = lines.split_at(lines.len() / 2);
    let second = fs::read_to_string(landing.join("0002.json")).expect("0002.json");
    for name in ["0001.json", "0002.json"] {
        fs::remove_file(landing.join(name)).expect("remove");
    }
    let files = vec![a.join("\n") + "\n", b.join("\n") + "\n", second];
    (dir, files)
}

fn land(dir: &Path, files: &[String], n: usize) {
    fs::write(dir.join(format!("landing/orders/{n:04}.json")), &files[n]).expect("land");
}

fn run(dir: &Path) {
    let out = cdcflow(&["run", "-p", dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

/// The orders example after its first two files, one run each: two small files in
/// each table, a third file to land.
fn after_two_runs() -> (tempfile::TempDir, Vec<String>) {
    let (dir, files) = orders();
    for n in 0..2 {
        land(dir.path(), &files, n);
        run(dir.path());
    }
    (dir, files)
}

/// The tables after the three files, one run each.
fn uninterrupted() -> Vec<String> {
    let (dir, files) = orders();
    for n in 0..3 {
        land(dir.path(), &files, n);
        run(dir.path());
    }
    snapshot(dir.path(), SNAPSHOT)
}

#[test]
fn optimize_after_several_runs_keeps_every_row_and_says_what_it_rewrote() {
    let want = uninterrupted();
    let (dir, files) = after_two_runs();
    let p = dir.path().to_str().expect("utf-8");
    let before = snapshot(dir.path(), SNAPSHOT);
    let out = cdcflow(&["optimize", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("`bronze_order_changes`: 2 of 2 files rewritten into 1, 4 rows"),
        "{text}"
    );
    assert!(
        text.contains("`silver_orders_history` (state): ")
            && text.contains("`gold_orders_by_status`: nothing to compact (1 file)"),
        "{text}"
    );
    assert_eq!(snapshot(dir.path(), SNAPSHOT), before);

    // Asked again, in JSON: nothing left to do.
    let out = cdcflow(&["optimize", "-p", p, "bronze_order_changes", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["table"], "bronze_order_changes");
    assert_eq!(rows[0]["files_before"], 1);
    assert_eq!(rows[0]["files_removed"], 0);

    land(dir.path(), &files, 2);
    run(dir.path());
    assert_eq!(snapshot(dir.path(), SNAPSHOT), want);
}

#[test]
fn optimize_refuses_while_a_run_holds_the_pipeline_and_names_what_is_wrong() {
    use cdcflow_runtime::lock::RunLock;
    let (dir, _) = after_two_runs();
    let p = dir.path().to_str().expect("utf-8");
    let held = RunLock::acquire(&dir.path().join("_storage"), "orders").expect("lock");
    let out = cdcflow(&["optimize", "-p", p]);
    assert!(!out.status.success());
    let msg = format!("pipeline orders is being run by pid {}", std::process::id());
    assert!(stderr(&out).contains(&msg), "{}", stderr(&out));
    drop(held);
    let bronze = dir
        .path()
        .join("_storage/tables/bronze_order_changes/_delta_log");
    let commits = fs::read_dir(&bronze)
        .expect("log")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert_eq!(commits, 2, "nothing committed");

    let out = cdcflow(&["optimize", "-p", p, "no_such_table"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no table named `no_such_table`")
            && stderr(&out).contains("help: tables of this pipeline:"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_optimize_killed_before_or_after_its_commit_leaves_tables_later_runs_go_on_from() {
    let want = uninterrupted();
    for point in [
        "optimize-staged:bronze_order_changes",
        "optimize-committed:bronze_order_changes",
        "optimize-staged:silver_orders_history__state",
        "optimize-committed:silver_orders_history__state",
    ] {
        let (dir, files) = after_two_runs();
        let p = dir.path().to_str().expect("utf-8");
        let before = snapshot(dir.path(), SNAPSHOT);
        let died = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["optimize", "-p", p])
            .env("CDCFLOW_FAILPOINT", point)
            .output()
            .expect("optimize");
        assert!(!died.status.success(), "{point}: {}", stdout(&died));
        assert!(
            stderr(&died).contains("failpoint"),
            "{point}: {}",
            stderr(&died)
        );
        assert_eq!(snapshot(dir.path(), SNAPSHOT), before, "after {point}");
        land(dir.path(), &files, 2);
        run(dir.path());
        assert_eq!(snapshot(dir.path(), SNAPSHOT), want, "after {point}");
    }
}
