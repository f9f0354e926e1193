//! Bounded reads of large inputs: a table's initial copy in chunks of its primary key
//! (`max_changes_per_batch` rows each, one batch each), restartable after a crash at
//! any chunk while the table changes; and a transaction larger than a batch read over
//! several batches, resuming inside it, killed in the middle.

use std::path::Path;
use std::process::Command;

use super::{Db, assert_no_doubles, assert_silver_is_source, pipeline, query, run};
use crate::{query_csv, stderr, stdout};

/// The pipeline of `pipeline()` with `max_changes_per_batch => n`.
pub(super) fn small_batches(dir: &Path, db: &Db, n: u32) {
    pipeline(dir, db, true);
    let flows = dir.join("flows.sql");
    let sql = std::fs::read_to_string(&flows).expect("flows.sql");
    std::fs::write(
        &flows,
        sql.replace(
            "table => 'public.customers'",
            &format!("table => 'public.customers', max_changes_per_batch => {n}"),
        ),
    )
    .expect("flows.sql");
}

/// Runs until `point` aborts the run; `false` when the run ended without reaching it.
fn run_killed_at(dir: &Path, point: &str) -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.to_str().expect("utf-8")])
        .env("CDCFLOW_FAILPOINT", point)
        .output()
        .expect("run");
    match out.status.success() {
        true => false,
        false => {
            assert!(
                stderr(&out).contains("failpoint"),
                "{point}: the run failed: {}{}",
                stdout(&out),
                stderr(&out)
            );
            true
        }
    }
}

/// The values of column `name` of `DESCRIBE HISTORY table`, newest first.
fn history(dir: &Path, table: &str, name: &str) -> Vec<String> {
    let history = query_csv(dir, &format!("DESCRIBE HISTORY {table}"));
    let text = stdout(&history);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let at = header
        .iter()
        .position(|h| *h == name)
        .unwrap_or_else(|| panic!("a {name} column"));
    lines
        .filter_map(|l| l.split(',').nth(at).map(str::to_string))
        .collect()
}

/// The Delta commits of `table` that hold a batch.
fn batches(dir: &Path, table: &str) -> usize {
    let mut committed: Vec<String> = history(dir, table, "batch")
        .into_iter()
        .filter(|b| !b.is_empty())
        .collect();
    committed.sort_unstable();
    committed.dedup();
    committed.len()
}

/// The snapshot rows each commit of the bronze table added, in commit order (the
/// chunks; the chunks of one run share a snapshot, so their rows share a position).
fn snapshot_chunks(dir: &Path) -> Vec<i64> {
    let mut versions: Vec<u64> = history(dir, "customers_changes", "version")
        .iter()
        .map(|v| v.parse().expect("a version"))
        .collect();
    versions.sort_unstable();
    let mut before = 0;
    let mut chunks = vec![];
    for v in versions {
        let n: i64 = query(
            dir,
            &format!(
                "SELECT count(*) FROM customers_changes VERSION AS OF {v} WHERE _change_type = 'snapshot'"
            ),
        )[0]
        .parse()
        .expect("a count");
        if n != before {
            chunks.push(n - before);
        }
        before = n;
    }
    chunks
}

#[test]
fn a_large_table_is_copied_in_chunks_that_survive_a_crash_at_any_chunk() {
    let db = Db::create("chunks");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers SELECT i, 'n' || i, 'c' || i FROM generate_series(1, 2500) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    small_batches(dir.path(), &db, 400);
    kill_at_every_point_while_rows_change(dir.path(), &db);
    assert!(
        batches(dir.path(), "customers_changes") >= 2,
        "the killed runs committed chunks"
    );
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the chunks and the kills");
    assert_no_doubles(dir.path());
    // Every row copied once, in chunks of a batch at most, the killed runs' read at
    // other points of the WAL than the last run's.
    let copied = query(
        dir.path(),
        "SELECT count(*), count(DISTINCT id), count(DISTINCT _commit_lsn) FROM customers_changes WHERE _change_type = 'snapshot'",
    );
    let parts: Vec<i64> = copied[0]
        .split(',')
        .map(|n| n.parse().expect("n"))
        .collect();
    assert_eq!(parts[0], parts[1], "a row copied twice: {copied:?}");
    assert!(parts[0] >= 2480, "{copied:?}");
    assert!(parts[2] >= 2, "a snapshot per run: {copied:?}");
    let chunks = snapshot_chunks(dir.path());
    assert!(
        chunks.len() >= 7 && chunks.iter().all(|n| (1..=400).contains(n)),
        "2,500 rows in chunks of 400: {chunks:?}"
    );

    db.exec("UPDATE customers SET name = 'after' WHERE id % 7 = 0");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the copy");
    assert_no_doubles(dir.path());
}

#[test]
fn a_transaction_larger_than_a_batch_is_read_over_several_and_survives_a_kill() {
    let db = Db::create("big_transaction");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers SELECT i, 'n' || i, 'c' || i FROM generate_series(1, 100) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    small_batches(dir.path(), &db, 300);
    run(dir.path());
    // One transaction of 1,000 inserts, 100 updates (10 of them key changes: a
    // delete and an update each) and 50 deletes.
    db.exec(
        "BEGIN;
         INSERT INTO customers SELECT i, 'big' || i, 'x' FROM generate_series(1000, 1999) i;
         UPDATE customers SET city = 'y' WHERE id BETWEEN 1000 AND 1089;
         UPDATE customers SET id = id + 5000 WHERE id BETWEEN 1090 AND 1099;
         DELETE FROM customers WHERE id BETWEEN 1500 AND 1549;
         COMMIT;",
    );
    assert!(run_killed_at(dir.path(), "committed:customers_changes"));
    let partial = query(
        dir.path(),
        "SELECT count(*) FROM customers_changes WHERE _change_type <> 'snapshot'",
    );
    assert_eq!(
        partial,
        vec!["300"],
        "the first batch holds part of the transaction"
    );
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the transaction");
    assert_no_doubles(dir.path());
    let changes = query(
        dir.path(),
        "SELECT count(*), count(DISTINCT _commit_lsn), min(_change_seq), max(_change_seq) FROM customers_changes WHERE _change_type <> 'snapshot'",
    );
    assert_eq!(
        changes,
        vec!["1160,1,1,1160"],
        "every change once, in order"
    );
    assert!(
        batches(dir.path(), "customers_changes") >= 5,
        "the snapshot and four parts"
    );
}

/// The largest chunk of the copy: none holds more than a batch.
fn largest_chunk(dir: &Path) -> i64 {
    snapshot_chunks(dir).into_iter().max().unwrap_or(0)
}

#[test]
fn a_table_without_a_primary_key_is_copied_in_chunks_of_tuple_ids_that_survive_a_crash() {
    let db = Db::create("chunks_no_key");
    // No primary key: updates and deletes need REPLICA IDENTITY FULL upstream.
    db.exec(
        "CREATE TABLE customers (id int NOT NULL, name text NOT NULL, city text NOT NULL);
         ALTER TABLE customers REPLICA IDENTITY FULL;
         INSERT INTO customers SELECT i, 'n' || i, 'c' || i FROM generate_series(1, 2500) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    small_batches(dir.path(), &db, 400);
    kill_at_every_point_while_rows_change(dir.path(), &db);
    assert!(
        batches(dir.path(), "customers_changes") >= 2,
        "the killed runs committed chunks"
    );
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the chunks and the kills");
    assert_no_doubles(dir.path());
    let copied = query(
        dir.path(),
        "SELECT count(DISTINCT id) FROM customers_changes WHERE _change_type = 'snapshot'",
    );
    assert!(copied[0].parse::<i64>().expect("n") >= 2480, "{copied:?}");
    let chunks = snapshot_chunks(dir.path());
    assert!(
        chunks.len() >= 7 && chunks.iter().all(|n| (1..=400).contains(n)),
        "2,500 rows in chunks of 400: {chunks:?}"
    );

    db.exec("UPDATE customers SET name = 'after' WHERE id % 7 = 0");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the copy");
    assert_no_doubles(dir.path());
}

#[test]
fn a_table_rewritten_while_it_is_copied_by_tuple_ids_is_copied_again_and_loses_nothing() {
    let db = Db::create("chunks_rewritten");
    db.exec(
        "CREATE TABLE customers (id int NOT NULL, name text NOT NULL, city text NOT NULL);
         ALTER TABLE customers REPLICA IDENTITY FULL;
         INSERT INTO customers SELECT i, 'n' || i, 'c' || i FROM generate_series(1, 2000) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    small_batches(dir.path(), &db, 300);
    assert!(run_killed_at(dir.path(), "committed:customers_changes"));
    assert!(run_killed_at(dir.path(), "committed:customers_changes"));
    // Rows deleted from the copied pages; VACUUM FULL then packs the rows not yet
    // copied into those pages, with no change in the stream.
    db.exec("DELETE FROM customers WHERE id <= 550");
    db.exec("VACUUM FULL customers");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the rewrite");
    assert_no_doubles(dir.path());
    assert!(largest_chunk(dir.path()) <= 300);
}

/// Kills a run at each commit failpoint of the bronze flow in turn; between the kills,
/// rows change in ranges copied and not yet copied (updates that move rows to other
/// pages, a delete, an insert, a key change). Each killed run commits at most one chunk.
fn kill_at_every_point_while_rows_change(dir: &Path, db: &Db) {
    let points = [
        "committed:customers_changes",
        "before-commit:customers_changes",
        "committed:customers_changes",
        "offsets:customers_changes",
        "committed:customers_changes",
    ];
    for (i, point) in (0i64..).zip(points) {
        assert!(run_killed_at(dir, point), "{point}: the run ended");
        db.exec(&format!(
            "UPDATE customers SET city = 'moved{i}' WHERE id IN ({}, {}, {});
             DELETE FROM customers WHERE id = {};
             INSERT INTO customers VALUES ({}, 'new', 'new');
             UPDATE customers SET id = {} WHERE id = {}",
            10 + i,
            1200 + i,
            2400 + i,
            500 + i,
            5000 + i,
            6000 + i,
            2000 + i
        ));
    }
}
