//! The PostgreSQL source's benchmark (issue 16; a benchmark, not a test), against the
//! server of PGHOST/PGPORT/PGUSER (127.0.0.1:5432, postgres; `wal_level = logical`,
//! `bash .ci/postgres`), in a database of its own that it drops at the end:
//!
//! 1. **snapshot**: a table of `CDCFLOW_BENCH_ROWS` rows (1e6) copied by `cdcflow run`
//!    into a bronze streaming table and an SCD type 1 table, rows per second (the run's
//!    wall time, and the bronze flow's own time);
//! 2. **catch-up**: `CDCFLOW_BENCH_CHANGES` changes (1e5: 60% updates, 20% inserts,
//!    20% deletes, in transactions of 1,000) made while the pipeline is stopped, read by
//!    the next `cdcflow run`, changes per second;
//! 3. **latency**: `cdcflow run --continuous` (`trigger_interval_seconds: 0.5`), one
//!    single-row transaction at a time (`CDCFLOW_BENCH_SAMPLES`, 50), each timed from its
//!    COMMIT returning until the row is queryable in the SCD type 1 table: median and
//!    p99.
//!
//! Every phase checks that the SCD type 1 table has the source's row count. The
//! connection uses the default `sslmode` (prefer: TLS when the server offers it);
//! `CDCFLOW_BENCH_SSLMODE` sets another. `PGHOST` may be the directory of the server's
//! Unix-domain socket (`/var/run/postgresql`): both then connect by the socket.
//!
//! ```text
//! cargo bench --locked -p cdcflow-cli --bench postgres_source
//! PGHOST=/var/run/postgresql cargo bench --locked -p cdcflow-cli --bench postgres_source
//! ```

// A benchmark may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cdcflow_postgres::PgConnection;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;

const DATABASE: &str = "cdcflow_bench_source";

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.into())
}

fn number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn admin() -> PgConnection {
    PgConnection {
        host: env("PGHOST", "127.0.0.1"),
        port: env("PGPORT", "5432").parse().expect("PGPORT"),
        database: "postgres".into(),
        user: env("PGUSER", "postgres"),
        password: std::env::var("PGPASSWORD").ok(),
        tls: Default::default(),
    }
}

async fn exec(connection: &PgConnection, sql: &str) {
    let client = connection.connect().await.expect("connect");
    client.batch_execute(sql).await.expect(sql);
}

async fn drop_database(admin: &PgConnection) {
    exec(
        admin,
        &format!("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{DATABASE}' AND NOT active"),
    )
    .await;
    exec(
        admin,
        &format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"),
    )
    .await;
}

fn pipeline(dir: &Path, admin: &PgConnection) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: bench_source\ntrigger_interval_seconds: 0.5\nconnections:\n  src:\n    kind: postgres\n    host: {}\n    port: {}\n    database: {DATABASE}\n    user: {}\n{}",
            admin.host,
            admin.port,
            admin.user,
            // TLS on loopback slows the walsender (docs/benchmarks.md, catch-up):
            // `CDCFLOW_BENCH_SSLMODE=disable` measures without it.
            std::env::var("CDCFLOW_BENCH_SSLMODE")
                .map(|m| format!("    sslmode: {m}\n"))
                .unwrap_or_default()
        ),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_postgres(connection => 'src', table => 'public.customers',
  schema => 'id BIGINT NOT NULL, name STRING, city STRING, amount DECIMAL(12,2)');

CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customers_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  SEQUENCE BY struct(_commit_lsn, _change_seq)
  COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid)
  STORED AS SCD TYPE 1;
",
    )
    .expect("flows.sql");
}

/// What one `cdcflow run` took: its wall time, and the bronze flow's own time and rows.
struct Ran {
    wall: Duration,
    bronze: Duration,
    bronze_rows: u64,
}

/// Runs `cdcflow run --json`.
fn run(dir: &Path) -> Ran {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.to_str().expect("utf-8"), "--json"])
        .output()
        .expect("cdcflow run");
    let wall = started.elapsed();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bronze = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|f| f["flow"] == "customers_changes")
        .unwrap_or_default();
    Ran {
        wall,
        bronze: Duration::from_millis(bronze["millis"].as_u64().unwrap_or(0)),
        bronze_rows: bronze["rows_written"].as_u64().unwrap_or(0),
    }
}

async fn silver_count(pipeline: &cdcflow_plan::Pipeline, filter: &str) -> i64 {
    let Ok(ctx) = cdcflow_runtime::catalog::session(pipeline).await else {
        return -1;
    };
    let Ok(df) = ctx
        .sql(&format!("SELECT count(*) FROM customers {filter}"))
        .await
    else {
        return -1;
    };
    let Ok(batches) = df.collect().await else {
        return -1;
    };
    batches
        .first()
        .map(|b| b.column(0).as_primitive::<Int64Type>().value(0))
        .unwrap_or(-1)
}

/// Whether a reader opening the SCD type 1 table now sees row `id`. The probe opens that
/// table alone, as Spark or delta-rs would, not the pipeline's whole catalog: polled every
/// 10 ms, a probe that opens every table keeps most of a core busy and slows the run it
/// measures (on 2 cores it added about 0.3 s to the median).
async fn silver_has(pipeline: &cdcflow_plan::Pipeline, id: u64) -> bool {
    let Ok(ctx) = cdcflow_runtime::catalog::session_of(pipeline, "customers").await else {
        return false;
    };
    let Ok(df) = ctx
        .sql(&format!("SELECT count(*) FROM customers WHERE id = {id}"))
        .await
    else {
        return false;
    };
    df.collect().await.is_ok_and(|b| {
        b.first()
            .is_some_and(|b| b.column(0).as_primitive::<Int64Type>().value(0) == 1)
    })
}

async fn source_count(source: &PgConnection) -> i64 {
    let client = source.connect().await.expect("connect");
    client
        .query_one("SELECT count(*) FROM customers", &[])
        .await
        .expect("count")
        .get(0)
}

fn per_second(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn main() {
    let rows = number("CDCFLOW_BENCH_ROWS", 1_000_000);
    let changes = number("CDCFLOW_BENCH_CHANGES", 100_000);
    let samples = number("CDCFLOW_BENCH_SAMPLES", 50) as usize;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let admin = admin();
    let source = admin.with_database(DATABASE);
    rt.block_on(async {
        drop_database(&admin).await;
        exec(&admin, &format!("CREATE DATABASE {DATABASE}")).await;
        exec(
            &source,
            &format!(
                "CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, city text, amount numeric(12,2));
                 INSERT INTO customers SELECT i, 'name ' || i, 'city ' || (i % 1000), (i % 100000) / 100.0 FROM generate_series(1, {rows}) i;"
            ),
        )
        .await;
        // Apart: VACUUM cannot run inside the transaction of a multi-statement string.
        exec(&source, "VACUUM ANALYZE customers").await;
    });
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &admin);
    let loaded = cdcflow_plan::load(dir.path(), &Default::default())
        .pipeline
        .expect("pipeline");

    // 1. The snapshot.
    let Ran { wall, bronze, .. } = run(dir.path());
    let (silver, expected) =
        rt.block_on(async { (silver_count(&loaded, "").await, source_count(&source).await) });
    assert_eq!(silver, expected, "the SCD type 1 table after the snapshot");
    println!(
        "snapshot of {rows} rows: {:.1} s, {:.0} rows/s (the bronze flow {:.1} s, {:.0} rows/s)",
        wall.as_secs_f64(),
        per_second(rows, wall),
        bronze.as_secs_f64(),
        per_second(rows, bronze)
    );

    // 2. The catch-up: each change touches a row (updates cycle over the first half of
    // the keys, deletes walk the second half once, inserts add keys after the last), so
    // the changes made are the changes read.
    let (updates, inserts, deletes) = (600_u64, 200_u64, 200_u64);
    let transactions = changes.div_ceil(updates + inserts + deletes);
    assert!(
        rows / 2 > updates && transactions * deletes <= rows / 2,
        "CDCFLOW_BENCH_CHANGES may be 2.5 times CDCFLOW_BENCH_ROWS at most"
    );
    rt.block_on(async {
        let client = source.connect().await.expect("connect");
        let cycle = rows / 2 - updates;
        for t in 0..transactions {
            let updated = t * updates % cycle;
            client
                .batch_execute(&format!(
                    "BEGIN;
                     UPDATE customers SET city = 'moved', amount = amount + 1 WHERE id > {} AND id <= {};
                     INSERT INTO customers SELECT i, 'new ' || i, 'new', 1 FROM generate_series({}, {}) i;
                     DELETE FROM customers WHERE id > {} AND id <= {};
                     COMMIT;",
                    updated,
                    updated + updates,
                    rows + 1 + t * inserts,
                    rows + (t + 1) * inserts,
                    rows / 2 + t * deletes,
                    rows / 2 + (t + 1) * deletes,
                ))
                .await
                .expect("changes");
        }
    });
    let Ran {
        wall,
        bronze,
        bronze_rows,
    } = run(dir.path());
    let (silver, expected) =
        rt.block_on(async { (silver_count(&loaded, "").await, source_count(&source).await) });
    assert_eq!(silver, expected, "the SCD type 1 table after the catch-up");
    let made = transactions * (updates + inserts + deletes);
    assert_eq!(bronze_rows, made, "the changes the bronze flow read");
    println!(
        "catch-up of {made} changes: {:.1} s, {:.0} changes/s (the bronze flow {:.1} s, {:.0} changes/s)",
        wall.as_secs_f64(),
        per_second(made, wall),
        bronze.as_secs_f64(),
        per_second(made, bronze)
    );

    // 3. Commit to queryable, continuous.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args([
            "run",
            "-p",
            dir.path().to_str().expect("utf-8"),
            "--continuous",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cdcflow");
    let mut latencies = Vec::with_capacity(samples);
    rt.block_on(async {
        let client = source.connect().await.expect("connect");
        // Warm up: the first poll of the continuous run.
        tokio::time::sleep(Duration::from_secs(3)).await;
        for i in 0..samples {
            let id = 10 * rows + i as u64;
            client
                .batch_execute(&format!(
                    "INSERT INTO customers VALUES ({id}, 'latency', 'probe', 0)"
                ))
                .await
                .expect("insert");
            let committed = Instant::now();
            while !silver_has(&loaded, id).await {
                assert!(
                    committed.elapsed() < Duration::from_secs(60),
                    "row {id} not queryable after 60 s"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            latencies.push(committed.elapsed());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    println!(
        "commit to queryable over {samples} single-row transactions: median {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        ms(latencies[latencies.len() / 2]),
        ms(p99),
        ms(latencies[latencies.len() - 1])
    );
    rt.block_on(drop_database(&admin));
}
