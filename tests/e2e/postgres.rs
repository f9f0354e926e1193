//! The PostgreSQL source end to end, against a real server (README, "PostgreSQL for
//! the source's tests"): `cdcflow run` takes the snapshot, then the changes, into a
//! bronze streaming table that an AUTO CDC flow keeps as SCD type 1; the silver table
//! equals the source table after every run, and after a run killed between the bronze
//! commit and the slot's acknowledgement (or before the commit). Each test has a
//! database of its own, dropped at the end. Without a server the tests fail, naming
//! what they need.

use std::path::Path;
use std::process::Command;

use cdcflow_postgres::PgConnection;

use crate::{cdcflow, query_csv, stderr, stdout};

mod chunks;
mod client_cert;
mod convergence;
mod many_tables;
mod mysql_tls;
mod operators;
pub(crate) mod read_query;
mod read_query_paging;
mod restart;
mod schema_growth;
mod shared_slot;
mod slots;
mod socket;
mod syncs;
mod tls;
mod validate_login;
mod values;
mod waiting;

/// A database of the test's own on the server of PGHOST/PGPORT/PGUSER.
struct Db {
    admin: PgConnection,
    name: String,
    rt: tokio::runtime::Runtime,
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.into())
}

impl Db {
    fn create(test: &str) -> Db {
        let admin = PgConnection {
            host: env("PGHOST", "127.0.0.1"),
            port: env("PGPORT", "5432").parse().expect("PGPORT"),
            database: "postgres".into(),
            user: env("PGUSER", "postgres"),
            password: std::env::var("PGPASSWORD").ok(),
            tls: Default::default(),
        };
        Db::create_on(admin, test)
    }

    /// A database of the test's own on the server `admin` connects to.
    fn create_on(admin: PgConnection, test: &str) -> Db {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let db = Db {
            name: format!("cdcflow_e2e_{test}"),
            admin,
            rt,
        };
        db.drop_database();
        db.admin_exec(&format!("CREATE DATABASE {}", db.name));
        db
    }

    fn admin_exec(&self, sql: &str) {
        self.rt.block_on(async {
            let client = self.admin.connect().await.unwrap_or_else(|e| {
                panic!(
                    "these tests need a PostgreSQL server with wal_level = logical at {}:{} (user {}): {e}; run `bash .ci/postgres` (README, \"PostgreSQL for the source's tests\")",
                    self.admin.host, self.admin.port, self.admin.user
                )
            });
            client.batch_execute(sql).await.expect(sql);
        });
    }

    fn drop_database(&self) {
        // Two calls: DROP DATABASE cannot share a transaction.
        self.admin_exec(&format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{}' AND NOT active",
            self.name
        ));
        self.admin_exec(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }

    /// Runs `sql` in the test's database, each call one transaction.
    fn exec(&self, sql: &str) {
        let connection = self.admin.with_database(&self.name);
        self.rt.block_on(async {
            let client = connection.connect().await.expect("connect");
            client.batch_execute(sql).await.expect(sql);
        });
    }

    /// The rows of `sql` as CSV lines (values as PostgreSQL prints them).
    fn rows(&self, sql: &str) -> Vec<String> {
        let connection = self.admin.with_database(&self.name);
        self.rt.block_on(async {
            let client = connection.connect().await.expect("connect");
            client
                .simple_query(sql)
                .await
                .expect(sql)
                .into_iter()
                .filter_map(|m| match m {
                    cdcflow_postgres::tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                        (0..r.len())
                            .map(|i| r.get(i).unwrap_or_default().to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                    _ => None,
                })
                .collect()
        })
    }

    /// The slot's confirmed position.
    fn confirmed(&self) -> Vec<String> {
        self.rows(&format!(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE database = '{}'",
            self.name
        ))
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.drop_database();
        }
    }
}

/// A pipeline reading `public.customers` of `db` into bronze and an SCD type 1 table;
/// `schema` declares the columns (else the run asks the server).
fn pipeline(dir: &Path, db: &Db, schema: bool) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: {}\nconnections:\n  src:\n    kind: postgres\n    host: {}\n    port: {}\n    database: {}\n    user: {}\n",
            db.name, db.admin.host, db.admin.port, db.name, db.admin.user
        ),
    )
    .expect("pipeline.yaml");
    let schema = match schema {
        true => ", schema => 'id INT NOT NULL, name STRING, city STRING'",
        false => "",
    };
    std::fs::write(
        dir.join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_postgres(connection => 'src', table => 'public.customers'{schema});

CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customers_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  APPLY AS TRUNCATE WHEN _change_type = 'truncate'
  SEQUENCE BY struct(_commit_lsn, _change_seq)
  COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid);
"
        ),
    )
    .expect("flows.sql");
}

fn run(dir: &Path) -> String {
    let out = cdcflow(&["run", "-p", dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

fn query(dir: &Path, sql: &str) -> Vec<String> {
    let out = query_csv(dir, sql);
    assert!(out.status.success(), "{sql}: {}", stderr(&out));
    stdout(&out).lines().skip(1).map(String::from).collect()
}

/// The silver table equals the source table, row for row.
fn assert_silver_is_source(dir: &Path, db: &Db, when: &str) {
    assert_eq!(
        query(dir, "SELECT id, name, city FROM customers ORDER BY id"),
        db.rows("SELECT id, name, city FROM customers ORDER BY id"),
        "{when}"
    );
}

/// No change is in bronze twice.
fn assert_no_doubles(dir: &Path) {
    let all = query(dir, "SELECT count(*) FROM customers_changes");
    let distinct = query(
        dir,
        "SELECT count(*) FROM (SELECT DISTINCT _commit_lsn, _change_seq, id FROM customers_changes)",
    );
    assert_eq!(all, distinct, "a change was stored twice");
}

#[test]
fn snapshot_then_changes_then_nothing_keeps_scd1_equal_to_the_source() {
    let db = Db::create("snapshot_changes");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome'), (3, 'cy', 'lima');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);

    run(dir.path());
    assert_eq!(
        query(
            dir.path(),
            "SELECT _change_type, count(*) FROM customers_changes GROUP BY 1"
        ),
        vec!["snapshot,3"]
    );
    assert_silver_is_source(dir.path(), &db, "after the snapshot");

    db.exec("INSERT INTO customers VALUES (4, 'dee', 'kyiv')");
    db.exec("UPDATE customers SET city = 'bern' WHERE id = 1");
    db.exec("DELETE FROM customers WHERE id = 3");
    db.exec("UPDATE customers SET id = 20 WHERE id = 2");
    db.exec("BEGIN; UPDATE customers SET name = 'dee2' WHERE id = 4; UPDATE customers SET name = 'dee3' WHERE id = 4; COMMIT");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the changes");
    assert_eq!(
        query(
            dir.path(),
            "SELECT _change_type, count(*) FROM customers_changes GROUP BY 1 ORDER BY 1"
        ),
        vec!["delete,2", "insert,1", "snapshot,3", "update,4"]
    );
    let position = db.confirmed();

    // Nothing new: nothing committed, the slot where it was.
    let bronze = query(dir.path(), "SELECT count(*) FROM customers_changes");
    run(dir.path());
    assert_eq!(
        query(dir.path(), "SELECT count(*) FROM customers_changes"),
        bronze
    );
    assert_eq!(db.confirmed(), position);

    db.exec("TRUNCATE customers");
    db.exec("INSERT INTO customers VALUES (7, 'gus', 'faro')");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after a truncate");
    assert_no_doubles(dir.path());

    // Status shows the slot's retained WAL and how far the flow is behind the server.
    let out = cdcflow(&[
        "status",
        "-p",
        dir.path().to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bronze: serde_json::Value = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|f| f["flow"] == "customers_changes")
        .expect("the bronze flow's status");
    let source = &bronze["sources"][0];
    assert_eq!(
        source["source"], "postgres:src:public.customers",
        "{bronze}"
    );
    assert!(source["retained_bytes"].as_i64().is_some(), "{bronze}");
    assert!(
        source["behind_bytes"].as_i64().is_some_and(|b| b >= 0),
        "{bronze}"
    );
    assert!(source["warning"].is_null(), "{bronze}");
    // The run read everything committed before it began: the lag is the time since.
    assert!(
        source["lag_seconds"]
            .as_f64()
            .is_some_and(|l| (0.0..120.0).contains(&l)),
        "{bronze}"
    );
    let text = cdcflow(&["status", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(
        stdout(&text).contains(" behind the server, lag "),
        "{}",
        stdout(&text)
    );
    assert!(
        stdout(&text).contains("source postgres:src:public.customers: "),
        "{}",
        stdout(&text)
    );
}

/// With the pipeline's storage in a bucket, the capture keeps the storage's identity
/// and its slot record there (nothing in the pipeline folder), names the bucket in the
/// publication's comment, and keeps SCD type 1 equal to the source across changes.
#[test]
fn a_pipeline_stored_in_a_bucket_captures_changes_and_keeps_its_slot_record_there() {
    use cdcflow_runtime::storage::{Key, Storage};
    let moto = crate::object_store::Moto::start();
    moto.create_bucket("lake");
    let db = Db::create("bucket_storage");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    crate::object_store::store_at(dir.path(), "s3://lake/pg");
    let silver_is_source = |when: &str| {
        let ours: Vec<String> = moto
            .query(
                dir.path(),
                "SELECT id, name, city FROM customers ORDER BY id",
            )
            .lines()
            .skip(1)
            .map(String::from)
            .collect();
        assert_eq!(
            ours,
            db.rows("SELECT id, name, city FROM customers ORDER BY id"),
            "{when}"
        );
    };
    moto.run(dir.path());
    silver_is_source("after the snapshot");
    db.exec("UPDATE customers SET city = 'bern' WHERE id = 1; DELETE FROM customers WHERE id = 2;");
    db.exec("INSERT INTO customers VALUES (3, 'cy', 'lima')");
    moto.run(dir.path());
    silver_is_source("after the changes");
    crate::object_store::assert_nothing_stored_in(dir.path());

    let owned = moto.options();
    let storage = Storage::remote("s3://lake/pg", &crate::object_store::as_str_pairs(&owned))
        .expect("storage");
    let records = db.rt.block_on(async {
        let identity = storage
            .get(&Key::of(&["_identity.json"]).expect("key"))
            .await
            .expect("read");
        let slots = storage
            .list(&Key::of(&["_postgres"]).expect("key"))
            .await
            .expect("list");
        (identity, slots)
    });
    let identity: serde_json::Value =
        serde_json::from_slice(&records.0.expect("the identity is in the bucket")).expect("json");
    assert_eq!(identity["path"], "s3://lake/pg/", "{identity}");
    assert_eq!(records.1.len(), 1, "one slot record: {:?}", records.1);
    let comment = db.rows(
        "SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname LIKE 'cdcflow%'",
    );
    assert_eq!(
        comment,
        vec![format!(
            "cdcflow storage {} s3://lake/pg/",
            identity["id"].as_str().expect("id")
        )]
    );
}

#[test]
fn a_run_killed_before_or_after_the_bronze_commit_loses_and_doubles_nothing() {
    for point in [
        "offsets:customers_changes",
        "before-commit:customers_changes",
        "committed:customers_changes",
    ] {
        let test = point.replace([':', '-'], "_");
        let db = Db::create(&test);
        db.exec(
            "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
             INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
        );
        let dir = tempfile::tempdir().expect("tempdir");
        pipeline(dir.path(), &db, true);
        run(dir.path());
        let acknowledged = db.confirmed();

        db.exec("INSERT INTO customers VALUES (3, 'cy', 'lima')");
        db.exec("UPDATE customers SET name = 'ann2' WHERE id = 1");
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
        // The slot was not told: the server still holds the changes.
        assert_eq!(db.confirmed(), acknowledged, "{point}");

        db.exec("DELETE FROM customers WHERE id = 2");
        run(dir.path());
        assert_silver_is_source(dir.path(), &db, point);
        assert_no_doubles(dir.path());
        assert_eq!(
            query(dir.path(), "SELECT count(*) FROM customers_changes"),
            vec!["5"],
            "{point}: 2 snapshot rows, an insert, an update and a delete"
        );
        assert_ne!(db.confirmed(), acknowledged, "{point}: the slot moves on");
    }
}

#[test]
fn the_example_pipeline_keeps_current_and_history_tables_of_its_source() {
    let db = Db::create("example");
    let example = crate::repo().join("pipelines/crm_postgres");
    db.exec(&std::fs::read_to_string(example.join("source.psql")).expect("source.psql"));
    let dir = tempfile::tempdir().expect("tempdir");
    crate::copy_dir(&example, dir.path());
    let yaml = std::fs::read_to_string(dir.path().join("pipeline.yaml")).expect("yaml");
    let yaml = yaml
        .replace("cdcflow_example_crm", &db.name)
        .replace("host: 127.0.0.1", &format!("host: {}", db.admin.host))
        .replace("port: 5432", &format!("port: {}", db.admin.port))
        .replace("user: postgres", &format!("user: {}", db.admin.user));
    std::fs::write(dir.path().join("pipeline.yaml"), yaml).expect("yaml");

    let current = "SELECT id, name, coalesce(email, '-'), city FROM customers ORDER BY id";
    let open_versions = "SELECT id, name, coalesce(email, '-'), city FROM customers_history WHERE __END_AT IS NULL ORDER BY id";
    run(dir.path());
    db.exec("UPDATE customers SET city = 'Bergen' WHERE id = 1");
    db.exec("DELETE FROM customers WHERE id = 3");
    db.exec("INSERT INTO customers (id, name, email, city) VALUES (4, 'Dee Ito', 'dee@example.com', 'Kyoto')");
    db.exec("UPDATE customers SET email = NULL WHERE id = 2");
    run(dir.path());
    let source = db.rows(current);
    assert_eq!(query(dir.path(), current), source);
    assert_eq!(query(dir.path(), open_versions), source);
    assert_eq!(
        query(dir.path(), "SELECT count(*) FROM customers_history"),
        vec!["6"],
        "3 first versions, Bergen, Dee, and Bob without email"
    );
}

/// Waits (a minute at most) until the silver table equals the source table.
fn wait_for_source(dir: &Path, db: &Db) -> bool {
    let sql = "SELECT id, name, city FROM customers ORDER BY id";
    reaches(dir, db, (sql, sql), std::time::Duration::from_secs(60))
}

/// Waits (`within` at most) until `ours` gives, on the pipeline's tables, the rows
/// `source` gives on the source.
fn reaches(dir: &Path, db: &Db, (ours, source): (&str, &str), within: std::time::Duration) -> bool {
    let began = std::time::Instant::now();
    while began.elapsed() < within {
        let out = query_csv(dir, ours);
        let silver: Vec<String> = stdout(&out).lines().skip(1).map(String::from).collect();
        if out.status.success() && silver == db.rows(source) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}

#[test]
fn continuous_mode_follows_changes_as_they_commit() {
    let db = Db::create("continuous");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, true);
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(&yaml, format!("{text}trigger_interval_seconds: 0.5\n")).expect("yaml");
    let child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args([
            "run",
            "-p",
            dir.path().to_str().expect("utf-8"),
            "--continuous",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let snapshot = wait_for_source(dir.path(), &db);
    db.exec("INSERT INTO customers VALUES (3, 'cy', 'lima')");
    db.exec("UPDATE customers SET city = 'bern' WHERE id = 1");
    db.exec("DELETE FROM customers WHERE id = 2");
    let changes = wait_for_source(dir.path(), &db);
    let (term, out) = stop(child);
    assert!(snapshot, "the snapshot did not arrive: {}", stderr(&out));
    assert!(changes, "the changes did not arrive: {}", stderr(&out));
    assert!(term.success() && out.status.success(), "{}", stderr(&out));
    assert_no_doubles(dir.path());
}

#[test]
fn a_full_refresh_takes_a_new_snapshot_and_a_missing_secret_is_named() {
    let db = Db::create("full_refresh");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers SELECT i, 'n' || i, 'c' || i FROM generate_series(1, 25000) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    run(dir.path());
    db.exec(
        "UPDATE customers SET city = 'x' WHERE id <= 10; DELETE FROM customers WHERE id > 24990",
    );
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "before the refresh");

    let out = cdcflow(&[
        "run",
        "-p",
        dir.path().to_str().expect("utf-8"),
        "--full-refresh",
        "customers_changes",
        "--cascade",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        query(
            dir.path(),
            "SELECT _change_type, count(*) FROM customers_changes GROUP BY 1"
        ),
        vec!["snapshot,24990"],
        "the refreshed bronze holds the new snapshot only"
    );
    assert_silver_is_source(dir.path(), &db, "after the refresh");
    db.exec("INSERT INTO customers VALUES (30000, 'z', 'z')");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after a change past the refresh");

    // A password variable that is not set is named, and nothing is read.
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(
        &yaml,
        format!("{text}    password_env: CDCFLOW_TEST_UNSET_PASSWORD\n"),
    )
    .expect("yaml");
    let out = cdcflow(&["run", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("`CDCFLOW_TEST_UNSET_PASSWORD` is not set"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn an_unchanged_toasted_value_keeps_the_stored_value() {
    let db = Db::create("toast");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL, notes text);
         INSERT INTO customers SELECT i, 'n' || i, 'c' || i,
           (SELECT string_agg(md5(i::text || g::text), '') FROM generate_series(1, 1000) g)
         FROM generate_series(1, 3) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    let notes = "SELECT id, md5(coalesce(notes, '')) FROM customers ORDER BY id";
    let stored = "SELECT id, md5(coalesce(notes, '')) FROM customers ORDER BY id";
    run(dir.path());
    // Updates that leave the TOASTed column alone: PostgreSQL leaves it out of the
    // stream. One in a later run than the row's snapshot, one twice in one run.
    db.exec("UPDATE customers SET city = 'x' WHERE id = 1");
    db.exec("UPDATE customers SET city = 'y' WHERE id = 2");
    db.exec("UPDATE customers SET name = 'z' WHERE id = 2");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after updates that left notes alone");
    assert_eq!(query(dir.path(), stored), db.rows(notes));
    let nulls = query(
        dir.path(),
        "SELECT count(*) FROM customers_changes WHERE notes IS NULL",
    );
    assert_eq!(nulls, vec!["0"], "no left-out value was stored as null");
    // The column itself changed, then left alone again in the same run.
    db.exec("UPDATE customers SET notes = 'short now' WHERE id = 3");
    db.exec("UPDATE customers SET city = 'w' WHERE id = 3");
    db.exec("UPDATE customers SET city = 'v' WHERE id = 1");
    run(dir.path());
    assert_eq!(query(dir.path(), stored), db.rows(notes));
    assert_silver_is_source(dir.path(), &db, "after a changed TOASTed value");
    // Key changes that leave it alone: the value is the old key's (stored before, and
    // within the run).
    db.exec("UPDATE customers SET id = 11 WHERE id = 2");
    db.exec("UPDATE customers SET id = 12 WHERE id = 11");
    run(dir.path());
    assert_eq!(query(dir.path(), stored), db.rows(notes));
    assert_silver_is_source(dir.path(), &db, "after key changes");
}

#[test]
fn a_toasted_value_left_alone_by_an_update_then_a_key_change_in_one_read_is_carried() {
    let db = Db::create("toast_key_change");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL, notes text);
         ALTER TABLE customers ALTER COLUMN notes SET STORAGE EXTERNAL;
         INSERT INTO customers SELECT i, 'n' || i, 'c' || i,
           (SELECT string_agg(md5(i::text || g::text), '') FROM generate_series(1, 100) g)
         FROM generate_series(1, 2) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    run(dir.path());
    // In one read: an update leaves `notes` out, then the key changes (leaving it out
    // again). The value is key 1's stored one, not key 3's (which has none).
    db.exec(
        "UPDATE customers SET name = 'b' WHERE id = 1; UPDATE customers SET id = 3 WHERE id = 1;",
    );
    db.exec("BEGIN; UPDATE customers SET city = 'x' WHERE id = 2; UPDATE customers SET id = 4 WHERE id = 2; COMMIT");
    run(dir.path());
    let notes = "SELECT id, name, city, md5(coalesce(notes, '')) FROM customers ORDER BY id";
    assert_eq!(query(dir.path(), notes), db.rows(notes));
    // And later runs go on.
    db.exec("UPDATE customers SET city = 'y' WHERE id = 3");
    run(dir.path());
    assert_eq!(query(dir.path(), notes), db.rows(notes));
}

#[test]
fn a_column_added_upstream_flows_in_and_a_dropped_one_fails_loudly() {
    let db = Db::create("drift");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    run(dir.path());
    db.exec("INSERT INTO customers VALUES (3, 'cy', 'lima')");
    db.exec("ALTER TABLE customers ADD COLUMN tier text");
    db.exec("INSERT INTO customers VALUES (4, 'dee', 'kyiv', 'gold')");
    db.exec("UPDATE customers SET tier = 'silver' WHERE id = 1");
    let out = run(dir.path());
    assert!(out.contains("gained column(s) `tier`"), "{out}");
    let sql = "SELECT id, name, city, coalesce(tier, '-') FROM customers ORDER BY id";
    assert_eq!(query(dir.path(), sql), db.rows(sql));
    assert_eq!(
        query(
            dir.path(),
            "SELECT id, coalesce(tier, '-') FROM customers_changes WHERE _change_type = 'insert' ORDER BY id"
        ),
        vec!["3,-", "4,gold"],
        "the row inserted before the column was added has none"
    );

    db.exec("UPDATE customers SET city = 'bern' WHERE id = 2");
    db.exec("ALTER TABLE customers DROP COLUMN city");
    let out = cdcflow(&["run", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        said.contains(
            "column `city` of `public.customers` is in the change stream but no longer in the table"
        ),
        "{said}"
    );
    assert!(said.contains("--full-refresh"), "{said}");
}

#[test]
fn a_backlog_larger_than_a_batch_is_read_in_several_batches() {
    let db = Db::create("batches");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, true);
    let flows = dir.path().join("flows.sql");
    let sql = std::fs::read_to_string(&flows).expect("flows.sql");
    std::fs::write(
        &flows,
        sql.replace(
            "table => 'public.customers'",
            "table => 'public.customers', max_changes_per_batch => 2",
        ),
    )
    .expect("flows.sql");
    run(dir.path());
    for i in 2..=6 {
        db.exec(&format!(
            "INSERT INTO customers VALUES ({i}, 'n{i}', 'c{i}')"
        ));
    }
    // One transaction of three changes, over the limit: read over two batches, the
    // second resuming inside it.
    db.exec("BEGIN; UPDATE customers SET city = 'x' WHERE id = 1; UPDATE customers SET city = 'y' WHERE id = 2; DELETE FROM customers WHERE id = 3; COMMIT");
    let out = run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after several batches");
    assert_no_doubles(dir.path());
    assert_eq!(
        query(dir.path(), "SELECT count(*) FROM customers_changes"),
        vec!["9"]
    );
    // Five inserts and the transaction, in batches after the snapshot's.
    let batches = query(
        dir.path(),
        "SELECT count(DISTINCT _commit_lsn) FROM customers_changes WHERE _change_type <> 'snapshot'",
    );
    assert_eq!(batches, vec!["6"], "five inserts and one transaction");
    // The snapshot's batch, then four: [2 inserts], [2 inserts], [1 insert + the
    // transaction's first two changes], [its third].
    let history = query_csv(dir.path(), "DESCRIBE HISTORY customers_changes");
    let text = stdout(&history);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let at = header
        .iter()
        .position(|h| *h == "batch")
        .expect("a batch column");
    let mut committed: Vec<String> = lines
        .filter_map(|l| l.split(',').nth(at))
        .filter(|b| !b.is_empty())
        .map(String::from)
        .collect();
    committed.sort();
    committed.dedup();
    assert_eq!(committed, vec!["0", "1", "2", "3", "4"], "{text}");
    assert!(
        out.contains("read 8"),
        "the summary adds the batches up: {out}"
    );
}

/// A deterministic pseudo-random sequence (no dependency for a test's workload).
pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

/// Rows of the concurrent test's table (`CDCFLOW_PG_E2E_ROWS`, 100,000 by default).
fn workload_rows() -> u64 {
    std::env::var("CDCFLOW_PG_E2E_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

pub(crate) fn spawn_continuous(dir: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.to_str().expect("utf-8"), "--continuous"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Stops a `--continuous` run as an operator does (SIGTERM) and waits for it: whether
/// the signal was sent, and what the run wrote.
pub(crate) fn stop(child: std::process::Child) -> (std::process::ExitStatus, std::process::Output) {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    (term, child.wait_with_output().expect("wait"))
}

/// Inserts, updates (some of a TOASTed column, some of the key) and deletes from one
/// connection; `thread` owns the ids it inserts.
fn workload(db: &Db, thread: u64, ops: u64, rows: u64) {
    let connection = db.admin.with_database(&db.name);
    db.rt.block_on(async {
        let client = connection.connect().await.expect("connect");
        let mut rng = Lcg(thread * 7919 + 1);
        let mut next = rows + 1_000_000 * (thread + 1);
        for _ in 0..ops {
            let id = 1 + rng.below(rows);
            let sql = match rng.below(10) {
                0 | 1 => {
                    next += 1;
                    format!("INSERT INTO customers VALUES ({next}, 'new{next}', 'c', NULL)")
                }
                2..=4 => format!("UPDATE customers SET city = 'city{}' WHERE id = {id}", rng.below(1000)),
                5 => format!(
                    "UPDATE customers SET notes = (SELECT string_agg(md5(g::text || '{id}'), '') FROM generate_series(1, 300) g) WHERE id = {id}"
                ),
                6 => {
                    next += 1;
                    format!("UPDATE customers SET id = {next} WHERE id = {id}")
                }
                7 => format!("DELETE FROM customers WHERE id = {id}"),
                _ => format!(
                    "BEGIN; UPDATE customers SET name = 'a' WHERE id = {id}; UPDATE customers SET name = 'b{id}' WHERE id = {id}; COMMIT"
                ),
            };
            client.batch_execute(&sql).await.expect(&sql);
        }
    });
}

#[test]
fn concurrent_writers_and_two_kills_leave_scd1_and_scd2_equal_to_the_source() {
    let rows = workload_rows();
    let db = Db::create("concurrent");
    db.exec(&format!(
        "CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, city text NOT NULL, notes text);
         INSERT INTO customers SELECT i, 'n' || i, 'c' || (i % 97),
           CASE WHEN i % 50 = 0 THEN (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 300) g) END
         FROM generate_series(1, {rows}) i;"
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    std::fs::write(
        dir.path().join("history.sql"),
        "CREATE OR REFRESH STREAMING TABLE customers_history;
CREATE FLOW customers_history_cdc AS AUTO CDC INTO customers_history FROM STREAM(customers_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  SEQUENCE BY struct(_commit_lsn, _change_seq)
  COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid)
  STORED AS SCD TYPE 2;
",
    )
    .expect("history.sql");
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(&yaml, format!("{text}trigger_interval_seconds: 0.2\n")).expect("yaml");

    let mut child = spawn_continuous(dir.path());
    let ops = 400;
    for round in 0..3 {
        std::thread::scope(|s| {
            for thread in 0..3 {
                let db = &db;
                s.spawn(move || workload(db, round * 3 + thread, ops, rows));
            }
        });
        if round < 2 {
            // Killed at whatever it is doing, then started again.
            let _ = child.kill();
            let _ = child.wait();
            child = spawn_continuous(dir.path());
        }
    }
    let current = "SELECT id, name, city, md5(coalesce(notes, '-')) FROM customers ORDER BY id";
    let open = "SELECT id, name, city, md5(coalesce(notes, '-')) FROM customers_history WHERE __END_AT IS NULL ORDER BY id";
    let source = db.rows(current);
    let mut equal = false;
    for _ in 0..600 {
        let out = query_csv(dir.path(), current);
        if out.status.success()
            && stdout(&out)
                .lines()
                .skip(1)
                .eq(source.iter().map(String::as_str))
        {
            equal = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let (term, out) = stop(child);
    assert!(
        equal,
        "the SCD type 1 table did not reach the source: {}",
        stderr(&out)
    );
    assert!(
        term.success() && out.status.success(),
        "kill -TERM: {term}; the continuous run: {}; its stderr: {}",
        out.status,
        stderr(&out)
    );
    assert_eq!(query(dir.path(), open), source, "SCD type 2 open versions");
    assert_no_doubles(dir.path());
}
