//! What operators and DDL do to a captured table, and how cdcflow answers: never a
//! silent gap. A table taken out of the publication (and put back), a table dropped and
//! created again under its name, a publication dropped or narrowed: each fails the run
//! naming the table and the command that recovers, and that command does. A table
//! whose updates the publication would break (no primary key, `REPLICA IDENTITY
//! DEFAULT`) is refused before the publication is touched, by `run` and by `validate`.

use std::path::Path;

use super::{Db, assert_silver_is_source, pipeline, query, run};
use crate::{cdcflow, stderr, stdout};

/// A run that must fail: what it printed.
fn failing_run(dir: &Path) -> String {
    let out = cdcflow(&["run", "-p", dir.to_str().expect("utf-8")]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "the run succeeded: {said}");
    said
}

/// The publication cdcflow made in the test's database.
fn publication(db: &Db) -> String {
    db.rows("SELECT pubname FROM pg_publication")
        .into_iter()
        .next()
        .expect("a publication")
}

const RECOVER: &str = "cdcflow run --full-refresh customers_changes --cascade";

fn recover(dir: &Path) {
    let out = cdcflow(&[
        "run",
        "-p",
        dir.to_str().expect("utf-8"),
        "--full-refresh",
        "customers_changes",
        "--cascade",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

/// A database of the test's own with `customers`, and a pipeline that has read it once.
fn captured(test: &str) -> (Db, tempfile::TempDir) {
    let db = Db::create(test);
    customers(&db);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    run(dir.path());
    (db, dir)
}

fn customers(db: &Db) {
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome'), (3, 'cy', 'lima');",
    );
}

#[test]
fn a_table_taken_out_of_the_publication_and_written_fails_naming_the_fix() {
    let (db, dir) = captured("publication_gap");
    let publication = publication(&db);
    // Someone takes the table out; the changes meanwhile are not published.
    db.exec(&format!(
        "ALTER PUBLICATION {publication} DROP TABLE customers"
    ));
    db.exec("UPDATE customers SET city = 'bern' WHERE id = 1; DELETE FROM customers WHERE id = 2; INSERT INTO customers VALUES (4, 'dee', 'kyiv')");
    let said = failing_run(dir.path());
    assert!(said.contains("public.customers"), "{said}");
    assert!(said.contains("publication"), "{said}");
    assert!(said.contains(RECOVER), "{said}");
    // The run did not put it back on its own (that would hide the gap).
    let again = failing_run(dir.path());
    assert!(again.contains(RECOVER), "{again}");
    recover(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the full refresh");
    db.exec("UPDATE customers SET city = 'oslo' WHERE id = 4");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after a change streamed again");

    // Taken out and put back by someone else between two runs: the same gap.
    db.exec(&format!(
        "ALTER PUBLICATION {publication} DROP TABLE customers"
    ));
    db.exec("DELETE FROM customers WHERE id = 3");
    db.exec(&format!(
        "ALTER PUBLICATION {publication} ADD TABLE customers"
    ));
    let said = failing_run(dir.path());
    assert!(said.contains(RECOVER), "{said}");
    recover(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the second full refresh");
}

#[test]
fn a_publication_narrowed_to_inserts_fails_naming_the_setting() {
    let (db, dir) = captured("publication_narrowed");
    let publication = publication(&db);
    db.exec(&format!(
        "ALTER PUBLICATION {publication} SET (publish = 'insert')"
    ));
    db.exec("DELETE FROM customers WHERE id = 2");
    let said = failing_run(dir.path());
    assert!(said.contains("publish"), "{said}");
    assert!(said.contains("delete"), "{said}");
}

#[test]
fn a_table_dropped_and_created_again_fails_naming_the_fix() {
    let (db, dir) = captured("table_recreated");
    db.exec(
        "DROP TABLE customers;
         CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (7, 'eve', 'oslo'), (8, 'fay', 'riga');",
    );
    let said = failing_run(dir.path());
    assert!(said.contains("public.customers"), "{said}");
    assert!(said.contains("dropped and created again"), "{said}");
    assert!(said.contains(RECOVER), "{said}");
    recover(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the full refresh");
    db.exec("UPDATE customers SET city = 'bern' WHERE id = 7");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after a change of the new table");
}

#[test]
fn a_dropped_publication_fails_naming_every_table_to_refresh_and_that_recovers() {
    let (db, dir) = captured("publication_dropped");
    let publication = publication(&db);
    db.exec(&format!("DROP PUBLICATION {publication}"));
    db.exec("UPDATE customers SET city = 'bern' WHERE id = 1; INSERT INTO customers VALUES (5, 'dan', 'pisa')");
    let said = failing_run(dir.path());
    assert!(said.contains(&publication), "{said}");
    assert!(said.contains("dropped"), "{said}");
    assert!(said.contains(RECOVER), "{said}");
    assert!(!said.contains("check the connection"), "{said}");
    recover(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the full refresh");
    db.exec("DELETE FROM customers WHERE id = 5");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after a change streamed again");
}

#[test]
fn a_table_whose_updates_the_publication_would_break_is_refused() {
    let db = Db::create("no_identity");
    db.exec(
        "CREATE TABLE customers (id int NOT NULL, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    let said = failing_run(dir.path());
    assert!(said.contains("public.customers"), "{said}");
    assert!(said.contains("REPLICA IDENTITY FULL"), "{said}");
    assert!(said.contains("REPLICA IDENTITY USING INDEX"), "{said}");
    assert_eq!(
        db.rows("SELECT count(*) FROM pg_publication_tables WHERE tablename = 'customers'"),
        vec!["0"],
        "the table was added to a publication"
    );
    // The application's statements still work.
    db.exec("UPDATE customers SET city = 'bern' WHERE id = 1; DELETE FROM customers WHERE id = 1");

    // validate says so too, at the read_postgres call, when the server answers.
    let out = cdcflow(&["validate", "-p", dir.path().to_str().expect("utf-8")]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("flows.sql:2:"), "{said}");
    assert!(said.contains("REPLICA IDENTITY FULL"), "{said}");

    // Either fix lets it through.
    db.exec("ALTER TABLE customers REPLICA IDENTITY FULL; INSERT INTO customers VALUES (2, 'bob', 'rome')");
    let out = cdcflow(&["validate", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    run(dir.path());
    assert_eq!(
        query(
            dir.path(),
            "SELECT id, name, city FROM customers ORDER BY id"
        ),
        vec!["2,bob,rome"]
    );
}

#[test]
fn a_column_added_while_a_continuous_run_follows_the_table_reaches_bronze_with_its_values() {
    let db = Db::create("continuous_add_column");
    customers(&db);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(&yaml, format!("{text}trigger_interval_seconds: 0.2\n")).expect("yaml");
    let mut child = super::spawn_continuous(dir.path());
    let bronze = "SELECT id, coalesce(tier, '-') FROM customers_changes WHERE _change_type <> 'snapshot' ORDER BY _commit_lsn, _change_seq";
    let wait_for = |sql: &str, want: &[&str]| {
        let mut seen = vec![];
        for _ in 0..240 {
            let out = crate::query_csv(dir.path(), sql);
            if out.status.success() {
                seen = stdout(&out).lines().skip(1).map(String::from).collect();
                if seen == want {
                    return seen;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        seen
    };
    // The snapshot first, then a change before the column exists.
    let seen = wait_for("SELECT count(*) FROM customers", &["3"]);
    assert_eq!(seen, vec!["3"]);
    db.exec("INSERT INTO customers VALUES (4, 'dee', 'kyiv')");
    db.exec("ALTER TABLE customers ADD COLUMN tier text");
    db.exec("INSERT INTO customers VALUES (5, 'eve', 'pisa', 'gold')");
    db.exec("UPDATE customers SET tier = 'silver' WHERE id = 1");
    let seen = wait_for(bronze, &["4,-", "5,gold", "1,silver"]);
    let _ = child.kill();
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        seen,
        vec!["4,-", "5,gold", "1,silver"],
        "the values of the new column reach bronze; the run said: {}",
        stderr(&out)
    );
}

/// A column's type changed upstream: the run fails naming the table, the column and
/// both types, and a full refresh recovers, whether changes of the old type were still
/// to be read (`pending`) or not.
fn a_type_change(test: &str, pending: bool) {
    let db = Db::create(test);
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL, zip int);
         INSERT INTO customers VALUES (1, 'ann', 'oslo', 100), (2, 'bob', 'rome', 200);",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    run(dir.path());
    if pending {
        db.exec("UPDATE customers SET zip = 101 WHERE id = 1");
    }
    db.exec("ALTER TABLE customers ALTER COLUMN zip TYPE text; UPDATE customers SET zip = 'AB-2' WHERE id = 2");
    for _ in 0..2 {
        let said = failing_run(dir.path());
        assert!(said.contains("`zip`"), "{said}");
        assert!(said.contains("customers"), "{said}");
        assert!(said.contains("Int32") && said.contains("Utf8"), "{said}");
        assert!(said.contains("--full-refresh"), "{said}");
    }
    recover(dir.path());
    let sql = "SELECT id, name, city, zip FROM customers ORDER BY id";
    assert_eq!(query(dir.path(), sql), db.rows(sql));
    db.exec("UPDATE customers SET zip = 'CD-3' WHERE id = 1");
    run(dir.path());
    assert_eq!(query(dir.path(), sql), db.rows(sql));
}

#[test]
fn a_type_change_with_changes_of_the_old_type_pending_fails_naming_it_and_a_full_refresh_recovers()
{
    a_type_change("type_change_pending", true);
}

#[test]
fn a_type_change_with_nothing_pending_fails_naming_it_and_a_full_refresh_recovers() {
    a_type_change("type_change", false);
}
