//! `cdcflow vacuum` as a user runs it: a dry run deletes nothing and says what would
//! go; a retention shorter than a table's own is refused unless forced; a forced vacuum
//! frees the bytes the dry run named and the tables read the same rows; later runs
//! apply each batch once; a run holding the lock makes vacuum wait; and a vacuum, or the
//! automatic vacuum of the internal state inside a run, killed at any of its steps
//! leaves tables that read the same and runs that go on as if it had not been stopped.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{cdcflow, copy_dir, repo, snapshot, stderr, stdout};

const SNAPSHOT: &[&str] = &[
    "SELECT * FROM bronze_order_changes ORDER BY log_position, order_id",
    "SELECT * FROM silver_orders_history ORDER BY order_id, __START_AT",
    "SELECT * FROM gold_orders_by_status ORDER BY status",
];

/// The orders example.
fn orders() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    dir
}

/// Lands change file `k` (3 and up) of the orders example: orders 200 to 204 change
/// status and amount; settled already, so the run does not wait for it.
pub(crate) fn land(dir: &Path, k: u64) {
    let mut text = String::new();
    for i in 0..5u64 {
        text.push_str(&format!(
            "{{\"order_id\": {}, \"customer_id\": {i}, \"status\": \"s{k}\", \"amount\": {k}.{i}0, \"operation\": \"UPDATE\", \"commit_ts\": \"2024-07-01T{k:02}:00:00Z\", \"log_position\": {}}}\n",
            200 + i,
            1000 * k + i
        ));
    }
    let path = dir.join(format!("landing/orders/{k:04}.json"));
    fs::write(&path, text).expect("land");
    fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| {
            f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        })
        .expect("mtime");
}

fn arg(dir: &Path) -> &str {
    dir.to_str().expect("utf-8")
}

fn run(dir: &Path) {
    let out = cdcflow(&["run", "-p", arg(dir)]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

fn vacuum(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["vacuum", "-p", arg(dir)];
    all.extend_from_slice(args);
    cdcflow(&all)
}

/// The `--json` lines of a vacuum that succeeded.
fn vacuum_json(dir: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = args.to_vec();
    all.push("--json");
    let out = vacuum(dir, &all);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn total_bytes(tables: &[serde_json::Value]) -> u64 {
    tables
        .iter()
        .map(|t| t["bytes_freed"].as_u64().expect("bytes"))
        .sum()
}

/// Every file under `storage` but the lock file, with its size.
fn files_under(storage: &Path) -> BTreeSet<(PathBuf, u64)> {
    let mut out = BTreeSet::new();
    let mut folders = vec![storage.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for e in fs::read_dir(&folder).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                folders.push(p);
            } else if p.file_name().is_some_and(|n| n != "_run.lock") {
                let len = fs::metadata(&p).expect("stat").len();
                out.insert((p, len));
            }
        }
    }
    out
}

/// The orders example after its own two files and change files 3 and 4, one run each.
fn after_four_batches() -> tempfile::TempDir {
    let dir = orders();
    run(dir.path());
    for k in 3..=4 {
        land(dir.path(), k);
        run(dir.path());
    }
    dir
}

#[test]
fn a_forced_vacuum_frees_what_the_dry_run_named_and_the_tables_read_the_same() {
    let dir = after_four_batches();
    let storage = dir.path().join("_storage");
    let want = snapshot(dir.path(), SNAPSHOT);
    let before = files_under(&storage);

    // The tables' own retention (7 days): nothing is old enough yet.
    let out = vacuum(dir.path(), &["--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("dry run, nothing removed"), "{text}");
    assert!(text.contains("retention 168 h"), "{text}");
    // Only internal state (retention 0: cdcflow alone reads it) may have files to go;
    // runs vacuum it once its unreferenced bytes pass its live bytes.
    assert!(
        text.lines()
            .filter(|l| l.contains("file(s)")
                && !l.contains("(internal state)")
                && !l.starts_with("total"))
            .all(|l| l.contains(" 0 file(s)")),
        "{text}"
    );

    let dry = vacuum_json(dir.path(), &["--dry-run", "--retain", "0", "--force"]);
    let silver = dry
        .iter()
        .find(|t| t["table"] == "silver_orders_history" && t["internal_state"] == false)
        .expect("silver");
    assert!(silver["bytes_freed"].as_u64() > Some(0), "{silver}");
    assert_eq!(files_under(&storage), before, "a dry run deleted something");

    let out = vacuum(dir.path(), &["--retain", "0"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "--retain 0 hours is shorter than the retention of `bronze_order_changes` (168 hours"
        ) && err.contains("help:")
            && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        files_under(&storage),
        before,
        "a refused vacuum deleted something"
    );

    let done = vacuum_json(dir.path(), &["--retain", "0", "--force"]);
    assert_eq!(total_bytes(&done), total_bytes(&dry));
    let freed: u64 = before
        .difference(&files_under(&storage))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        freed,
        total_bytes(&done),
        "bytes reported = bytes gone from disk"
    );
    for t in &done {
        assert_eq!(t["retention_hours"], 0.0, "{t}");
    }
    assert_eq!(snapshot(dir.path(), SNAPSHOT), want);

    // The next batch applies once.
    land(dir.path(), 5);
    run(dir.path());
    let reference = after_four_batches();
    land(reference.path(), 5);
    run(reference.path());
    assert_eq!(
        snapshot(dir.path(), SNAPSHOT),
        snapshot(reference.path(), SNAPSHOT)
    );
    let out = vacuum(dir.path(), &["--retain", "0", "--force"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.lines()
            .any(|l| l.contains("silver_orders_history (internal state)")
                && l.contains("retention 0 h")),
        "{text}"
    );
    assert!(text.contains(" B freed"), "{text}");
}

#[test]
fn vacuum_refuses_while_a_run_holds_the_lock_and_names_a_table_it_does_not_know() {
    let dir = orders();
    run(dir.path());
    let lock = fs::File::options()
        .read(true)
        .write(true)
        .open(dir.path().join("_storage/_run.lock"))
        .expect("lock file");
    lock.try_lock().expect("lock");
    let out = vacuum(dir.path(), &["--retain", "0", "--force"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("pipeline orders is being run by"),
        "{}",
        stderr(&out)
    );
    drop(lock);

    let out = vacuum(dir.path(), &["nosuch"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("no table named `nosuch`") && err.contains("silver_orders_history"),
        "{err}"
    );

    let named = vacuum_json(dir.path(), &["SILVER_orders_history"]);
    let names: Vec<(String, bool)> = named
        .iter()
        .map(|t| {
            (
                t["table"].as_str().expect("name").to_string(),
                t["internal_state"].as_bool().expect("bool"),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("silver_orders_history".to_string(), false),
            ("silver_orders_history".to_string(), true)
        ]
    );
}

/// Runs `cdcflow args…` set to die at `point`: whether it did.
fn killed_at(point: &str, args: &[&str]) -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(args)
        .env("CDCFLOW_FAILPOINT", point)
        .output()
        .expect("cdcflow");
    if out.status.success() {
        return false;
    }
    assert!(
        stderr(&out).contains("failpoint"),
        "{point}: {}",
        stderr(&out)
    );
    true
}

#[test]
fn a_vacuum_killed_at_any_of_its_steps_leaves_the_tables_and_the_next_batches_whole() {
    let reference = after_four_batches();
    let want = snapshot(reference.path(), SNAPSHOT);
    land(reference.path(), 5);
    run(reference.path());
    let want_after = snapshot(reference.path(), SNAPSHOT);

    for table in ["silver_orders_history", "gold_orders_by_status"] {
        for step in ["vacuum-started", "vacuum-deleting", "vacuum-ended"] {
            let point = format!("{step}:{table}");
            let dir = after_four_batches();
            let args = ["vacuum", "-p", arg(dir.path()), "--retain", "0", "--force"];
            assert!(killed_at(&point, &args), "{point} was not reached");
            assert_eq!(
                snapshot(dir.path(), SNAPSHOT),
                want,
                "after a crash at {point}"
            );
            let again = vacuum(dir.path(), &["--retain", "0", "--force"]);
            assert!(again.status.success(), "{point}: {}", stderr(&again));
            land(dir.path(), 5);
            run(dir.path());
            assert_eq!(
                snapshot(dir.path(), SNAPSHOT),
                want_after,
                "the batch after a crash at {point}"
            );
        }
    }
}

#[test]
fn a_run_killed_while_vacuuming_its_state_goes_on_as_if_it_had_not_stopped() {
    const LAST: u64 = 10;
    let reference = orders();
    run(reference.path());
    for k in 3..=LAST {
        land(reference.path(), k);
        run(reference.path());
    }
    let want = snapshot(reference.path(), SNAPSHOT);

    for step in ["vacuum-started", "vacuum-deleting", "vacuum-ended"] {
        let point = format!("{step}:silver_orders_history__state");
        let dir = orders();
        run(dir.path());
        // The state is vacuumed once it holds more old bytes than live ones: a few
        // batches in.
        let mut killed = None;
        for k in 3..=LAST {
            land(dir.path(), k);
            if killed.is_none() && killed_at(&point, &["run", "-p", arg(dir.path())]) {
                killed = Some(k);
                // The batch committed before the vacuum began.
                run(dir.path());
            } else if killed.is_some() {
                run(dir.path());
            }
        }
        assert!(
            killed.is_some_and(|k| k < LAST),
            "{point}: reached at {killed:?}"
        );
        assert_eq!(
            snapshot(dir.path(), SNAPSHOT),
            want,
            "after a crash at {point}"
        );
    }
}
