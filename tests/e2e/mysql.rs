//! The MySQL/MariaDB source (`read_mysql`) end to end, against the local MariaDB with
//! its row-based binary log on (`bash .ci/mariadb`; MYSQL_HOST/MYSQL_PORT/MYSQL_USER):
//! `cdcflow run` copies the table, then reads its changes from the binary log into a
//! bronze streaming table that AUTO CDC flows keep as SCD type 1 and 2; the silver
//! tables equal the source after every run, after runs killed at each failpoint, and
//! after a random workload of four writers with two SIGKILLs of a continuous run. What
//! the log cannot give (a changed column type, a table without a primary key, a log
//! purged past the checkpoint, a dropped table) fails naming the fix. Each test has a
//! database of its own, dropped at the end.

use std::path::Path;
use std::process::Command;

use crate::postgres::read_query::Maria;
use crate::postgres::{Lcg, spawn_continuous, stop};
use crate::{cdcflow, query_csv, stderr, stdout};

mod convergence;
mod many_tables;
mod restart;
mod syncs;
mod tls;

const SEQUENCE: &str = "SEQUENCE BY struct(_binlog_position, _change_seq)
  COLUMNS * EXCEPT (_change_type, _binlog_position, _change_seq, _commit_timestamp, _binlog_file)";

/// A pipeline reading `customers` of `db` into bronze (`customers_changes`) and an SCD
/// type 1 table (`customers`); `extra` is more SQL.
fn pipeline(dir: &Path, db: &Maria, extra: &str) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: mysql_e2e\nconnections:\n  shop:\n    kind: mysql\n    host: {}\n    port: {}\n    database: {}\n    user: {}\n",
            db.host, db.port, db.name, db.user
        ),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'customers', max_changes_per_batch => 400);

CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customers_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  APPLY AS TRUNCATE WHEN _change_type = 'truncate'
  {SEQUENCE};
{extra}"
        ),
    )
    .expect("flows.sql");
}

pub(crate) fn run(dir: &Path) -> String {
    let out = cdcflow(&["run", "-p", dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

/// A run that fails: its stderr.
fn run_fails(dir: &Path) -> String {
    let out = cdcflow(&["run", "-p", dir.to_str().expect("utf-8")]);
    assert!(
        !out.status.success(),
        "the run should fail: {}",
        stdout(&out)
    );
    stderr(&out)
}

pub(crate) fn query(dir: &Path, sql: &str) -> Vec<String> {
    let out = query_csv(dir, sql);
    assert!(out.status.success(), "{sql}: {}", stderr(&out));
    stdout(&out).lines().skip(1).map(String::from).collect()
}

const CURRENT: &str = "SELECT id, name, city FROM customers ORDER BY id";

fn assert_silver_is_source(dir: &Path, db: &Maria, when: &str) {
    let (silver, source) = (query(dir, CURRENT), db.rows(CURRENT));
    let missing: Vec<&String> = source.iter().filter(|r| !silver.contains(r)).collect();
    let extra: Vec<&String> = silver.iter().filter(|r| !source.contains(r)).collect();
    assert!(
        silver == source,
        "{when}: the silver table lacks {missing:?} and has {extra:?} beside the source's rows"
    );
}

/// No change is in bronze twice.
pub(crate) fn assert_no_doubles(dir: &Path) {
    let all = query(dir, "SELECT count(*) FROM customers_changes");
    let distinct = query(
        dir,
        "SELECT count(*) FROM (SELECT DISTINCT _binlog_position, _change_seq, id, _change_type FROM customers_changes)",
    );
    assert_eq!(all, distinct, "a change was stored twice");
}

#[test]
fn snapshot_then_changes_keep_scd1_equal_to_the_source_with_every_type() {
    let db = Maria::create("binlog_changes");
    db.exec(
        Some(&db.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, city VARCHAR(40) NOT NULL,
           status ENUM('new','Paid','Sent'), tags SET('a','b','c'), amount DECIMAL(12,2), big BIGINT UNSIGNED,
           small TINYINT, ratio DOUBLE, f FLOAT, at TIMESTAMP(6) NULL, local DATETIME(3), day DATE, t TIME,
           y YEAR, flag BIT(1), code BINARY(4), blob_value BLOB, note TEXT CHARACTER SET latin1) ENGINE=InnoDB;
         INSERT INTO customers VALUES
           (1, 'ann', 'oslo', 'new', 'a,c', 10.50, 18446744073709551615, -128, 0.1, 1.25,
            '2024-05-01 08:00:00.5', '2024-05-01 09:00:00.125', '2024-05-01', '-26:03:04', 2024, b'1', x'0102', x'00ff', 'café'),
           (2, 'bob', 'rome', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
           (3, 'cy', 'lima', 'Sent', '', 0, 0, 127, -1e300, -3.5, '1970-01-01 00:00:01', '1000-01-01 00:00:00', '9999-12-31', '838:59:59', 1901, b'0', x'', x'', '');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, "");
    let all = "SELECT id, name, city, status, tags, amount, big, small, ratio, f, at, local, day, t, y, flag, code, blob_value, note FROM customers ORDER BY id";

    run(dir.path());
    assert_eq!(
        query(
            dir.path(),
            "SELECT _change_type, count(*) FROM customers_changes GROUP BY 1"
        ),
        vec!["snapshot,3"]
    );
    let copied = query(dir.path(), all);
    assert_eq!(
        copied[0],
        "1,ann,oslo,new,\"a,c\",10.50,18446744073709551615,-128,0.1,1.25,2024-05-01T08:00:00.500Z,2024-05-01T09:00:00.125,2024-05-01,-26:03:04,2024,true,01020000,00ff,café"
    );

    // The same values again through the binary log: each row updated to itself but
    // for the name, then back.
    db.exec(
        Some(&db.name),
        "UPDATE customers SET name = concat(name, '!')",
    );
    db.exec(
        Some(&db.name),
        "UPDATE customers SET name = trim(TRAILING '!' FROM name)",
    );
    run(dir.path());
    assert_eq!(
        query(dir.path(), all),
        copied,
        "the log gives every value as the copy does"
    );

    db.exec(
        Some(&db.name),
        "INSERT INTO customers (id, name, city) VALUES (4, 'dee', 'kyiv')",
    );
    db.exec(
        Some(&db.name),
        "UPDATE customers SET city = 'bern' WHERE id = 1",
    );
    db.exec(Some(&db.name), "DELETE FROM customers WHERE id = 3");
    db.exec(Some(&db.name), "UPDATE customers SET id = 20 WHERE id = 2");
    db.exec(
        Some(&db.name),
        "BEGIN; UPDATE customers SET name = 'dee2' WHERE id = 4; UPDATE customers SET name = 'dee3' WHERE id = 4; COMMIT",
    );
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the changes");
    assert_eq!(
        query(
            dir.path(),
            "SELECT _change_type, count(*) FROM customers_changes WHERE _change_type <> 'update' GROUP BY 1 ORDER BY 1"
        ),
        vec!["delete,2", "insert,1", "snapshot,3"],
        "the key change is a delete of the old key and an update under the new"
    );

    // Nothing new: nothing committed.
    let bronze = query(dir.path(), "SELECT count(*) FROM customers_changes");
    run(dir.path());
    assert_eq!(
        query(dir.path(), "SELECT count(*) FROM customers_changes"),
        bronze
    );

    // A column added upstream flows in; a truncate empties the silver table.
    db.exec(
        Some(&db.name),
        "ALTER TABLE customers ADD COLUMN email VARCHAR(60)",
    );
    db.exec(Some(&db.name), "INSERT INTO customers (id, name, city, email) VALUES (5, 'eve', 'oslo', 'eve@example.com')");
    run(dir.path());
    assert_eq!(
        query(
            dir.path(),
            "SELECT id, email FROM customers WHERE email IS NOT NULL"
        ),
        vec!["5,eve@example.com"]
    );
    db.exec(Some(&db.name), "TRUNCATE customers");
    db.exec(
        Some(&db.name),
        "INSERT INTO customers (id, name, city) VALUES (7, 'gus', 'faro')",
    );
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after a truncate");
    assert_no_doubles(dir.path());

    // Status: how far the flow is behind the server's log, and the lag.
    let out = cdcflow(&[
        "status",
        "-p",
        dir.path().to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("mysql:shop:{}.customers", db.name))
            && text.contains("behind_bytes"),
        "status names the source and how far it is behind: {text}"
    );
}

/// With the pipeline's storage in a bucket, binary-log capture keeps SCD type 1 equal
/// to the source across a snapshot and changes, and writes nothing into the pipeline
/// folder.
#[test]
fn a_pipeline_stored_in_a_bucket_captures_the_binary_log() {
    let moto = crate::object_store::Moto::start();
    moto.create_bucket("lake");
    let db = Maria::create("binlog_bucket");
    db.exec(
        Some(&db.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, city VARCHAR(40) NOT NULL) ENGINE=InnoDB;
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, "");
    crate::object_store::store_at(dir.path(), "s3://lake/mysql");
    let silver_is_source = |when: &str| {
        let ours: Vec<String> = moto
            .query(dir.path(), CURRENT)
            .lines()
            .skip(1)
            .map(String::from)
            .collect();
        assert_eq!(ours, db.rows(CURRENT), "{when}");
    };
    moto.run(dir.path());
    silver_is_source("after the snapshot");
    db.exec(
        Some(&db.name),
        "UPDATE customers SET city = 'bern' WHERE id = 1; DELETE FROM customers WHERE id = 2; INSERT INTO customers VALUES (3, 'cy', 'lima');",
    );
    moto.run(dir.path());
    silver_is_source("after the changes");
    crate::object_store::assert_nothing_stored_in(dir.path());
}

#[test]
fn a_run_killed_at_each_failpoint_loses_and_doubles_nothing() {
    for point in [
        "offsets:customers_changes",
        "before-commit:customers_changes",
        "committed:customers_changes",
    ] {
        let db = Maria::create(&format!("binlog_{}", point.replace([':', '-'], "_")));
        db.exec(
            Some(&db.name),
            "CREATE TABLE customers (id INT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
             INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
        );
        let dir = tempfile::tempdir().expect("tempdir");
        pipeline(dir.path(), &db, "");
        let killed = || {
            let died = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
                .args(["run", "-p", dir.path().to_str().expect("utf-8")])
                .env("CDCFLOW_FAILPOINT", point)
                .output()
                .expect("run");
            assert!(
                !died.status.success() && stderr(&died).contains("failpoint"),
                "{point}: the run did not reach its failpoint: {}{}",
                stdout(&died),
                stderr(&died)
            );
        };
        // Killed in the copy, then in the stream.
        killed();
        run(dir.path());
        db.exec(
            Some(&db.name),
            "INSERT INTO customers VALUES (3, 'cy', 'lima')",
        );
        db.exec(
            Some(&db.name),
            "UPDATE customers SET name = 'ann2' WHERE id = 1",
        );
        killed();
        db.exec(Some(&db.name), "DELETE FROM customers WHERE id = 2");
        run(dir.path());
        assert_silver_is_source(dir.path(), &db, point);
        assert_no_doubles(dir.path());
        assert_eq!(
            query(
                dir.path(),
                "SELECT _change_type, count(*) FROM customers_changes GROUP BY 1 ORDER BY 1"
            ),
            vec!["delete,1", "insert,1", "snapshot,2", "update,1"],
            "{point}: each row copied once, each change once"
        );
    }
}

#[test]
fn a_table_copied_in_chunks_while_it_changes_ends_equal_to_the_source() {
    let db = Maria::create("binlog_chunks");
    db.exec(
        Some(&db.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
         INSERT INTO customers SELECT seq, concat('n', seq), 'c' FROM seq_1_to_1500;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, "");
    // Each chunk of 400 its own batch; a run killed after each of the first two, with
    // rows changed, moved and deleted between them, in copied and uncopied ranges.
    for (round, change) in [
        "UPDATE customers SET city = 'x' WHERE id IN (5, 900, 1400); DELETE FROM customers WHERE id IN (6, 901)",
        "UPDATE customers SET id = 5000 WHERE id = 10; UPDATE customers SET id = 6 WHERE id = 1200; INSERT INTO customers VALUES (10, 'back', 'c')",
    ]
    .iter()
    .enumerate()
    {
        let died = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["run", "-p", dir.path().to_str().expect("utf-8")])
            .env("CDCFLOW_FAILPOINT", "committed:customers_changes")
            .output()
            .expect("run");
        assert!(!died.status.success(), "round {round}: {}", stderr(&died));
        // One chunk committed by each killed run, none larger than the batch.
        assert_eq!(
            query(dir.path(), "SELECT count(*) FROM customers_changes"),
            vec![(400 * (round + 1)).to_string()],
            "round {round}"
        );
        db.exec(Some(&db.name), change);
    }
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the copy");
    assert_no_doubles(dir.path());
}

#[test]
fn what_the_log_cannot_give_fails_naming_the_fix() {
    let db = Maria::create("binlog_refusals");
    db.exec(
        Some(&db.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, amount INT);
         INSERT INTO customers VALUES (1, 'ann', 'oslo', 5);
         CREATE TABLE keyless (id INT, name TEXT);",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(
        dir.path(),
        &db,
        "CREATE OR REFRESH STREAMING TABLE keyless_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'keyless');",
    );
    let err = run_fails(dir.path());
    assert!(
        err.contains("has no primary key") && err.contains("ADD PRIMARY KEY"),
        "a table without a primary key is refused with the fix: {err}"
    );
    // validate finds it too, at the call, while the server answers.
    let out = cdcflow(&["validate", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(
        !out.status.success()
            && stderr(&out).contains("flows.sql:12:22")
            && stderr(&out).contains("has no primary key"),
        "validate names the table at its read_mysql call: {}{}",
        stdout(&out),
        stderr(&out)
    );
    pipeline(dir.path(), &db, "");
    run(dir.path());

    // A child of a cascading foreign key: the server logs no row of a cascade.
    db.exec(
        Some(&db.name),
        "CREATE TABLE parents (id INT PRIMARY KEY) ENGINE=InnoDB;
         CREATE TABLE children (id INT PRIMARY KEY, parent INT,
           FOREIGN KEY (parent) REFERENCES parents (id) ON DELETE CASCADE) ENGINE=InnoDB;",
    );
    let cascading = tempfile::tempdir().expect("tempdir");
    pipeline(
        cascading.path(),
        &db,
        "CREATE OR REFRESH STREAMING TABLE children_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'children');",
    );
    let err = run_fails(cascading.path());
    assert!(
        err.contains("ON DELETE CASCADE") && err.contains("logs no row of what a cascade changes"),
        "a cascading foreign key is refused: {err}"
    );

    // A column's type changed: refused naming the column.
    db.exec(
        Some(&db.name),
        "INSERT INTO customers VALUES (2, 'bob', 'rome', 6)",
    );
    db.exec(Some(&db.name), "ALTER TABLE customers MODIFY amount BIGINT");
    let err = run_fails(dir.path());
    assert!(
        err.contains("column `amount`") && err.contains("--full-refresh"),
        "a changed type names the column and the fix: {err}"
    );
    db.exec(Some(&db.name), "ALTER TABLE customers MODIFY amount INT");
    let out = cdcflow(&[
        "run",
        "-p",
        dir.path().to_str().expect("utf-8"),
        "--full-refresh",
        "customers_changes",
        "--cascade",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_silver_is_source(dir.path(), &db, "after the refresh");

    // The log purged past the checkpoint (a position in a file the server no longer
    // has, as after PURGE BINARY LOGS): never a silent jump.
    let checkpoint = latest_offsets(dir.path());
    let text = std::fs::read_to_string(&checkpoint).expect("checkpoint");
    std::fs::write(&checkpoint, with_a_purged_file(&text)).expect("checkpoint");
    let err = run_fails(dir.path());
    assert!(
        err.contains("is gone from the server") && err.contains("--full-refresh"),
        "a purged log names the refresh: {err}"
    );

    // A dropped table is named.
    let db2 = Maria::create("binlog_dropped");
    db2.exec(
        Some(&db2.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo');",
    );
    let dir2 = tempfile::tempdir().expect("tempdir");
    pipeline(dir2.path(), &db2, "");
    run(dir2.path());
    db2.exec(Some(&db2.name), "DROP TABLE customers");
    db2.exec(
        Some(&db2.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL)",
    );
    let err = run_fails(dir2.path());
    assert!(
        err.contains("was dropped or renamed") && err.contains("--full-refresh"),
        "a dropped table is named: {err}"
    );
}

/// The bronze flow's latest checkpoint offsets (which hold the binary log position).
fn latest_offsets(dir: &Path) -> std::path::PathBuf {
    let offsets = dir.join("_storage/checkpoints/customers_changes/offsets");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&offsets)
        .expect("offsets")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files.pop().expect("an offsets file")
}

/// The position's log file made one the server never had.
fn with_a_purged_file(text: &str) -> String {
    let at = text.find("mysql-bin.").expect("a log file");
    let end = at + "mysql-bin.".len() + 6;
    format!("{}mysql-bin.000000{}", &text[..at], &text[end..])
}

/// A copy of the example `pipelines/<name>` whose source (`source.sql`, its database
/// `database`) is made in `db`, and whose connection goes there.
pub(crate) fn example_on(db: &Maria, name: &str, database: &str) -> tempfile::TempDir {
    let example = crate::repo().join("pipelines").join(name);
    let source = std::fs::read_to_string(example.join("source.sql")).expect("source.sql");
    db.exec(None, &source.replace(database, &db.name));
    let dir = tempfile::tempdir().expect("tempdir");
    crate::copy_dir(&example, dir.path());
    let yaml = std::fs::read_to_string(dir.path().join("pipeline.yaml")).expect("yaml");
    let yaml = yaml
        .replace(database, &db.name)
        .replace("host: 127.0.0.1", &format!("host: {}", db.host))
        .replace("port: 3306", &format!("port: {}", db.port))
        .replace("user: root", &format!("user: {}", db.user));
    std::fs::write(dir.path().join("pipeline.yaml"), yaml).expect("yaml");
    dir
}

#[test]
fn the_example_pipeline_keeps_current_and_history_tables_of_its_source() {
    let db = Maria::create("example_shop");
    let dir = example_on(&db, "shop_mysql", "cdcflow_example_shop");

    let current = "SELECT id, customer, status, amount FROM orders ORDER BY id";
    let open_versions = "SELECT id, customer, status, amount FROM orders_history WHERE __END_AT IS NULL ORDER BY id";
    run(dir.path());
    db.exec(
        Some(&db.name),
        "UPDATE orders SET status = 'shipped' WHERE id = 2",
    );
    db.exec(Some(&db.name), "DELETE FROM orders WHERE id = 3");
    db.exec(
        Some(&db.name),
        "INSERT INTO orders VALUES (4, 'Dee Ito', 'new', 8.00, '2026-12-02 11:00:00')",
    );
    run(dir.path());
    let source = db.rows(current);
    assert_eq!(query(dir.path(), current), source);
    assert_eq!(query(dir.path(), open_versions), source);
    assert_eq!(
        query(dir.path(), "SELECT count(*) FROM orders_history"),
        vec!["5"],
        "3 first versions, the shipped one and Dee's"
    );
}

#[test]
fn a_column_added_with_a_default_fails_naming_it_until_a_new_snapshot_takes_its_values() {
    let db = Maria::create("binlog_default");
    db.exec(
        Some(&db.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, city VARCHAR(20) NOT NULL) ENGINE=InnoDB;
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, "");
    run(dir.path());
    db.exec(
        Some(&db.name),
        "ALTER TABLE customers ADD COLUMN flag VARCHAR(10) NOT NULL DEFAULT 'dflt';
         INSERT INTO customers VALUES (3, 'cy', 'lima', 'x');",
    );
    for _ in 0..2 {
        let said = run_fails(dir.path());
        assert!(
            said.contains("column `flag` was added to the source table with a default")
                && said.contains("dflt")
                && said.contains("cdcflow run --full-refresh customers_changes --cascade"),
            "{said}"
        );
    }
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&[
        "run",
        "-p",
        p,
        "--full-refresh",
        "customers_changes",
        "--cascade",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let sql = "SELECT id, name, city, flag FROM customers ORDER BY id";
    assert_eq!(query(dir.path(), sql), db.rows(sql));
    // Without a default the rows there stay null, as the source has them.
    db.exec(
        Some(&db.name),
        "ALTER TABLE customers ADD COLUMN note TEXT; UPDATE customers SET note = 'n' WHERE id = 1;",
    );
    run(dir.path());
    let sql = "SELECT id, flag, coalesce(note, '-') FROM customers ORDER BY id";
    assert_eq!(query(dir.path(), sql), db.rows(sql));
}
