//! A server restart mid-stream: against a MariaDB server of the test's own (an empty
//! data folder on a free port, the row-based binary log on; `CDCFLOW_MARIADBD` or
//! `/usr/sbin/mariadbd`), a continuous run follows the table; the server is killed
//! (SIGKILL: a crash, its binary log cut where it was) while the run polls, started
//! again (a new log file), and written to again. The run's batches fail while the
//! server is down and go on once it is back: the silver table reaches the source and
//! bronze holds every change once.

use std::path::Path;
use std::process::Command;

use mysql_async::prelude::Queryable;

use super::{assert_no_doubles, query, run, spawn_continuous, stop};
use crate::query_csv;

/// A MariaDB server of the test's own with the row-based binary log, restartable on
/// the same data folder and port.
pub(super) struct BinlogServer {
    child: Option<std::process::Child>,
    pub(super) port: u16,
    dir: tempfile::TempDir,
}

impl BinlogServer {
    pub(super) fn start() -> BinlogServer {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("data")).expect("data folder");
        std::fs::create_dir(dir.path().join("tmp")).expect("tmp folder");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut server = BinlogServer {
            child: None,
            port,
            dir,
        };
        // A new data folder is durable only once shut down cleanly (InnoDB writes its
        // system tablespace's header then): a crash earlier would leave it unusable.
        server.launch();
        server.shut_down();
        server.launch();
        server
    }

    fn shut_down(&mut self) {
        if let Some(child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait_with_output();
        }
    }

    fn launch(&mut self) {
        let program =
            std::env::var("CDCFLOW_MARIADBD").unwrap_or_else(|_| "/usr/sbin/mariadbd".into());
        let at = |name: &str| self.dir.path().join(name).display().to_string();
        let child = Command::new(&program)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", at("data")))
            .arg(format!("--socket={}", at("sock")))
            .arg(format!("--pid-file={}", at("pid")))
            .arg(format!("--log-error={}", at("server.log")))
            .arg(format!("--log-bin={}", at("data/binlog")))
            // Its own temporary folder: a server starting removes the `#sql*` files it
            // finds in its tmpdir, which in /tmp are the machine's server's, in use.
            .arg(format!("--tmpdir={}", at("tmp")))
            .args([
                &format!("--port={}", self.port),
                "--bind-address=127.0.0.1",
                "--skip-grant-tables",
                "--user=root",
                "--server-id=7",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--binlog-row-metadata=FULL",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("this test starts a MariaDB server of its own with `{program}` (CDCFLOW_MARIADBD): {e}")
            });
        self.child = Some(child);
        let mut last = String::new();
        for _ in 0..150 {
            match self.exec("SELECT 1") {
                Ok(_) => return,
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!(
            "the test's own MariaDB server did not start on port {} ({last}): {}",
            self.port,
            std::fs::read_to_string(at("server.log")).unwrap_or_default()
        );
    }

    /// A crash: SIGKILL, no shutdown.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(super) fn exec(&self, sql: &str) -> Result<Vec<String>, mysql_async::Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let opts = mysql_async::OptsBuilder::default()
                .ip_or_hostname("127.0.0.1")
                .tcp_port(self.port)
                .user(Some("root"))
                .prefer_socket(false);
            let mut conn = mysql_async::Conn::new(opts).await?;
            let rows: Vec<mysql_async::Row> = conn.query(sql).await?;
            let _ = conn.disconnect().await;
            Ok(rows
                .iter()
                .map(|r| {
                    (0..r.len())
                        .map(|i| match r.as_ref(i) {
                            Some(mysql_async::Value::Bytes(b)) => {
                                String::from_utf8_lossy(b).into_owned()
                            }
                            _ => String::new(),
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect())
        })
    }
}

impl Drop for BinlogServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The continuous run, killed if the test fails before it stops it (no run outlives its
/// test).
struct Stopped(Option<std::process::Child>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn pipeline(dir: &Path, port: u16) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: mysql_restart\ntrigger_interval_seconds: 0.2\nconnections:\n  shop:\n    kind: mysql\n    host: 127.0.0.1\n    port: {port}\n    database: shop\n    user: root\n"
        ),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'customers');
CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customers_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  {};",
            super::SEQUENCE
        ),
    )
    .expect("flows.sql");
}

const CURRENT: &str = "SELECT id, name, city FROM customers ORDER BY id";

/// Waits (a minute at most) until the silver table equals the server's table.
fn converges(dir: &Path, server: &BinlogServer) -> bool {
    for _ in 0..300 {
        let source = server
            .exec("SELECT id, name, city FROM shop.customers ORDER BY id")
            .expect("source rows");
        let out = query_csv(dir, CURRENT);
        let silver: Vec<String> = crate::stdout(&out)
            .lines()
            .skip(1)
            .map(String::from)
            .collect();
        if out.status.success() && silver == source {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}

/// A server of the test's own with `shop.customers` (ann and bob), and a pipeline
/// folder reading it.
fn customers_on_a_server_of_its_own() -> (BinlogServer, tempfile::TempDir) {
    let server = BinlogServer::start();
    server
        .exec(
            "CREATE DATABASE shop;
             CREATE TABLE shop.customers (id INT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL) ENGINE=InnoDB;
             INSERT INTO shop.customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
        )
        .expect("setup");
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), server.port);
    (server, dir)
}

#[test]
fn a_server_killed_and_started_again_mid_stream_loses_and_doubles_nothing() {
    let (mut server, dir) = customers_on_a_server_of_its_own();
    run(dir.path());
    let mut child = Stopped(Some(spawn_continuous(dir.path())));
    server
        .exec("INSERT INTO shop.customers VALUES (3, 'cy', 'lima'); UPDATE shop.customers SET city = 'bern' WHERE id = 1")
        .expect("changes");
    assert!(converges(dir.path(), &server), "before the crash");

    // Changes, then the crash while the run polls; down for a few polls.
    server
        .exec("DELETE FROM shop.customers WHERE id = 2; INSERT INTO shop.customers VALUES (4, 'dee', 'kyiv')")
        .expect("changes");
    server.kill();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    server.launch();
    server
        .exec("UPDATE shop.customers SET id = 40 WHERE id = 4; INSERT INTO shop.customers VALUES (5, 'eve', 'faro')")
        .expect("changes after the restart");
    let after = converges(dir.path(), &server);
    let (_, out) = stop(child.0.take().expect("the run"));
    assert!(
        after,
        "after the restart the silver table did not reach the source; the run said: {}",
        crate::stderr(&out)
    );
    assert_no_doubles(dir.path());
    assert_eq!(
        query(
            dir.path(),
            "SELECT _change_type, count(*) FROM customers_changes GROUP BY 1 ORDER BY 1"
        ),
        vec!["delete,2", "insert,3", "snapshot,2", "update,2"],
        "each change once: the key change is a delete and an update"
    );
}

#[test]
fn a_shutdown_while_the_run_follows_the_binary_log_completes_in_seconds() {
    let (mut server, dir) = customers_on_a_server_of_its_own();
    let mut child = Stopped(Some(spawn_continuous(dir.path())));
    server
        .exec("INSERT INTO shop.customers VALUES (3, 'cy', 'lima')")
        .expect("changes");
    assert!(converges(dir.path(), &server), "before the shutdown");
    // A normal shutdown (`mysqladmin shutdown` and SIGTERM do the same) while the run
    // keeps its binary log dump open between polls.
    let began = std::time::Instant::now();
    server.shut_down();
    let took = began.elapsed();
    server.launch();
    server
        .exec("UPDATE shop.customers SET city = 'bern' WHERE id = 1; DELETE FROM shop.customers WHERE id = 2")
        .expect("changes after the restart");
    let after = converges(dir.path(), &server);
    let (_, out) = stop(child.0.take().expect("the run"));
    assert!(
        took < std::time::Duration::from_secs(10),
        "the server's shutdown took {took:?} while cdcflow ran: {}",
        crate::stderr(&out)
    );
    assert!(
        after,
        "after the restart the silver table did not reach the source: {}",
        crate::stderr(&out)
    );
    assert_no_doubles(dir.path());
}
