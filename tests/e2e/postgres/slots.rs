//! Replication slots belong to a pipeline storage: pipelines whose names differ only in
//! punctuation, and a pipeline copied into a second folder, never read one slot; a slot
//! no flow reads any more is dropped by the next run, and `status` lists the cdcflow
//! slots no pipeline folder claims, which `vacuum --drop-slot` drops.

use std::path::Path;

use super::{Db, assert_silver_is_source, pipeline, run};
use crate::{cdcflow, stderr, stdout};

/// The cdcflow slots in the test's database: `name,confirmed_flush_lsn`.
fn slots(db: &Db) -> Vec<String> {
    db.rows(&format!(
        "SELECT slot_name, confirmed_flush_lsn FROM pg_replication_slots WHERE database = '{}' ORDER BY 1",
        db.name
    ))
}

fn rename_pipeline(dir: &Path, name: &str) {
    let yaml = dir.join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    let first = text.lines().next().expect("a name line").to_string();
    std::fs::write(&yaml, text.replacen(&first, &format!("name: {name}"), 1)).expect("yaml");
}

fn customers(db: &Db) {
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
}

/// Copies folder `from` (files and folders, no links) to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

#[test]
fn pipelines_named_alike_and_a_copied_pipeline_each_read_a_slot_of_their_own() {
    let db = Db::create("slot_per_storage");
    customers(&db);
    let (a, b) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    pipeline(a.path(), &db, false);
    pipeline(b.path(), &db, false);
    rename_pipeline(a.path(), "x-coll");
    rename_pipeline(b.path(), "x_coll");
    run(a.path());
    run(b.path());
    assert_eq!(slots(&db).len(), 2, "{:?}", slots(&db));
    db.exec("UPDATE customers SET city = 'bern' WHERE id = 1; INSERT INTO customers VALUES (3, 'cy', 'lima')");
    run(a.path());
    run(b.path());
    assert_silver_is_source(a.path(), &db, "x-coll");
    assert_silver_is_source(b.path(), &db, "x_coll");

    // A copy of a's folder, storage and all: it must not read a's slot.
    let copy = tempfile::tempdir().expect("tempdir");
    copy_dir(a.path(), copy.path());
    db.exec("DELETE FROM customers WHERE id = 2");
    let before = slots(&db);
    let out = cdcflow(&["run", "-p", copy.path().to_str().expect("utf-8")]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "the copy read a's slot: {said}");
    assert!(said.contains("copy"), "{said}");
    assert!(
        said.contains("--full-refresh customers_changes --cascade"),
        "{said}"
    );
    assert_eq!(slots(&db), before, "the copy moved a slot");
    // a goes on with every change; the copy, refreshed, with a slot of its own.
    run(a.path());
    assert_silver_is_source(a.path(), &db, "x-coll after the copy's run");
    let out = cdcflow(&[
        "run",
        "-p",
        copy.path().to_str().expect("utf-8"),
        "--full-refresh",
        "customers_changes",
        "--cascade",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_silver_is_source(copy.path(), &db, "the copy");
    assert_eq!(slots(&db).len(), 3, "{:?}", slots(&db));
    db.exec("UPDATE customers SET city = 'oslo' WHERE id = 3");
    for dir in [a.path(), b.path(), copy.path()] {
        run(dir);
        assert_silver_is_source(dir, &db, "after a change read by all three");
    }
}

#[test]
fn a_slot_no_flow_reads_is_dropped_and_a_stray_one_is_listed_and_dropped_by_name() {
    let db = Db::create("slot_lifecycle");
    customers(&db);
    let (kept, gone) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    pipeline(kept.path(), &db, false);
    pipeline(gone.path(), &db, false);
    rename_pipeline(gone.path(), "retired");
    run(kept.path());
    run(gone.path());
    let both = slots(&db);
    assert_eq!(both.len(), 2, "{both:?}");

    // A folder deleted without a word: its slot stays on the server. `status` of the
    // other pipeline lists it, and `vacuum --drop-slot` drops it.
    let retired = both
        .iter()
        .map(|s| s.split(',').next().expect("name").to_string())
        .find(|s| s.starts_with("cdcflow_retired_"))
        .expect("the retired pipeline's slot");
    drop(gone);
    let k = kept.path().to_str().expect("utf-8");
    let out = cdcflow(&["status", "-p", k]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{said}");
    assert!(said.contains(&retired), "{said}");
    assert!(said.contains("no pipeline folder claims"), "{said}");
    assert!(said.contains("--drop-slot"), "{said}");
    let out = cdcflow(&["vacuum", "-p", k, "--drop-slot", &retired]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains(&retired), "{}", stdout(&out));
    assert_eq!(slots(&db).len(), 1, "{:?}", slots(&db));
    let out = cdcflow(&["status", "-p", k]);
    assert!(!stdout(&out).contains(&retired), "{}", stdout(&out));
    // Its own slot is not to be dropped by name.
    let own = slots(&db)[0].split(',').next().expect("name").to_string();
    let out = cdcflow(&["vacuum", "-p", k, "--drop-slot", &own]);
    assert!(!out.status.success(), "{}", stdout(&out));

    // The pipeline stops reading PostgreSQL: its next run drops the slot and says so.
    std::fs::write(
        kept.path().join("flows.sql"),
        "CREATE MATERIALIZED VIEW one AS SELECT 1 AS x;\n",
    )
    .expect("flows.sql");
    let said = run(kept.path());
    assert!(said.contains("dropped replication slot"), "{said}");
    assert!(said.contains(&own), "{said}");
    assert!(slots(&db).is_empty(), "{:?}", slots(&db));
    assert_eq!(
        db.rows("SELECT count(*) FROM pg_publication"),
        vec!["0"],
        "its publication went with it"
    );
}
