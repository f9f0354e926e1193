//! A restart of the source server while `cdcflow run --continuous` follows it: the
//! server's fast shutdown completes within seconds whatever the run is doing (streaming
//! a transaction larger than a batch while it is written to, or copying a table in
//! chunks), and once the server is back the run goes on and converges, nothing lost or
//! doubled. A PostgreSQL server of the test's own (a new data folder on a free port,
//! `wal_level = logical`; `CDCFLOW_PG_BIN`, else `/usr/lib/postgresql/15/bin`), since
//! restarting the machine's shared server would break the tests running beside it.
//!
//! A walsender at shutdown waits for its client to confirm everything it was sent; a
//! replication session kept open between polls must be let go of as soon as the server
//! refuses the run's next connection, or the shutdown waits on cdcflow.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cdcflow_postgres::PgConnection;

use super::{Db, assert_no_doubles, spawn_continuous, stop};
use crate::{query_csv, stdout};

/// How long a fast shutdown of the source may take while cdcflow runs.
const SHUTDOWN_WITHIN: Duration = Duration::from_secs(10);

/// A PostgreSQL server of the test's own, stopped and started with `pg_ctl` on the
/// same data folder and port. Run as the `postgres` user when the test runs as root
/// (the server refuses root).
pub(super) struct OwnServer {
    dir: tempfile::TempDir,
    port: u16,
}

impl OwnServer {
    pub(super) fn start() -> OwnServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let server = OwnServer { dir, port };
        if is_root() {
            let owned = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(server.dir.path())
                .status()
                .expect("chown");
            assert!(owned.success(), "chown of the server's folder to postgres");
        }
        let init = server
            .as_server_user(&server.bin("initdb"))
            .arg("-D")
            .arg(server.data())
            .args(["-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"])
            .output()
            .unwrap_or_else(|e| panic!("{}", server.missing(&e)));
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        server.launch();
        server
    }

    fn bin(&self, name: &str) -> PathBuf {
        Path::new(
            &std::env::var("CDCFLOW_PG_BIN")
                .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into()),
        )
        .join(name)
    }

    fn missing(&self, e: &std::io::Error) -> String {
        format!(
            "this test starts a PostgreSQL server of its own with {} (CDCFLOW_PG_BIN): {e}",
            self.bin("initdb").display()
        )
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn as_server_user(&self, program: &Path) -> Command {
        match is_root() {
            true => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(program);
                c
            }
            false => Command::new(program),
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c wal_level=logical -c max_wal_senders=20 -c max_replication_slots=20 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        self.as_server_user(&self.bin("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .arg("-o")
            .arg(options)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{}", self.missing(&e)))
    }

    fn launch(&self) {
        let out = self.pg_ctl(&["-w", "-t", "60", "start"]);
        assert!(
            out.status.success(),
            "the test's own PostgreSQL server did not start: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
        );
    }

    /// A fast shutdown (what `pg_ctlcluster … restart` does), waited for 20 s at most:
    /// how long it took, and whether it completed.
    fn fast_shutdown(&self) -> (Duration, bool) {
        let began = Instant::now();
        let out = self.pg_ctl(&["-w", "-t", "20", "-m", "fast", "stop"]);
        (began.elapsed(), out.status.success())
    }

    /// A fast shutdown that must complete within [`SHUTDOWN_WITHIN`] while `run` goes
    /// on; when it does not, the run is stopped (the shutdown then completes) and the
    /// test fails saying what the run said.
    fn shut_down_beside(&self, run: &mut Running, doing: &str) {
        let (took, stopped) = self.fast_shutdown();
        if stopped && took < SHUTDOWN_WITHIN {
            return;
        }
        let said = run.stop();
        let _ = self.pg_ctl(&["-w", "-t", "60", "-m", "fast", "stop"]);
        panic!(
            "the server's fast shutdown took {took:?} (completed: {stopped}) while cdcflow {doing}; the run said: {said}"
        );
    }

    pub(super) fn admin(&self) -> PgConnection {
        PgConnection {
            host: "127.0.0.1".into(),
            port: self.port,
            database: "postgres".into(),
            user: "postgres".into(),
            password: None,
            tls: Default::default(),
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Writes to `customers` from a thread of its own until stopped, through the server's
/// restart (a statement that fails while the server is down is tried again later):
/// transactions of 120 inserts and an update of 40 rows, larger than the run's batches.
struct Writer {
    running: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Writer {
    fn start(connection: PgConnection, first: u64) -> Writer {
        let running = Arc::new(AtomicBool::new(true));
        let go = Arc::clone(&running);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let mut next = first;
            let mut committed = 0;
            while go.load(Ordering::Relaxed) {
                let sql = format!(
                    "BEGIN;
                     INSERT INTO customers SELECT i, 'w' || i, 'c' || (i % 7) FROM generate_series({next}, {}) i;
                     UPDATE customers SET city = 'u{next}' WHERE id IN (SELECT id FROM customers ORDER BY id DESC LIMIT 40);
                     COMMIT;",
                    next + 119
                );
                let done = rt.block_on(async {
                    let client = connection.connect().await.ok()?;
                    client.batch_execute(&sql).await.ok()
                });
                match done {
                    Some(()) => {
                        next += 120;
                        committed += 1;
                    }
                    None => std::thread::sleep(Duration::from_millis(200)),
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            committed
        });
        Writer {
            running,
            thread: Some(thread),
        }
    }

    /// Stops writing; the transactions committed.
    fn stop(mut self) -> u64 {
        self.running.store(false, Ordering::Relaxed);
        self.thread
            .take()
            .expect("the writer")
            .join()
            .expect("the writer panicked")
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
    }
}

/// The continuous run, stopped if the test fails first (no run outlives its test).
struct Running(Option<std::process::Child>);

impl Running {
    fn stop(&mut self) -> String {
        let (_, out) = stop(self.0.take().expect("the run"));
        crate::stderr(&out)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The pipeline of `pipeline()` polling every 0.5 s, `max_changes_per_batch` rows a
/// batch.
fn continuous_pipeline(dir: &Path, db: &Db, batch: u32) {
    super::chunks::small_batches(dir, db, batch);
    let yaml = dir.join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(&yaml, format!("{text}trigger_interval_seconds: 0.5\n")).expect("yaml");
}

/// Waits (`within` at most) until the silver table equals the source table.
fn converges(dir: &Path, db: &Db, within: Duration) -> bool {
    let sql = "SELECT id, name, city FROM customers ORDER BY id";
    super::reaches(dir, db, (sql, sql), within)
}

/// Rows in bronze so far (0 before its first commit).
fn bronze_rows(dir: &Path) -> u64 {
    let out = query_csv(dir, "SELECT count(*) FROM customers_changes");
    stdout(&out)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_fast_shutdown_while_the_run_streams_a_large_transaction_completes_in_seconds() {
    let server = OwnServer::start();
    let db = Db::create_on(server.admin(), "restart_streaming");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers SELECT i, 'n' || i, 'c' || (i % 7) FROM generate_series(1, 100) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    continuous_pipeline(dir.path(), &db, 100);
    let mut run = Running(Some(spawn_continuous(dir.path())));
    assert!(
        converges(dir.path(), &db, Duration::from_secs(60)),
        "the snapshot did not arrive: {}",
        run.stop()
    );
    // Transactions of 160 changes against batches of 100: the run is often inside one,
    // and parks its session between polls.
    let writer = Writer::start(db.admin.with_database(&db.name), 1_000);
    std::thread::sleep(Duration::from_secs(3));
    server.shut_down_beside(&mut run, "streamed");
    std::thread::sleep(Duration::from_millis(500));
    server.launch();
    std::thread::sleep(Duration::from_secs(2));
    let committed = writer.stop();
    let after = converges(dir.path(), &db, Duration::from_secs(180));
    let said = run.stop();
    assert!(
        committed > 10,
        "the writer committed {committed} transactions"
    );
    assert!(
        after,
        "after the restart the silver table did not reach the source: {said}"
    );
    assert_no_doubles(dir.path());
}

#[test]
fn a_fast_shutdown_while_the_run_copies_a_table_in_chunks_completes_in_seconds() {
    let server = OwnServer::start();
    let db = Db::create_on(server.admin(), "restart_copying");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers SELECT i, 'n' || i, 'c' || (i % 7) FROM generate_series(1, 60000) i;",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    continuous_pipeline(dir.path(), &db, 2_000);
    let mut run = Running(Some(spawn_continuous(dir.path())));
    let began = Instant::now();
    while bronze_rows(dir.path()) == 0 && began.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let copied = bronze_rows(dir.path());
    server.shut_down_beside(&mut run, "copied");
    std::thread::sleep(Duration::from_millis(500));
    server.launch();
    db.exec("UPDATE customers SET city = 'after' WHERE id % 1000 = 0; DELETE FROM customers WHERE id = 7;");
    let after = converges(dir.path(), &db, Duration::from_secs(120));
    let said = run.stop();
    assert!(
        (1..60_000).contains(&copied),
        "the shutdown did not come mid-copy ({copied} rows copied before it)"
    );
    assert!(
        after,
        "after the restart the silver table did not reach the source: {said}"
    );
    assert_no_doubles(dir.path());
}
