//! End-to-end tests: they drive the `cdcflow` binary as a user would.

// Tests may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation
)]

mod azure;
mod ci_formats;
mod cli;
mod closed_stdout;
mod cluster;
mod conf_values;
mod containment;
mod crash;
mod damaged;
mod diagnostics;
mod escape_attempt;
mod initial_load;
mod kafka;
mod kafka_avro;
mod kafka_sasl;
mod kafka_tls;
mod landing;
mod landing_columns;
mod log_format;
mod machine_output;
mod metrics_endpoint;
mod mysql;
mod object_store;
mod optimize;
mod partitioning;
mod pipeline_tests;
mod postgres;
mod query_messages;
mod query_read_only;
mod run_cases;
mod run_examples;
mod spark_literals;
mod status;
mod stored_shape;
mod time_travel;
mod ui;
mod vacuum;
mod validate_cases;
mod view_chains;

use std::path::PathBuf;
use std::process::{Command, Output};

/// The repository root (tests/ and pipelines/ live there).
pub fn repo() -> PathBuf {
    manifest_dir()
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Runs `cdcflow` with `args`.
pub fn cdcflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(args)
        .output()
        .expect("run cdcflow")
}

/// Runs `cdcflow` with `args` from the folder `cwd`.
pub fn cdcflow_in(cwd: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run cdcflow")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The crate folder, read when the test runs: the build cache is shared between
/// checkouts, so a path fixed at compile time may name another checkout.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// Copies a folder tree, leaving out `_storage` (what runs wrote).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        if entry.file_name() == "_storage" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

/// `cdcflow query -p dir sql --format csv`.
pub fn query_csv(dir: &std::path::Path, sql: &str) -> Output {
    cdcflow(&[
        "query",
        "-p",
        dir.to_str().expect("utf-8"),
        sql,
        "--format",
        "csv",
    ])
}

/// Waits (`within` at most) until `sql` gives the one value `want`; a query that fails
/// (its table not there yet) is waited past.
pub fn answers_within(
    dir: &std::path::Path,
    sql: &str,
    want: &str,
    within: std::time::Duration,
) -> bool {
    let began = std::time::Instant::now();
    while began.elapsed() < within {
        let out = query_csv(dir, sql);
        if out.status.success() && stdout(&out).lines().nth(1) == Some(want) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    false
}

/// What a server counts of the connections cdcflow made: `count()` reads the server's
/// counter, each reading one connection of its own.
pub struct ConnectionCount<'a> {
    pub count: &'a dyn Fn() -> u64,
    /// How long after a connection the counter shows it.
    pub lag: std::time::Duration,
}

impl ConnectionCount<'_> {
    /// The connections `work` made (less the counter's own).
    pub fn during(&self, work: impl FnOnce()) -> u64 {
        let before = (self.count)();
        work();
        std::thread::sleep(self.lag);
        (self.count)() - before - 1
    }

    /// For a `--continuous` run of `dir` with a 0.5 s trigger interval, that `tables` of
    /// which the last is `t<tables-1>` with one row: the connections its idle polls made
    /// over 5 s, checked at most two a poll; then `change` (setting `t7.v` to 70) must
    /// reach the table.
    pub fn idle_polls(&self, dir: &std::path::Path, tables: usize, change: impl FnOnce()) {
        let run = postgres::spawn_continuous(dir);
        let last = format!("SELECT count(*) FROM t{}", tables - 1);
        answers_within(dir, &last, "1", std::time::Duration::from_secs(180));
        std::thread::sleep(std::time::Duration::from_secs(2));
        let window = std::time::Duration::from_secs(5);
        let opened = self.during(|| std::thread::sleep(window));
        let polls = (window.as_secs_f64() / 0.5).ceil() as u64 + 1;
        change();
        let seen = answers_within(
            dir,
            "SELECT v FROM t7",
            "70",
            std::time::Duration::from_secs(60),
        );
        let (_, out) = postgres::stop(run);
        assert!(
            opened <= 2 * polls,
            "{opened} connections in {window:?} of idle polls of {tables} tables (at most 2 a poll): {}",
            stderr(&out)
        );
        assert!(seen, "the change did not arrive: {}", stderr(&out));
    }
}

/// A copy of the example pipeline `pipelines/<name>` in a temporary folder.
pub fn example_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines").join(name), dir.path());
    dir
}

/// The CSV output of each query, for comparing the tables of two pipeline folders.
pub fn snapshot(dir: &std::path::Path, queries: &[&str]) -> Vec<String> {
    queries
        .iter()
        .map(|sql| {
            let out = query_csv(dir, sql);
            assert!(out.status.success(), "{sql}: {}", stderr(&out));
            stdout(&out)
        })
        .collect()
}
