//! `cdcflow run --continuous` and landing files that are still being written: a file is
//! taken once it is complete, so a slow producer's lines and a file created empty and
//! written later are read whole, once.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{cdcflow, stderr, stdout};

/// A pipeline appending `landing/*.json` into `raw`, with `settle` seconds of settling.
fn pipeline(settle: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(
        dir.path().join("pipeline.yaml"),
        format!("name: landing\ntrigger_interval_seconds: 0.2\nlanding_settle_seconds: {settle}\n"),
    )
    .expect("write");
    fs::write(
        dir.path().join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT');\n",
    )
    .expect("write");
    fs::create_dir_all(dir.path().join("landing")).expect("mkdir");
    dir
}

fn continuous(dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.to_str().expect("utf-8"), "--continuous"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// The rows of `raw` as `count(*)`, `count(DISTINCT id)`; `None` before it exists.
fn counts(dir: &Path) -> Option<(i64, i64)> {
    let out = cdcflow(&[
        "query",
        "-p",
        dir.to_str().expect("utf-8"),
        "SELECT count(*) AS n, count(DISTINCT id) AS d FROM raw",
        "--format",
        "json",
    ]);
    let row: serde_json::Value = serde_json::from_str(stdout(&out).lines().next()?).ok()?;
    Some((row["n"].as_i64()?, row["d"].as_i64()?))
}

/// Waits (at most a minute) until `raw` holds `n` rows.
fn wait_for_rows(dir: &Path, n: i64) -> Option<(i64, i64)> {
    let mut last = None;
    for _ in 0..300 {
        last = counts(dir);
        if last.is_some_and(|(rows, _)| rows >= n) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    last
}

/// Stops a continuous run with SIGTERM; its stdout.
fn stop(child: Child) -> String {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn continuous_mode_reads_a_file_written_line_by_line_whole() {
    let dir = pipeline("2");
    let child = continuous(dir.path());
    if wait_for_rows(dir.path(), 0).is_none() {
        panic!("no first batch: {}", stop(child));
    }
    let mut file = fs::File::options()
        .create(true)
        .append(true)
        .open(dir.path().join("landing/slow.json"))
        .expect("open");
    for id in 0..10 {
        writeln!(file, "{{\"id\": {id}}}").expect("write");
        file.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(file);
    let got = wait_for_rows(dir.path(), 10);
    let out = stop(child);
    assert_eq!(got, Some((10, 10)), "{out}");
    assert!(!out.contains("changed after"), "{out}");
}

#[test]
fn continuous_mode_reads_a_file_created_empty_and_written_later() {
    let dir = pipeline("0.5");
    let child = continuous(dir.path());
    if wait_for_rows(dir.path(), 0).is_none() {
        panic!("no first batch: {}", stop(child));
    }
    let path = dir.path().join("landing/late.json");
    fs::write(&path, "").expect("create");
    std::thread::sleep(Duration::from_millis(2500));
    fs::write(&path, "{\"id\": 1}\n{\"id\": 2}\n{\"id\": 3}\n").expect("write");
    let got = wait_for_rows(dir.path(), 3);
    let out = stop(child);
    assert_eq!(got, Some((3, 3)), "{out}");
}

#[test]
fn continuous_mode_starts_each_summary_line_with_its_time() {
    let dir = pipeline("0");
    fs::write(dir.path().join("landing/a.json"), "{\"id\": 1}\n").expect("write");
    let child = continuous(dir.path());
    let got = wait_for_rows(dir.path(), 1);
    let out = stop(child);
    assert_eq!(got, Some((1, 1)), "{out}");
    assert!(out.contains("pipeline `landing`"), "{out}");
    for line in out.lines() {
        // 2026-12-01T09:46:13.123456Z, then the summary's line.
        let (stamp, rest) = line.split_once(' ').unwrap_or_default();
        let shape: String = stamp
            .chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect();
        assert_eq!(shape, "9999-99-99T99:99:99.999999Z", "{line}");
        assert!(!rest.is_empty(), "{line}");
    }
}
