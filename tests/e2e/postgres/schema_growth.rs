//! A column added to the source table while `cdcflow run --continuous` follows it: the
//! rows written after the `ALTER` keep their values in every table that reads the
//! grown one (the AUTO CDC target planned with `COLUMNS * EXCEPT (…)` included), as a
//! triggered run after the `ALTER` gives them.

use std::path::Path;
use std::time::Duration;

use super::{Db, pipeline, spawn_continuous, stop};
use crate::{query_csv, stdout};

/// Waits (`within` at most) until `sql` gives the same rows on the silver table as on
/// the source.
fn reaches(dir: &Path, db: &Db, sql: &str, within: Duration) -> bool {
    super::reaches(dir, db, (sql, sql), within)
}

#[test]
fn a_column_added_while_a_continuous_run_follows_the_table_keeps_its_values() {
    let db = Db::create("growth_continuous");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(&yaml, format!("{text}trigger_interval_seconds: 0.5\n")).expect("yaml");
    // A view of every column of the silver table, and a history kept through a view of
    // bronze: planned again too.
    std::fs::write(
        dir.path().join("gold.sql"),
        "CREATE MATERIALIZED VIEW customers_copy AS SELECT * FROM customers;",
    )
    .expect("gold.sql");
    super::convergence::history(dir.path());
    let child = spawn_continuous(dir.path());
    let before = reaches(
        dir.path(),
        &db,
        "SELECT id, name, city FROM customers ORDER BY id",
        Duration::from_secs(60),
    );
    db.exec("ALTER TABLE customers ADD COLUMN extra text");
    db.exec("INSERT INTO customers VALUES (11, 'after', 'lima', 'x11')");
    db.exec("UPDATE customers SET extra = 'u1' WHERE id = 1");
    let sql = "SELECT id, name, city, coalesce(extra, '-') FROM customers ORDER BY id";
    let after = reaches(dir.path(), &db, sql, Duration::from_secs(60));
    let view = "SELECT id, name, city, coalesce(extra, '-') FROM customers_copy ORDER BY id";
    let viewed = super::reaches(dir.path(), &db, (view, sql), Duration::from_secs(30));
    let open = "SELECT id, name, city, coalesce(extra, '-') FROM customers_history WHERE __END_AT IS NULL ORDER BY id";
    let history = super::reaches(dir.path(), &db, (open, sql), Duration::from_secs(30));
    let (_, out) = stop(child);
    let said = crate::stderr(&out);
    assert!(before, "the snapshot did not arrive: {said}");
    assert!(
        after,
        "the silver table lost the new column's values: {:?} against the source's {:?}; the run said: {said}",
        stdout(&query_csv(
            dir.path(),
            "SELECT * FROM customers ORDER BY id"
        )),
        db.rows(sql)
    );
    assert!(
        viewed,
        "the view lost the new column: {:?}",
        stdout(&query_csv(dir.path(), view))
    );
    assert!(
        history,
        "the history read through a view lost the new column: {:?}",
        stdout(&query_csv(dir.path(), open))
    );
}

#[test]
fn a_column_added_with_a_default_fails_naming_it_until_a_new_snapshot_takes_its_values() {
    let db = Db::create("growth_default");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    super::run(dir.path());
    // Every row there has 'dflt' now, and no change of them says so.
    db.exec("ALTER TABLE customers ADD COLUMN flag varchar(10) NOT NULL DEFAULT 'dflt'");
    db.exec("INSERT INTO customers VALUES (3, 'cy', 'lima', 'x')");
    let p = dir.path().to_str().expect("utf-8");
    for _ in 0..2 {
        let out = crate::cdcflow(&["run", "-p", p]);
        let said = format!("{}{}", stdout(&out), crate::stderr(&out));
        assert!(!out.status.success(), "{said}");
        assert!(
            said.contains("column `flag` was added to the source table with a default ('dflt'")
                && said.contains("cdcflow run --full-refresh customers_changes --cascade"),
            "{said}"
        );
    }
    let out = crate::cdcflow(&[
        "run",
        "-p",
        p,
        "--full-refresh",
        "customers_changes",
        "--cascade",
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        crate::stderr(&out)
    );
    let sql = "SELECT id, name, city, flag FROM customers ORDER BY id";
    assert_eq!(super::query(dir.path(), sql), db.rows(sql));
    // A column added without a default leaves the rows there null, as the source has it.
    db.exec("ALTER TABLE customers ADD COLUMN note text");
    db.exec("UPDATE customers SET note = 'n' WHERE id = 1");
    super::run(dir.path());
    let sql = "SELECT id, flag, coalesce(note, '-') FROM customers ORDER BY id";
    assert_eq!(super::query(dir.path(), sql), db.rows(sql));
}
