//! A reader that goes away (`cdcflow run | true`, `cdcflow status | head -c1`) ends a
//! command quietly, as it ends other Unix tools: no panic, nothing on stderr, the work
//! done stays done and the exit status is the command's own.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::{cdcflow, repo, stderr, stdout};

/// Runs `cdcflow args` with the read end of its stdout closed before it writes, after
/// reading `read_first` bytes (as `head -c N` does).
fn with_reader_gone(args: &[&str], read_first: usize) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cdcflow");
    let mut out = child.stdout.take().expect("stdout");
    if read_first > 0 {
        let mut first = vec![0u8; read_first];
        out.read_exact(&mut first).expect("first bytes");
    }
    drop(out);
    // Bounded: a command that ignored the closed pipe forever fails the test.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("cdcflow {args:?} did not end after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn assert_quiet_end(args: &[&str], out: &Output, code: i32) {
    let err = stderr(out);
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err, "", "{args:?}");
}

/// The run of the orders example in `p` committed its last table.
fn assert_committed(p: &str) {
    let sql = "SELECT count(*) AS n FROM gold_orders_by_status";
    let rows = cdcflow(&["query", "-p", p, sql, "--format", "csv"]);
    assert_eq!(stdout(&rows), "n\n2\n", "{}", stderr(&rows));
}

fn orders() -> tempfile::TempDir {
    crate::example_copy("orders")
}

#[test]
fn run_with_its_reader_gone_commits_and_ends_quietly() {
    for json in [false, true] {
        let dir = orders();
        let p = dir.path().to_str().expect("utf-8");
        let mut args = vec!["run", "-p", p];
        if json {
            args.push("--json");
        }
        let out = with_reader_gone(&args, 0);
        assert_quiet_end(&args, &out, 0);
        assert_committed(p);
        let again = cdcflow(&["run", "-p", p]);
        assert!(stdout(&again).contains("up to date"), "{}", stdout(&again));
    }
}

#[test]
fn every_printing_command_ends_quietly_when_its_reader_is_gone() {
    let dir = orders();
    let p = dir.path().to_str().expect("utf-8");
    assert!(cdcflow(&["run", "-p", p]).status.success());
    let commands: [&[&str]; 14] = [
        &["--help"],
        &["run", "--help"],
        &["validate", "-p", p],
        &["explain", "-p", p],
        &["tables", "-p", p],
        &["tables", "-p", p, "--format", "json"],
        &["status", "-p", p],
        &["status", "-p", p, "--json"],
        &["vacuum", "-p", p, "--dry-run"],
        &["optimize", "-p", p, "--format", "json"],
        &["query", "-p", p, "SELECT * FROM silver_orders_history"],
        &[
            "query",
            "-p",
            p,
            "SELECT * FROM silver_orders_history",
            "--format",
            "csv",
        ],
        &[
            "query",
            "-p",
            p,
            "SELECT * FROM silver_orders_history",
            "--format",
            "json",
        ],
        &["run", "-p", p],
    ];
    for args in commands {
        let out = with_reader_gone(args, 0);
        assert_quiet_end(args, &out, 0);
    }
    // Diagnostics as JSON on stdout: the exit status still says the pipeline is invalid.
    let invalid = repo().join("tests/validate/scd_rules");
    let args = [
        "validate",
        "-p",
        invalid.to_str().expect("utf-8"),
        "--format",
        "json",
    ];
    let out = with_reader_gone(&args, 0);
    assert_quiet_end(&args, &out, 1);
}

#[test]
fn a_reader_that_leaves_after_the_first_byte_ends_a_long_output_quietly() {
    let dir = orders();
    let p = dir.path().to_str().expect("utf-8");
    // Far more than a pipe holds, so the writer meets the closed pipe mid-way.
    let args = [
        "query",
        "-p",
        p,
        "SELECT value FROM range(200000)",
        "--format",
        "csv",
    ];
    let out = with_reader_gone(&args, 1);
    assert_quiet_end(&args, &out, 0);
}

#[test]
fn continuous_mode_stops_quietly_when_its_reader_is_gone() {
    let dir = orders();
    let p = dir.path().to_str().expect("utf-8");
    let args = ["run", "-p", p, "--continuous"];
    let out = with_reader_gone(&args, 0);
    assert_quiet_end(&args, &out, 0);
    assert_committed(p);
}
