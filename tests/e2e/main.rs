//! End-to-end tests: they drive the `cdcflow` binary as a user would.

mod cli;
mod validate_cases;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (tests/ and pipelines/ live there).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
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
