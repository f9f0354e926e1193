//! One replication slot for every table a pipeline reads through a connection: the
//! slot is acknowledged only up to the lowest position the tables' flows committed
//! (each bronze table commits on its own), a table added later takes its own snapshot
//! while the others go on, and a run killed between one table's commit and the slot's
//! acknowledgement loses and doubles nothing.

use std::path::Path;
use std::process::Command;

use super::{Db, query, run};
use crate::{cdcflow, stderr, stdout};

/// A pipeline that reads `tables` of `db` through one connection, each into a bronze
/// `<t>_changes` table and an SCD type 1 table `<t>`.
fn pipeline(dir: &Path, db: &Db, tables: &[&str]) {
    pipeline_reading(dir, db, tables, "");
}

/// [`pipeline`], each `read_postgres` given `options` too (`, name => value`).
fn pipeline_reading(dir: &Path, db: &Db, tables: &[&str], options: &str) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: {}\nconnections:\n  src:\n    kind: postgres\n    host: {}\n    port: {}\n    database: {}\n    user: {}\n",
            db.name, db.admin.host, db.admin.port, db.name, db.admin.user
        ),
    )
    .expect("pipeline.yaml");
    let flows: String = tables
        .iter()
        .map(|t| {
            format!(
                "CREATE OR REFRESH STREAMING TABLE {t}_changes AS
SELECT * FROM STREAM read_postgres(connection => 'src', table => 'public.{t}', schema => 'id INT NOT NULL, v STRING'{options});

CREATE OR REFRESH STREAMING TABLE {t};
CREATE FLOW {t}_cdc AS AUTO CDC INTO {t} FROM STREAM({t}_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  SEQUENCE BY struct(_commit_lsn, _change_seq)
  COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid);

"
            )
        })
        .collect();
    std::fs::write(dir.join("flows.sql"), flows).expect("flows.sql");
}

/// Each table's SCD type 1 table equals the source table, and no change is in its
/// bronze table twice.
fn assert_tables_are_source(dir: &Path, db: &Db, tables: &[&str], when: &str) {
    for t in tables {
        assert_eq!(
            query(dir, &format!("SELECT id, v FROM {t} ORDER BY id")),
            db.rows(&format!("SELECT id, v FROM {t} ORDER BY id")),
            "{t}, {when}"
        );
        assert_eq!(
            query(dir, &format!("SELECT count(*) FROM {t}_changes")),
            query(
                dir,
                &format!(
                    "SELECT count(*) FROM (SELECT DISTINCT _commit_lsn, _change_seq, id FROM {t}_changes)"
                )
            ),
            "{t}, {when}: a change was stored twice"
        );
    }
}

/// Transactions the server's logical decoding has given the output plugin for `slot`
/// (each stream of the slot decodes again every transaction after its start).
fn decoded_transactions(db: &Db, slot: &str) -> i64 {
    db.rows(&format!(
        "SELECT coalesce(total_txns, 0) FROM pg_stat_replication_slots WHERE slot_name = '{slot}'"
    ))
    .first()
    .map_or(0, |n| n.parse().expect("a number"))
}

/// The slots of the test's database, with their confirmed positions.
fn slots(db: &Db) -> Vec<String> {
    db.rows(&format!(
        "SELECT slot_name, confirmed_flush_lsn FROM pg_replication_slots WHERE database = '{}' ORDER BY 1",
        db.name
    ))
}

/// The position `flow` committed for `table`, from its bronze table.
fn committed_lsn(dir: &Path, table: &str) -> i64 {
    query(
        dir,
        &format!("SELECT max(_commit_lsn) FROM {table}_changes"),
    )[0]
    .parse()
    .expect("an LSN")
}

fn lsn_number(text: &str) -> i64 {
    let (hi, lo) = text.split_once('/').expect("an LSN");
    (i64::from_str_radix(hi, 16).expect("hex") << 32) + i64::from_str_radix(lo, 16).expect("hex")
}

#[test]
fn tables_of_one_connection_share_a_slot_acknowledged_up_to_the_slowest() {
    let db = Db::create("shared_slot");
    db.exec(
        "CREATE TABLE a (id int PRIMARY KEY, v text);
         CREATE TABLE b (id int PRIMARY KEY, v text);
         CREATE TABLE c (id int PRIMARY KEY, v text);
         INSERT INTO a SELECT i, 'a' || i FROM generate_series(1, 50) i;
         INSERT INTO b SELECT i, 'b' || i FROM generate_series(1, 40) i;
         INSERT INTO c SELECT i, 'c' || i FROM generate_series(1, 30) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().to_str().expect("utf-8");
    pipeline(dir.path(), &db, &["a", "b"]);
    run(dir.path());
    assert_tables_are_source(dir.path(), &db, &["a", "b"], "after the snapshots");
    let first = slots(&db);
    assert_eq!(first.len(), 1, "one slot for the connection: {first:?}");
    // Named from the pipeline and connection, and the storage's identity.
    let slot = first[0].split(',').next().expect("a name").to_string();
    assert!(
        slot.starts_with(&format!("cdcflow_{}_src_", db.name)),
        "{first:?}"
    );
    assert_eq!(
        db.rows(&format!(
            "SELECT tablename FROM pg_publication_tables WHERE pubname = '{slot}' ORDER BY 1"
        )),
        vec!["a", "b"]
    );

    // Only a's flows run: the slot may move up to what b has committed, never past
    // b's changes made since.
    let before_changes = lsn_number(&db.rows("SELECT pg_current_wal_lsn()")[0]);
    db.exec("INSERT INTO a VALUES (100, 'new a'); UPDATE b SET v = 'b changed' WHERE id = 1");
    db.exec("DELETE FROM a WHERE id = 2; DELETE FROM b WHERE id = 2");
    let out = cdcflow(&["run", "-p", p, "--flow", "a_changes", "--flow", "a_cdc"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let confirmed = |db: &Db| lsn_number(slots(db)[0].split_once(',').expect("row").1);
    assert!(
        confirmed(&db) <= before_changes,
        "the slot moved past what b has committed: {:?} {first:?}",
        slots(&db)
    );
    assert_eq!(
        query(
            dir.path(),
            "SELECT count(*) FROM b_changes WHERE _change_type <> 'snapshot'"
        ),
        vec!["0"]
    );

    // Then everything: b's changes were kept for it, and the slot moves on.
    run(dir.path());
    assert_tables_are_source(dir.path(), &db, &["a", "b"], "after b caught up");
    assert!(
        confirmed(&db) >= committed_lsn(dir.path(), "b") && confirmed(&db) > before_changes,
        "the slot moves on once both committed: {:?}",
        slots(&db)
    );

    // A table added later takes its own snapshot; the others go on from where they were.
    db.exec("UPDATE c SET v = 'c before' WHERE id = 1; INSERT INTO a VALUES (101, 'a again')");
    pipeline(dir.path(), &db, &["a", "b", "c"]);
    db.exec("UPDATE b SET v = 'b again' WHERE id = 3");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        query(
            dir.path(),
            "SELECT _change_type, count(*) FROM c_changes GROUP BY 1"
        ),
        vec!["snapshot,30"]
    );
    assert_tables_are_source(dir.path(), &db, &["a", "b", "c"], "after c was added");
    assert_eq!(slots(&db).len(), 1, "still one slot: {:?}", slots(&db));
    assert_eq!(
        query(
            dir.path(),
            "SELECT count(*) FROM a_changes WHERE _change_type = 'snapshot'"
        ),
        vec!["50"],
        "a was not copied again"
    );

    // Killed after one table's commit, before the slot is told: nothing lost or doubled.
    db.exec("UPDATE a SET v = 'a3' WHERE id = 3; UPDATE b SET v = 'b4' WHERE id = 4; UPDATE c SET v = 'c5' WHERE id = 5");
    db.exec("DELETE FROM c WHERE id = 6; INSERT INTO b VALUES (200, 'b200')");
    for point in ["committed:b_changes", "before-commit:c_changes"] {
        let died = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["run", "-p", p])
            .env("CDCFLOW_FAILPOINT", point)
            .output()
            .expect("run");
        assert!(
            !died.status.success() && stderr(&died).contains("failpoint"),
            "{point}: the run did not reach its failpoint: {}{}",
            stdout(&died),
            stderr(&died)
        );
        db.exec("UPDATE a SET v = v || '+' WHERE id = 7; UPDATE c SET v = v || '+' WHERE id = 7");
    }
    run(dir.path());
    assert_tables_are_source(dir.path(), &db, &["a", "b", "c"], "after two killed runs");
}

/// A catch-up of many tables streams the slot once for all of them: the server decodes
/// each transaction once, not once per table. Small batches make the tables stop at
/// their sizes, inside transactions and at different places, and the tables still
/// equal the source with nothing doubled.
#[test]
fn a_catch_up_of_many_tables_streams_the_slot_once() {
    const TABLES: usize = 12;
    const TRANSACTIONS: i64 = 30;
    let db = Db::create("one_stream");
    let names: Vec<String> = (0..TABLES).map(|t| format!("t{t}")).collect();
    let tables: Vec<&str> = names.iter().map(String::as_str).collect();
    let setup: String = tables
        .iter()
        .map(|t| format!("CREATE TABLE {t} (id int PRIMARY KEY, v text); INSERT INTO {t} SELECT i, 'v' || i FROM generate_series(1, 20) i;"))
        .collect();
    db.exec(&setup);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, &tables);
    run(dir.path());
    let slot = slots(&db)[0].split(',').next().expect("a name").to_string();

    db.exec(&changes(&tables, TRANSACTIONS, ".", 100));
    let before = decoded_transactions(&db, &slot);
    run(dir.path());
    let decoded = decoded_transactions(&db, &slot) - before;
    assert_tables_are_source(dir.path(), &db, &tables, "after the catch-up");
    assert!(
        decoded <= 2 * TRANSACTIONS,
        "{TABLES} tables decoded {decoded} transactions for {TRANSACTIONS} made: the slot was streamed once per table"
    );

    // Small batches: each table stops at its size, inside the transactions (each gives
    // a table 6 or so changes), and the parts of the others stop at theirs.
    pipeline_reading(dir.path(), &db, &tables, ", max_changes_per_batch => 5");
    db.exec(&changes(&tables, 4, "+", 200));
    run(dir.path());
    assert_tables_are_source(
        dir.path(),
        &db,
        &tables,
        "after the catch-up in small batches",
    );
}

/// `transactions` transactions, each touching every table of `tables`: a few rows
/// updated (`mark` and the transaction's number appended), one inserted from id
/// `first_id` on, one deleted.
fn changes(tables: &[&str], transactions: i64, mark: &str, first_id: i64) -> String {
    let mut sql = String::new();
    for n in 0..transactions {
        sql.push_str("BEGIN;");
        for t in tables {
            sql.push_str(&format!(
                "UPDATE {t} SET v = v || '{mark}{n}' WHERE id % 5 = {m}; INSERT INTO {t} VALUES ({id}, 'new'); DELETE FROM {t} WHERE id = {gone};",
                m = n % 5,
                id = first_id + n,
                gone = 1 + n % 20,
            ));
        }
        sql.push_str("COMMIT;");
    }
    sql
}
