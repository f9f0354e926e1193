//! Valid PostgreSQL values that Spark's types hold differently, or not at all, never
//! block a table: dates and timestamps before Christ or after 9999 are stored exactly;
//! `infinity` and a numeric `NaN` (no DATE, TIMESTAMP or DECIMAL value) set their row
//! apart in the table's quarantine with the reason, in the snapshot and in the stream
//! alike; a column declared STRING keeps PostgreSQL's text of every value.

use std::path::Path;

use super::{Db, query, run};
use crate::{query_csv, stderr, stdout};

const TABLE: &str = "CREATE TABLE events (id int PRIMARY KEY, d date, ts timestamp, tstz timestamptz, amount numeric(10,2), f float8);";

/// A pipeline reading `public.events` into bronze and an SCD type 1 table; `schema`
/// declares the columns.
fn pipeline(dir: &Path, db: &Db, schema: Option<&str>) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: {}\nconnections:\n  src:\n    kind: postgres\n    host: {}\n    port: {}\n    database: {}\n    user: {}\n",
            db.name, db.admin.host, db.admin.port, db.name, db.admin.user
        ),
    )
    .expect("pipeline.yaml");
    let schema = schema
        .map(|s| format!(", schema => '{s}'"))
        .unwrap_or_default();
    std::fs::write(
        dir.join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE events_changes AS
SELECT * FROM STREAM read_postgres(connection => 'src', table => 'public.events'{schema});

CREATE OR REFRESH STREAMING TABLE events;
CREATE FLOW events_cdc AS AUTO CDC INTO events FROM STREAM(events_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  SEQUENCE BY struct(_commit_lsn, _change_seq)
  COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid);
"
        ),
    )
    .expect("flows.sql");
}

const ROWS: &str = "SELECT id, CAST(d AS STRING), CAST(ts AS STRING), CAST(tstz AS STRING), CAST(amount AS STRING), CAST(f AS STRING) FROM events ORDER BY id";

#[test]
fn values_spark_holds_otherwise_or_not_at_all_keep_the_table_flowing() {
    let db = Db::create("values");
    db.exec(TABLE);
    db.exec(
        "INSERT INTO events VALUES
           (1, '0044-03-15 BC', '0044-03-15 10:00:00.5 BC', '10000-01-01 00:00:00+00', 1.50, 'NaN'),
           (2, 'infinity', '2024-05-01', '2024-05-01', 2, 2),
           (3, '2024-05-01', '2024-05-01', '2024-05-01', 'NaN', 3),
           (4, '2024-05-01', '-infinity', '2024-05-01', 4, '-Infinity'),
           (5, '2024-05-01', '2024-05-01 10:00:00', 'infinity', 5, 5);",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, None);
    let out = run(dir.path());
    // The summary names the table, the column, the value and why.
    assert!(
        out.contains("4 malformed record(s) quarantined in `events_changes__quarantine`")
            && out.contains("the first: postgres:src:public.events: column `")
            && out.contains("has no"),
        "{out}"
    );
    assert_eq!(
        query(dir.path(), ROWS),
        vec!["1,-0043-03-15,-0043-03-15T10:00:00.500,+10000-01-01T00:00:00Z,1.50,NaN",],
        "exact values before Christ and after 9999; the rows with no value apart"
    );
    let reasons = "SELECT error FROM events_changes__quarantine ORDER BY error";
    let quarantined = query(dir.path(), reasons);
    assert_eq!(quarantined.len(), 4, "{quarantined:?}");
    for (column, value) in [
        ("d", "infinity"),
        ("amount", "NaN"),
        ("ts", "-infinity"),
        ("tstz", "infinity"),
    ] {
        assert!(
            quarantined
                .iter()
                .any(|e| e.contains(&format!("column `{column}`"))
                    && e.contains(&format!("`{value}`"))),
            "{column} {value}: {quarantined:?}"
        );
    }
    let records = query(
        dir.path(),
        "SELECT file, record FROM events_changes__quarantine WHERE record LIKE '%\"id\":\"2\"%'",
    );
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(
        records[0].contains("postgres:src:public.events"),
        "{records:?}"
    );
    assert!(
        records[0].contains("\"\"d\"\":\"\"infinity\"\""),
        "{records:?}"
    );
    assert!(records[0].contains("snapshot"), "{records:?}");

    // The same values in later changes: the stream behaves as the snapshot did.
    db.exec("INSERT INTO events VALUES (6, '10000-01-01', '12000-01-01 10:00', '0001-01-01 00:00:00+00 BC', 6, 'Infinity')");
    db.exec("INSERT INTO events VALUES (7, '-infinity', '2024-05-01', '2024-05-01', 7, 7)");
    db.exec("UPDATE events SET amount = 'NaN' WHERE id = 1");
    db.exec("INSERT INTO events VALUES (8, '2024-05-02', '2024-05-02', '2024-05-02', 8, 8)");
    let out = run(dir.path());
    assert!(out.contains("quarantined"), "{out}");
    assert_eq!(
        query(dir.path(), ROWS),
        vec![
            "1,-0043-03-15,-0043-03-15T10:00:00.500,+10000-01-01T00:00:00Z,1.50,NaN",
            "6,+10000-01-01,+12000-01-01T10:00:00,0000-01-01T00:00:00Z,6.00,inf",
            "8,2024-05-02,2024-05-02T00:00:00,2024-05-02T00:00:00Z,8.00,8.0",
        ],
        "the update to NaN is set apart; the key keeps its value before"
    );
    let streamed = query(
        dir.path(),
        "SELECT error FROM events_changes__quarantine WHERE record LIKE '%\"_change_type\":\"update\"%' OR record LIKE '%\"id\":\"7\"%' ORDER BY error",
    );
    assert_eq!(streamed.len(), 2, "{streamed:?}");
    assert!(
        streamed[0].contains("column `amount`") && streamed[0].contains("`NaN`"),
        "{streamed:?}"
    );
    assert!(
        streamed[1].contains("column `d`") && streamed[1].contains("`-infinity`"),
        "{streamed:?}"
    );
}

#[test]
fn a_column_declared_string_keeps_the_text_postgresql_prints() {
    let db = Db::create("values_text");
    db.exec(TABLE);
    db.exec(
        "INSERT INTO events VALUES
           (1, '0044-03-15 BC', 'infinity', '-infinity', 'NaN', 'NaN'),
           (2, '2024-05-01', '2024-05-01 10:00:00.5', '2024-05-01 10:00:00+02', 2.5, 2);",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(
        dir.path(),
        &db,
        Some("id INT NOT NULL, d STRING, ts STRING, tstz STRING, amount STRING, f DOUBLE"),
    );
    run(dir.path());
    db.exec("INSERT INTO events VALUES (3, 'infinity', '10000-01-01', '0001-01-01 00:00:00+00 BC', 'NaN', 'Infinity')");
    run(dir.path());
    let sql = "SELECT id, d, ts, tstz, amount, CAST(f AS STRING) FROM events ORDER BY id";
    assert_eq!(
        query(dir.path(), sql),
        vec![
            "1,0044-03-15 BC,infinity,-infinity,NaN,NaN",
            "2,2024-05-01,2024-05-01 10:00:00.5,2024-05-01 08:00:00+00,2.50,2.0",
            "3,infinity,10000-01-01 00:00:00,0001-01-01 00:00:00+00 BC,NaN,inf",
        ]
    );
    // Nothing was set apart: the quarantine table was never created.
    let out = query_csv(
        dir.path(),
        "SELECT count(*) FROM events_changes__quarantine",
    );
    assert!(
        stderr(&out).contains("has not been created yet"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}
