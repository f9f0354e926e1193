//! `syncs:` against the local MariaDB: one declaration captures every table of a
//! database (a pattern, an exclusion, a table without a primary key left out, per-table
//! overrides), each into its own bronze and SCD tables equal to the source after every
//! run; the binary log is read once per run for all the tables; a table created later
//! joins with its own snapshot, one dropped is reported and its tables kept readable.

use std::path::Path;

use crate::postgres::read_query::Maria;
use crate::{cdcflow, stderr, stdout};

use super::query;

/// pipeline.yaml's connection `shop` to `db` and a sync `shop` of all its tables, then
/// `more` (the sync's further keys).
fn sync_yaml(name: &str, db: &Maria, more: &str) -> String {
    format!(
        "name: {name}
connections:
  shop:
    kind: mariadb
    host: {host}
    port: {port}
    database: {db_name}
    user: {user}
syncs:
  shop:
    connection: shop
    tables: '{db_name}.*'
{more}",
        host = db.host,
        port = db.port,
        db_name = db.name,
        user = db.user,
    )
}

fn pipeline(dir: &Path, db: &Maria) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        sync_yaml(
            "mysql_syncs",
            db,
            &format!(
                "    exclude: ['{name}.tmp_*']
    max_changes_per_batch: 3
    overrides:
      customers:
        exclude_columns: [secret]
        scd_type: [1, 2]
        track_history_except: [visits]
      payments:
        keys: [ref]
        target: silver_payments
",
                name = db.name
            ),
        ),
    )
    .expect("pipeline.yaml");
}

/// `cdcflow run` with the binary log reads logged: the run's stdout and how many times
/// it read the log.
fn run(dir: &Path) -> (String, usize) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.to_str().expect("utf-8")])
        .env("RUST_LOG", "warn,cdcflow_mysql=info")
        .output()
        .expect("run cdcflow");
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{o}{e}");
    (o, e.matches("reading the binary log").count())
}

fn assert_equal(dir: &Path, db: &Maria, target: &str, source: &str, columns: &str, when: &str) {
    let silver = query(
        dir,
        &format!("SELECT {columns} FROM {target} ORDER BY 1, 2"),
    );
    let rows = db.rows(&format!("SELECT {columns} FROM {source} ORDER BY 1, 2"));
    assert_eq!(silver, rows, "{when}: {target} differs from {source}");
}

fn assert_all_equal(dir: &Path, db: &Maria, when: &str) {
    assert_equal(dir, db, "orders", "orders", "id, amount, note", when);
    assert_equal(
        dir,
        db,
        "customers",
        "customers",
        "region, cid, name, visits",
        when,
    );
    assert_equal(dir, db, "silver_payments", "payments", "ref, amount", when);
    // The open versions of the history are the current rows.
    assert_equal(
        dir,
        db,
        "customers_history WHERE __END_AT IS NULL",
        "customers",
        "region, cid, name, visits",
        when,
    );
}

#[test]
fn one_declaration_keeps_every_table_of_a_database_and_reads_the_log_once_per_run() {
    let db = Maria::create("binlog_syncs");
    db.exec(
        Some(&db.name),
        "CREATE TABLE orders (id INT PRIMARY KEY, amount DECIMAL(10,2), note VARCHAR(20));
         CREATE TABLE customers (cid INT, region VARCHAR(5), name VARCHAR(20), visits INT, secret VARCHAR(20),
           PRIMARY KEY (region, cid));
         CREATE TABLE payments (id INT PRIMARY KEY, ref VARCHAR(10) NOT NULL UNIQUE, amount INT);
         CREATE TABLE audit (msg TEXT);
         CREATE TABLE tmp_scratch (id INT PRIMARY KEY);
         INSERT INTO orders VALUES (1, 10.50, 'a'), (2, 20, 'b'), (3, 30, 'c'), (4, 40, 'd');
         INSERT INTO customers VALUES (1, 'eu', 'Ann', 0, 's1'), (2, 'us', 'Bob', 0, 's2');
         INSERT INTO payments VALUES (1, 'p1', 5);",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    pipeline(p, &db);

    // validate lists each table with its keys and what it becomes.
    let out = cdcflow(&["validate", "-p", p.to_str().expect("utf-8")]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{said}");
    for expected in [
        "sync `shop` (mysql connection `shop`): 3 table(s)",
        "keys (region, cid)  → customers_changes → customers (SCD 1), customers_history (SCD 2)",
        "keys (ref)  → payments_changes → silver_payments (SCD 1)",
        "audit      not synced: no primary key",
    ] {
        assert!(
            said.contains(expected),
            "validate should say `{expected}`:\n{said}"
        );
    }
    assert!(
        !said.contains("tmp_scratch"),
        "an excluded table is not listed:\n{said}"
    );

    run(p);
    assert_all_equal(p, &db, "after the snapshot");
    let header = stdout(&crate::query_csv(p, "SELECT * FROM customers LIMIT 0"));
    assert!(
        !header.contains("secret"),
        "an excluded column stays out: {header}"
    );

    // Changes over every table, more than a batch of each: one read of the log.
    db.exec(
        Some(&db.name),
        "INSERT INTO orders VALUES (5, 50, 'e'), (6, 60, 'f');
         UPDATE orders SET amount = amount + 1 WHERE id <= 3;
         DELETE FROM orders WHERE id = 4;
         UPDATE customers SET visits = visits + 1 WHERE cid = 1;
         UPDATE customers SET name = 'Anna' WHERE cid = 1;
         UPDATE customers SET cid = 3 WHERE cid = 2;
         INSERT INTO payments VALUES (2, 'p2', 7);
         UPDATE payments SET amount = 6 WHERE ref = 'p1';",
    );
    let (_, reads) = run(p);
    assert_all_equal(p, &db, "after changes to every table");
    // Each table's batches of 3 read up to its own place: the log is read again only
    // for the table that reached its limit, never once per table.
    assert!(reads >= 1, "the log was read");
    let versions = query(
        p,
        "SELECT count(*) FROM customers_history WHERE cid = 1 AND region = 'eu'",
    );
    assert_eq!(
        versions,
        ["2"],
        "a change of visits alone (track_history_except) makes no new version"
    );

    // A quiet round: the log is read once for the three tables.
    db.exec(Some(&db.name), "INSERT INTO orders VALUES (7, 70, 'g')");
    let (_, reads) = run(p);
    assert_eq!(
        reads, 1,
        "one read of the binary log serves every table of the sync"
    );
    assert_all_equal(p, &db, "after a quiet round");

    // A table created later joins with its own snapshot; one dropped is reported.
    db.exec(
        Some(&db.name),
        "CREATE TABLE items (sku VARCHAR(10) PRIMARY KEY, qty INT);
         INSERT INTO items VALUES ('x', 1), ('y', 2);
         DROP TABLE payments;",
    );
    let out = cdcflow(&["run", "-p", p.to_str().expect("utf-8")]);
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{o}{e}");
    assert!(
        e.contains("is no longer on the server (dropped or renamed): payments_changes, silver_payments kept as they were"),
        "a dropped table is reported: {e}"
    );
    assert_eq!(
        query(p, "SELECT sku, qty FROM items ORDER BY sku"),
        ["x,1", "y,2"]
    );
    assert_eq!(
        query(p, "SELECT ref, amount FROM silver_payments ORDER BY ref"),
        ["p1,6", "p2,7"],
        "the tables of a dropped source table stay readable"
    );
    let status = cdcflow(&["status", "-p", p.to_str().expect("utf-8")]);
    assert!(
        stdout(&status).contains("is gone from the server"),
        "status lists the gone table: {}",
        stdout(&status)
    );
    let tables = stdout(&cdcflow(&["tables", "-p", p.to_str().expect("utf-8")]));
    for name in ["items_changes", "items ", "orders ", "silver_payments"] {
        assert!(
            tables.lines().any(|l| l.starts_with(name)),
            "`tables` lists {name}:\n{tables}"
        );
    }
    let glob = cdcflow(&["run", "-p", p.to_str().expect("utf-8"), "--flow", "items*"]);
    assert!(glob.status.success(), "{}", stderr(&glob));
    assert!(stdout(&glob).contains("items_apply"), "{}", stdout(&glob));
    assert!(!stdout(&glob).contains("orders_apply"), "{}", stdout(&glob));
}

#[test]
fn the_sync_example_keeps_every_table_of_its_database() {
    let db = Maria::create("example_sync");
    let dir = super::example_on(&db, "shop_sync", "cdcflow_example_sync");
    let p = dir.path();
    run(p);
    db.exec(
        Some(&db.name),
        "UPDATE orders SET status = 'shipped' WHERE id = 11;
         UPDATE customers SET city = 'Bergen' WHERE id = 1;
         DELETE FROM order_lines WHERE order_id = 10 AND line = 2;",
    );
    run(p);
    assert_equal(
        p,
        &db,
        "orders",
        "orders",
        "id, customer_id, status, amount",
        "the example",
    );
    assert_equal(
        p,
        &db,
        "order_lines",
        "order_lines",
        "order_id, line, sku, qty",
        "the example",
    );
    assert_equal(
        p,
        &db,
        "customers",
        "customers",
        "id, name, city",
        "the example",
    );
    assert_eq!(
        query(
            p,
            "SELECT id, city FROM customers_history ORDER BY id, __START_AT"
        ),
        ["1,Oslo", "1,Bergen", "2,Lima"]
    );
    let tables = stdout(&cdcflow(&["tables", "-p", p.to_str().expect("utf-8")]));
    assert!(!tables.contains("tmp_import"), "{tables}");
}

/// A sync whose pipeline's storage is in a bucket (moto) keeps its record there: a
/// table dropped on the server is reported once, its tables stay readable, and
/// `status` lists it from the bucket's record; nothing is written to a folder.
#[test]
fn a_sync_stored_in_a_bucket_keeps_its_record_there() {
    let moto = crate::object_store::Moto::start();
    moto.create_bucket("lake");
    let db = Maria::create("binlog_syncs_bucket");
    db.exec(
        Some(&db.name),
        "CREATE TABLE orders (id INT PRIMARY KEY, amount INT);
         CREATE TABLE payments (id INT PRIMARY KEY, amount INT);
         INSERT INTO orders VALUES (1, 10), (2, 20);
         INSERT INTO payments VALUES (1, 5);",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    let yaml = sync_yaml("mysql_syncs_bucket", &db, "");
    std::fs::write(
        p.join("pipeline.yaml"),
        format!("{yaml}storage: s3://lake/pipelines/mysql_syncs\n"),
    )
    .expect("pipeline.yaml");
    let shown = p.to_str().expect("utf-8");
    let run = || {
        let out = moto.cdcflow(&["run", "-p", shown]);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        stderr(&out)
    };
    run();
    db.exec(
        Some(&db.name),
        "UPDATE orders SET amount = 11 WHERE id = 1; DROP TABLE payments;",
    );
    let said = run();
    assert!(
        said.contains("is no longer on the server (dropped or renamed): payments_changes, payments kept as they were"),
        "{said}"
    );
    assert_eq!(
        moto.query(p, "SELECT id, amount FROM orders ORDER BY id"),
        "id,amount\n1,11\n2,20\n"
    );
    assert_eq!(
        moto.query(p, "SELECT id, amount FROM payments ORDER BY id"),
        "id,amount\n1,5\n"
    );
    let status = moto.cdcflow(&["status", "-p", shown]);
    assert!(
        stdout(&status).contains("is gone from the server"),
        "{}",
        stdout(&status)
    );
    // Said once: the next run keeps it as gone without a new note.
    assert!(!run().contains("is no longer on the server"));
    crate::object_store::assert_nothing_stored_in(p);
}

#[test]
fn a_truncate_never_freezes_a_synced_history_table() {
    let db = Maria::create("sync_truncate");
    db.exec(
        Some(&db.name),
        "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(10));
         INSERT INTO t VALUES (1, 'a'), (3, 'c');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    std::fs::write(
        p.join("pipeline.yaml"),
        sync_yaml("sync_truncate", &db, "    scd_type: [1, 2]\n"),
    )
    .expect("pipeline.yaml");
    run(p);
    db.exec(Some(&db.name), "TRUNCATE t; INSERT INTO t VALUES (2, 'b');");
    // Every later run goes on: the truncate's row, without a key, is not applied to the
    // history (SCD type 2 takes no truncate), so it no longer fails for its null key.
    run(p);
    run(p);
    db.exec(Some(&db.name), "UPDATE t SET name = 'bb' WHERE id = 2");
    run(p);
    assert_equal(
        p,
        &db,
        "t",
        "t",
        "id, name",
        "the current table after a truncate",
    );
    assert_eq!(
        query(
            p,
            "SELECT id, name, __END_AT IS NULL FROM t_history ORDER BY id, __START_AT"
        ),
        ["1,a,true", "2,b,false", "2,bb,true", "3,c,true"],
        "the history goes on after the truncate; the versions only the truncate removed stay open (docs/sources.md)"
    );
}
