//! The `--metrics-addr` endpoint bounds what clients can hold: idle connections beyond
//! its limit are closed at once and the others time out, so a crowd of them neither
//! stops the endpoint nor takes the file descriptors the flows need.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{cdcflow, copy_dir, repo, stderr, stdout};

/// Asks for the metrics once; the response, if one came.
pub fn scrape(addr: &str) -> Option<String> {
    let mut conn = TcpStream::connect(addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    conn.read_to_string(&mut response).ok()?;
    response.starts_with("HTTP/1.1 200").then_some(response)
}

/// Scrapes until an answer holds `want`, for at most `limit`.
pub fn scrape_until(addr: &str, want: &str, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(r) = scrape(addr).filter(|r| r.contains(want)) {
            return Some(r);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// A copy of the orders example run continuously with its metrics on a free loopback
/// port, allowed `open_files` file descriptors: the folder, the address and the process.
fn serving(open_files: u32) -> (tempfile::TempDir, String, Child) {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let p = dir.path().to_str().expect("utf-8");
    let child = Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -n {open_files} && exec \"$0\" \"$@\""),
        ])
        .arg(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", p, "--continuous", "--metrics-addr", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    (dir, addr, child)
}

#[test]
fn three_hundred_idle_connections_neither_stop_the_endpoint_nor_the_flows() {
    // 256 file descriptors, as on many hosts: 300 connections held would exhaust them.
    let (dir, addr, mut child) = serving(256);
    let p = dir.path().to_str().expect("utf-8");
    let first = r#"cdcflow_batches_total{pipeline="orders",flow="orders_changes"} 1"#;
    let up = scrape_until(&addr, first, Duration::from_secs(60));

    // Held open, sending nothing (an endpoint that stopped refuses some of them).
    let idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    let during = scrape_until(&addr, "cdcflow_rows_read_total{", Duration::from_secs(60));

    // The flows still have the descriptors they need.
    std::fs::write(
        dir.path().join("landing/orders/0003.json"),
        "{\"order_id\": 200, \"customer_id\": 9, \"status\": \"placed\", \"amount\": 3, \"operation\": \"INSERT\", \"commit_ts\": \"2024-06-04T10:00:00Z\", \"log_position\": 20}\n",
    )
    .expect("write");
    let second = r#"cdcflow_batches_total{pipeline="orders",flow="orders_changes"} 2"#;
    let after = scrape_until(&addr, second, Duration::from_secs(60));
    let errors = scrape(&addr).unwrap_or_default();
    drop(idle);

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("wait");
    let log = stderr(&out);
    assert!(up.is_some(), "the endpoint never answered: {log}");
    assert!(
        during.is_some(),
        "300 idle connections stopped the endpoint: {log}"
    );
    assert!(after.is_some(), "the flows stopped: {log}");
    assert!(
        errors.contains(r#"cdcflow_errors_total{pipeline="orders",flow="orders_changes"} 0"#),
        "{errors}"
    );
    let rows = cdcflow(&[
        "query",
        "-p",
        p,
        "SELECT count(*) AS n FROM silver_orders_history WHERE order_id = 200",
        "--format",
        "csv",
    ]);
    assert_eq!(stdout(&rows), "n\n1\n", "{}", stderr(&rows));
}

#[test]
fn only_get_metrics_is_served() {
    let (_dir, addr, mut child) = serving(1024);
    let up = scrape_until(&addr, "cdcflow_batches_total{", Duration::from_secs(60));
    let ask = |request: &str| -> String {
        let mut response = String::new();
        if let Ok(mut conn) = TcpStream::connect(&addr) {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = conn.write_all(request.as_bytes());
            let _ = conn.read_to_string(&mut response);
        }
        response
    };
    let other_path = ask("GET /secrets HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let other_method =
        ask("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let up = up.unwrap_or_default();
    assert!(up.contains("text/plain; version=0.0.4"), "{up}");
    assert!(other_path.starts_with("HTTP/1.1 404"), "{other_path}");
    assert!(other_method.starts_with("HTTP/1.1 405"), "{other_method}");
}
