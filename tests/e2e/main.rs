//! End-to-end tests: they drive the `cdcflow` binary as a user would.

mod cli;
mod crash;
mod run_cases;
mod run_examples;
mod validate_cases;

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
