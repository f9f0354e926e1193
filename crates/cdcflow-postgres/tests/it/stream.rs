//! Snapshot, then changes, then a restart: what a read yields and what the slot keeps.

use cdcflow_postgres::{Changes, PgError, ReadFrom, TableRef, TableSource};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Decimal128Type, Int32Type, Int64Type};

use crate::server::TestDb;

fn source(db: &TestDb, name: &str) -> TableSource {
    TableSource {
        connection: db.connection.clone(),
        table: TableRef::parse("public.customers").expect("table"),
        slot: format!("cdcflow_it_{name}"),
        publication: format!("cdcflow_it_{name}"),
        max_changes: 1000,
        text_columns: vec![],
        parking: Default::default(),
        clients: Default::default(),
        notices: Default::default(),
        shared: None,
    }
}

/// `(change type, id, name)` per row, in order.
fn rows(batch: &RecordBatch) -> Vec<(String, Option<i32>, Option<String>)> {
    let kind = batch
        .column_by_name("_change_type")
        .unwrap()
        .as_string::<i32>();
    let id = batch
        .column_by_name("id")
        .unwrap()
        .as_primitive::<Int32Type>();
    let name = batch.column_by_name("name").unwrap().as_string::<i32>();
    (0..batch.num_rows())
        .map(|i| {
            (
                kind.value(i).to_string(),
                id.is_valid(i).then(|| id.value(i)),
                name.is_valid(i).then(|| name.value(i).to_string()),
            )
        })
        .collect()
}

fn lsns(changes: &Changes) -> Vec<(i64, i64)> {
    let lsn = changes
        .rows
        .column_by_name("_commit_lsn")
        .unwrap()
        .as_primitive::<Int64Type>();
    let seq = changes
        .rows
        .column_by_name("_change_seq")
        .unwrap()
        .as_primitive::<Int64Type>();
    (0..lsn.len())
        .map(|i| (lsn.value(i), seq.value(i)))
        .collect()
}

async fn confirmed(db: &TestDb, slot: &str) -> Option<String> {
    let row = db
        .client()
        .await
        .query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()?;
    row.get(0)
}

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

#[tokio::test]
async fn snapshot_then_changes_then_nothing() {
    let db = TestDb::create("snapshot_then_changes").await;
    let sql = db.client().await;
    sql.batch_execute(
        "CREATE TABLE customers (id int PRIMARY KEY, name text, amount numeric(10,2), seen timestamptz);
         INSERT INTO customers VALUES (1, 'ann', 10.50, '2024-05-01 10:00:00+00'), (2, 'bob', NULL, NULL), (3, 'cy', 1, NULL);",
    )
    .await
    .unwrap();
    let src = source(&db, "snapshot_then_changes");

    let first = src.read(None).await.unwrap();
    assert!(first.snapshot);
    let mut got = rows(&first.rows);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("snapshot".into(), Some(1), s("ann")),
            ("snapshot".into(), Some(2), s("bob")),
            ("snapshot".into(), Some(3), s("cy")),
        ]
    );
    let amount = first.rows.column_by_name("amount").unwrap();
    assert_eq!(amount.data_type().to_string(), "Decimal128(10, 2)");
    let snapshot_lsn = lsns(&first)[0].0;
    let p1 = first.position;
    src.acknowledge(first).await.unwrap();
    // The end of a run: the kept session ends once the server has the position.
    src.parking.finish().await;
    assert_eq!(
        confirmed(&db, &src.slot).await,
        Some(cdcflow_postgres::lsn_text(p1))
    );

    // One transaction per call (a multi-statement string is one transaction).
    for statement in [
        "INSERT INTO customers VALUES (4, 'dee', 2.25, NULL)",
        "BEGIN; UPDATE customers SET name = 'ann2' WHERE id = 1; DELETE FROM customers WHERE id = 3; COMMIT",
        "UPDATE customers SET id = 20 WHERE id = 2",
    ] {
        sql.batch_execute(statement).await.unwrap();
    }
    let second = src.read(Some(p1)).await.unwrap();
    assert!(!second.snapshot);
    assert_eq!(
        rows(&second.rows),
        vec![
            ("insert".into(), Some(4), s("dee")),
            ("update".into(), Some(1), s("ann2")),
            ("delete".into(), Some(3), None),
            ("delete".into(), Some(2), None),
            ("update".into(), Some(20), s("bob")),
        ]
    );
    let order = lsns(&second);
    assert!(
        order.iter().all(|(lsn, _)| *lsn > snapshot_lsn),
        "{order:?}"
    );
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert_eq!(
        (order[1].1, order[2].1),
        (1, 2),
        "positions within a transaction"
    );
    let amount = second
        .rows
        .column_by_name("amount")
        .unwrap()
        .as_primitive::<Decimal128Type>();
    assert_eq!(amount.value(0), 225);
    let p2 = second.position;
    assert!(p2 > p1);
    src.acknowledge(second).await.unwrap();

    let third = src.read(Some(p2)).await.unwrap();
    assert_eq!(third.rows.num_rows(), 0);
    src.acknowledge(third).await.unwrap();
    src.parking.finish().await;
    db.drop().await;
}

#[tokio::test]
async fn unacknowledged_reads_are_read_again_and_committed_ones_are_not() {
    let db = TestDb::create("unacknowledged").await;
    let sql = db.client().await;
    sql.batch_execute("CREATE TABLE customers (id int PRIMARY KEY, name text); INSERT INTO customers VALUES (1, 'ann');")
        .await
        .unwrap();
    let src = source(&db, "unacknowledged");
    let first = src.read(None).await.unwrap();
    let p1 = first.position;
    src.acknowledge(first).await.unwrap();
    src.parking.finish().await;
    sql.batch_execute(
        "INSERT INTO customers VALUES (2, 'bob'); UPDATE customers SET name = 'b' WHERE id = 2;",
    )
    .await
    .unwrap();

    // A crash before the commit: the same changes again.
    let lost = src.read(Some(p1)).await.unwrap();
    let expected = rows(&lost.rows);
    assert_eq!(expected.len(), 2);
    drop(lost);
    let again = src.read(Some(p1)).await.unwrap();
    assert_eq!(rows(&again.rows), expected);

    // A crash after the commit, before the acknowledgement: the slot is still at p1,
    // the checkpoint at p2; reading from p2 yields nothing twice.
    let p2 = again.position;
    drop(again);
    assert_eq!(
        confirmed(&db, &src.slot).await,
        Some(cdcflow_postgres::lsn_text(p1))
    );
    sql.batch_execute("INSERT INTO customers VALUES (3, 'cy');")
        .await
        .unwrap();
    let after = src.read(Some(p2)).await.unwrap();
    assert_eq!(rows(&after.rows), vec![("insert".into(), Some(3), s("cy"))]);
    src.acknowledge(after).await.unwrap();
    src.parking.finish().await;
    db.drop().await;
}

#[tokio::test]
async fn a_dropped_slot_and_a_missing_table_are_named() {
    let db = TestDb::create("errors").await;
    let sql = db.client().await;
    sql.batch_execute("CREATE TABLE customers (id int PRIMARY KEY);")
        .await
        .unwrap();
    let src = source(&db, "errors");
    let first = src.read(None).await.unwrap();
    let p1 = first.position;
    src.acknowledge(first).await.unwrap();
    src.drop_slot().await.unwrap();
    let e = src.read(Some(p1)).await.unwrap_err();
    assert!(matches!(e, PgError::Slot { .. }), "{e}");
    assert!(e.to_string().contains("is gone"), "{e}");
    assert!(e.help().unwrap().contains("--full-refresh"));

    let missing = TableSource {
        table: TableRef::parse("public.nope").unwrap(),
        ..source(&db, "errors_missing")
    };
    let e = missing.read(None).await.unwrap_err();
    assert!(
        e.to_string().contains("`public.nope` does not exist"),
        "{e}"
    );
    src.parking.finish().await;
    db.drop().await;
}

#[tokio::test]
async fn unchanged_toasted_values_are_carried_or_named() {
    let db = TestDb::create("toast").await;
    let sql = db.client().await;
    sql.batch_execute(
        "CREATE TABLE customers (id int PRIMARY KEY, name text, notes text);
         INSERT INTO customers SELECT i, 'n' || i,
           (SELECT string_agg(md5(i::text || g::text), '') FROM generate_series(1, 1000) g)
         FROM generate_series(1, 2) i;",
    )
    .await
    .unwrap();
    let src = source(&db, "toast");
    let first = src.read(None).await.unwrap();
    let p1 = first.position;
    src.acknowledge(first).await.unwrap();
    for statement in [
        "UPDATE customers SET name = 'a' WHERE id = 1",
        "UPDATE customers SET name = 'b' WHERE id = 1",
        "UPDATE customers SET notes = 'short', name = 'c' WHERE id = 2",
        "UPDATE customers SET name = 'd' WHERE id = 2",
    ] {
        sql.batch_execute(statement).await.unwrap();
    }
    let changes = src.read(Some(p1)).await.unwrap();
    // Row 0 left notes out and its key has no row before it in this read: the caller
    // takes it from what it stored. Row 1 takes row 0's (still unresolved) value the
    // same way; rows 2 and 3 carry 'short' within the read.
    let unresolved: Vec<(usize, &str, bool)> = changes
        .unresolved
        .iter()
        .map(|c| (c.row, c.column.as_str(), c.key.is_some()))
        .collect();
    assert_eq!(unresolved, vec![(0, "notes", false), (1, "notes", false)]);
    assert_eq!(changes.keys, vec!["id".to_string()]);
    let notes = changes
        .rows
        .column_by_name("notes")
        .unwrap()
        .as_string::<i32>();
    assert!(notes.is_null(0) && notes.is_null(1));
    assert_eq!((notes.value(2), notes.value(3)), ("short", "short"));
    src.acknowledge(changes).await.unwrap();
    src.parking.finish().await;
    db.drop().await;
}

/// The walsender streaming `slot` now.
async fn streaming_pid(db: &TestDb, slot: &str) -> Option<i32> {
    db.client()
        .await
        .query_one(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0)
}

fn next_from(changes: &Changes) -> ReadFrom {
    ReadFrom {
        lsn: Some(changes.position),
        within: changes.within,
        copy: changes.copy.clone(),
        identity: changes.identity,
    }
}

/// One batch of a run: reads after `from`, acknowledges (as after the commit) and
/// moves `from` on. Returns the rows, the walsender that streamed them, and whether
/// there is more.
async fn read_committed(
    src: &TableSource,
    db: &TestDb,
    from: &mut ReadFrom,
) -> (
    Vec<(String, Option<i32>, Option<String>)>,
    Option<i32>,
    bool,
) {
    let changes = src.read_from(from).await.unwrap();
    let walsender = streaming_pid(db, &src.slot).await;
    let read = rows(&changes.rows);
    *from = next_from(&changes);
    let more = changes.more;
    src.acknowledge(changes).await.unwrap();
    (read, walsender, more)
}

#[tokio::test]
async fn a_transaction_larger_than_a_batch_is_decoded_once() {
    let db = TestDb::create("large_transaction").await;
    let sql = db.client().await;
    sql.batch_execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
        .await
        .unwrap();
    let src = TableSource {
        max_changes: 1000,
        ..source(&db, "large_transaction")
    };
    let first = src.read(None).await.unwrap();
    let mut from = next_from(&first);
    src.acknowledge(first).await.unwrap();
    sql.batch_execute(
        "INSERT INTO customers SELECT i, 'n' || i FROM generate_series(1, 5000) i;
         INSERT INTO customers VALUES (9999, 'last');",
    )
    .await
    .unwrap();

    // A read that is not committed (a crash) leaves no session behind: the read
    // again gets the same rows from a session of its own.
    let lost = src.read_from(&from).await.unwrap();
    let lost_rows = rows(&lost.rows);
    drop(lost);
    let mut ids = vec![];
    let mut walsenders = vec![];
    loop {
        let (read, walsender, more) = read_committed(&src, &db, &mut from).await;
        if ids.is_empty() {
            assert_eq!(read, lost_rows);
        }
        ids.extend(read.into_iter().map(|(_, id, _)| id.unwrap()));
        walsenders.push(walsender);
        if !more {
            break;
        }
    }
    let expected: Vec<i32> = (1..=5000).chain([9999]).collect();
    assert_eq!(ids, expected);
    // Each read of the transaction went on with the session of the read before: the
    // server decoded it once, not once from its start for each batch.
    assert_eq!(walsenders.len(), 6, "{walsenders:?}");
    assert!(walsenders[0].is_some(), "{walsenders:?}");
    assert!(
        walsenders.windows(2).all(|w| w[0] == w[1]),
        "a new walsender for a batch: {walsenders:?}"
    );

    // A session left on the slot is closed by a read from elsewhere, which streams the
    // slot from its own position. That position must not be behind the slot's: as
    // when another table of the slot is behind, the acknowledgement stops at it (the
    // part's own position may be past it, when the server reported WAL of other
    // databases before the transaction).
    sql.batch_execute("INSERT INTO customers SELECT i, 'm' FROM generate_series(10001, 12500) i")
        .await
        .unwrap();
    let part = src.read_from(&from).await.unwrap();
    assert!(part.more && part.within.is_some());
    src.acknowledge_to(part, from.lsn).await.unwrap();
    let again = src.read_from(&from).await.unwrap();
    assert_eq!(rows(&again.rows).first().map(|r| r.1), Some(Some(10001)));
    assert_eq!(again.rows.num_rows(), 1000);
    drop(again);
    src.parking.finish().await;
    db.drop().await;
}

#[tokio::test]
async fn reads_that_keep_their_session_while_a_writer_commits_take_each_change_once() {
    let db = TestDb::create("kept_session").await;
    let sql = db.client().await;
    sql.batch_execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
        .await
        .unwrap();
    let elsewhere = TestDb::create("kept_session_elsewhere").await;
    elsewhere
        .client()
        .await
        .batch_execute("CREATE TABLE other (id int)")
        .await
        .unwrap();
    let src = source(&db, "kept_session");
    let first = src.read(None).await.unwrap();
    let mut from = next_from(&first);
    src.acknowledge(first).await.unwrap();
    // One row per transaction, committed while the reads go on, each followed by one
    // in another database (the stream says nothing of it): the WAL a read reads up to
    // then often ends after the last transaction it is sent, and the stream gives the
    // next one before it passes that position. The read stops at that transaction's
    // start, and the next read goes on with it.
    const ROWS: i32 = 150;
    let writer = {
        let client = db.client().await;
        let other = elsewhere.client().await;
        tokio::spawn(async move {
            for i in 1..=ROWS {
                client
                    .batch_execute(&format!("INSERT INTO customers VALUES ({i}, 'n')"))
                    .await
                    .unwrap();
                other
                    .batch_execute(&format!(
                        "INSERT INTO other SELECT {i} FROM generate_series(1, 20000)"
                    ))
                    .await
                    .unwrap();
            }
        })
    };
    let mut ids = vec![];
    let mut walsenders = std::collections::BTreeSet::new();
    let mut reads = 0;
    // Reads until one that began after the writer finished has read everything.
    loop {
        let written = writer.is_finished();
        let (read, walsender, more) = read_committed(&src, &db, &mut from).await;
        ids.extend(read.into_iter().map(|(_, id, _)| id.unwrap()));
        walsenders.insert(walsender);
        reads += 1;
        if written && !more {
            break;
        }
    }
    writer.await.unwrap();
    let expected: Vec<i32> = (1..=ROWS).collect();
    assert_eq!(ids, expected);
    assert!(reads > 2, "the reads overlapped the writes ({reads} reads)");
    // Every read streamed with the first one's session.
    walsenders.remove(&None);
    assert_eq!(walsenders.len(), 1, "{walsenders:?}");
    src.parking.finish().await;
    assert_eq!(
        confirmed(&db, &src.slot).await,
        Some(cdcflow_postgres::lsn_text(from.lsn.unwrap()))
    );
    db.drop().await;
    elsewhere.drop().await;
}
