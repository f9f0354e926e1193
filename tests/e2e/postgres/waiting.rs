//! What a run says and does while the server keeps it waiting, and help that names
//! the real cause: `--continuous` started before the server can be reached waits for
//! it, saying each attempt; a first copy behind another session's open transaction
//! names that session while it waits; a query the server refuses is named as the
//! query's fault, not the connection's.

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::{Db, pipeline, spawn_continuous, wait_for_source};
use crate::{cdcflow, stderr, stdout};

/// A free port on loopback (nothing listens on it once this returns).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// Forwards every connection to `port` to the PostgreSQL server, from now on.
fn forward(port: u16, to: (String, u16)) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the forwarder");
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect((to.0.as_str(), to.1)) else {
                continue;
            };
            for (mut from, mut into) in [
                (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                ),
                (server, client),
            ] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut into);
                    let _ = into.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
}

/// The lines a child writes on stderr, as they come.
fn stderr_lines(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let pipe = child.stderr.take().expect("stderr piped");
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits (`within`) for a line containing `wanted`; every line seen goes to `seen`.
fn wait_for_line(
    lines: &mpsc::Receiver<String>,
    wanted: &str,
    within: Duration,
    seen: &mut Vec<String>,
) -> bool {
    let until = std::time::Instant::now() + within;
    while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(wanted);
                seen.push(line);
                if found {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn continuous_started_before_the_server_is_reachable_waits_for_it() {
    let db = Db::create("waits_for_server");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // No schema =>: the run asks the server for the columns before it plans.
    pipeline(dir.path(), &db, false);
    let port = free_port();
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    let text = text.replace(
        &format!("port: {}\n", db.admin.port),
        &format!("port: {port}\n"),
    );
    std::fs::write(&yaml, format!("{text}trigger_interval_seconds: 0.5\n")).expect("yaml");
    let mut child = spawn_continuous(dir.path());
    let lines = stderr_lines(&mut child);
    let mut seen = vec![];
    let second = wait_for_line(&lines, "attempt 2", Duration::from_secs(30), &mut seen);
    forward(port, (db.admin.host.clone(), db.admin.port));
    let caught_up = second && wait_for_source(dir.path(), &db);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().expect("wait");
    seen.extend(lines.try_iter());
    let said = seen.join("\n");
    assert!(second, "no second attempt was said: {said}");
    assert!(
        caught_up,
        "the pipeline did not catch up once the server could be reached: {said}"
    );
    assert!(status.success(), "{said}");
    assert!(
        said.contains("waiting for the source server (attempt 1, next in 1 s)")
            && said.contains("(attempt 2, next in 2 s)"),
        "{said}"
    );
    assert!(
        said.contains("source_unreachable") || said.contains("Connection refused"),
        "{said}"
    );
}

#[test]
fn a_first_copy_behind_an_open_transaction_names_it_while_it_waits() {
    let db = Db::create("copy_waits");
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         CREATE TABLE other (n int);
         INSERT INTO customers VALUES (1, 'ann', 'oslo');",
    );
    // A session that took a transaction id and stays open: the slot's consistent point
    // waits for it.
    let mut blocker = Command::new("psql")
        .args([
            "-h",
            &db.admin.host,
            "-p",
            &db.admin.port.to_string(),
            "-U",
            &db.admin.user,
            "-d",
            &db.name,
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql");
    let mut input = blocker.stdin.take().expect("stdin");
    std::io::Write::write_all(
        &mut input,
        b"BEGIN; INSERT INTO other VALUES (1); SELECT 'pid=' || pg_backend_pid();\n",
    )
    .expect("psql input");
    let pid_line = BufReader::new(blocker.stdout.as_mut().expect("stdout"))
        .lines()
        .map_while(Result::ok)
        .find(|l| l.trim().starts_with("pid="))
        .map(|l| l.trim().trim_start_matches("pid=").to_string())
        .expect("psql gave no pid");

    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, true);
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.path().to_str().expect("utf-8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let lines = stderr_lines(&mut child);
    let mut seen = vec![];
    let named = wait_for_line(
        &lines,
        "pg_terminate_backend",
        Duration::from_secs(30),
        &mut seen,
    );
    // The transaction ends: the copy goes on.
    std::io::Write::write_all(&mut input, b"COMMIT;\n\\q\n").expect("psql input");
    drop(input);
    let _ = blocker.wait();
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let status = child.wait().expect("wait");
    seen.extend(lines.iter());
    let said = seen.join("\n");
    assert!(named, "nothing was said while the copy waited: {said}");
    assert!(
        said.contains(&format!(
            "the transaction of pid {pid_line} (database `{}`",
            db.name
        )),
        "{said}"
    );
    assert!(status.success(), "{out}{said}");
    assert_eq!(
        super::query(
            dir.path(),
            "SELECT id, name, city FROM customers ORDER BY id"
        ),
        vec!["1,ann,oslo"]
    );
}

#[test]
fn a_query_the_server_refuses_is_named_as_the_query_s_fault() {
    let db = Db::create("query_refused");
    db.exec("CREATE TABLE customers (id int PRIMARY KEY, updated_at timestamp)");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("pipeline.yaml"),
        format!(
            "name: query_refused\nconnections:\n  shop:\n    kind: postgres\n    host: {}\n    port: {}\n    database: {}\n    user: {}\n",
            db.admin.host, db.admin.port, db.name, db.admin.user
        ),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.path().join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE raw AS
SELECT * FROM STREAM read_query(connection => 'shop',
  query => 'SELECT id, nope, updated_at FROM customers', watermark => 'updated_at');
",
    )
    .expect("flows.sql");
    let out = cdcflow(&["run", "-p", dir.path().to_str().expect("utf-8")]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("column \"nope\" does not exist"), "{said}");
    assert!(said.contains("check the query of read_query"), "{said}");
    assert!(!said.contains("check the connection"), "{said}");
}
