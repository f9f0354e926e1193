//! Golden run cases: every folder under `tests/run/` is a pipeline run several times.
//! Before run `n`, the contents of `steps/<n>/files/` are copied into the pipeline folder
//! (landing batches); after it, each `steps/<n>/expect/<table>.csv` must equal
//! `cdcflow query "SELECT * FROM <table>" --format csv` (rows compared in sorted order).
//! `remove` lists files (relative to the pipeline folder) deleted before the run.
//! An `expect/<name>.sql` beside `<name>.csv` is the query to compare instead.
//! Optional per step: `args` (extra `cdcflow run` arguments, one per line), `env`
//! (`NAME=value` lines set for the run, e.g. `CDCFLOW_NOW_MICROS`, the run's clock),
//! `summary` (lines the run's stdout must contain), `fails` (the run must fail and its
//! stderr contain these lines). Add a case by adding a folder; no Rust needed.

use std::fs;
use std::path::{Path, PathBuf};

use std::process::Command;

use crate::{cdcflow, repo, stderr, stdout};

fn copy_tree(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            fs::create_dir_all(&target).expect("mkdir");
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copy");
            // Landed a while ago: settled, so the run does not wait for it.
            fs::File::options()
                .write(true)
                .open(&target)
                .and_then(|f| {
                    f.set_modified(
                        std::time::SystemTime::now() - std::time::Duration::from_secs(3600),
                    )
                })
                .expect("set mtime");
        }
    }
}

fn sorted_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .map(|r| r.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    out.retain(|p| p.is_dir());
    out.sort_by_key(|p| {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        (name.parse::<u64>().unwrap_or(u64::MAX), name)
    });
    out
}

fn lines_of(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Header first, then the rows sorted.
fn canonical(csv: &[String]) -> Vec<String> {
    let mut rows = csv.to_vec();
    if rows.len() > 1 {
        rows[1..].sort();
    }
    rows
}

/// Runs one case; returns the mismatches.
fn run_case(case: &Path) -> Vec<String> {
    let name = case
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let work = tempfile::tempdir().expect("tempdir");
    for entry in fs::read_dir(case).expect("case") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            fs::copy(&path, work.path().join(path.file_name().expect("name"))).expect("copy");
        }
    }
    let dir = work.path().to_str().expect("utf-8").to_string();
    let mut problems = Vec::new();
    for step in sorted_dirs(&case.join("steps")) {
        let label = format!(
            "{name} step {}",
            step.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        );
        if step.join("files").is_dir() {
            copy_tree(&step.join("files"), work.path());
        }
        for gone in lines_of(&step.join("remove")) {
            fs::remove_file(work.path().join(&gone)).expect("remove");
        }
        let mut args = vec!["run".to_string(), "-p".to_string(), dir.clone()];
        args.extend(lines_of(&step.join("args")));
        let env: Vec<(String, String)> = lines_of(&step.join("env"))
            .iter()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(&args)
            .envs(env)
            .output()
            .expect("run cdcflow");
        let fails = lines_of(&step.join("fails"));
        if fails.is_empty() && !out.status.success() {
            problems.push(format!(
                "{label}: run failed:\n{}{}",
                stdout(&out),
                stderr(&out)
            ));
            continue;
        }
        if !fails.is_empty() {
            if out.status.success() {
                problems.push(format!(
                    "{label}: the run should have failed:\n{}",
                    stdout(&out)
                ));
            }
            for want in &fails {
                if !stderr(&out).contains(want.as_str()) {
                    problems.push(format!("{label}: stderr lacks `{want}`:\n{}", stderr(&out)));
                }
            }
        }
        for want in lines_of(&step.join("summary")) {
            if !stdout(&out).contains(want.as_str()) {
                problems.push(format!(
                    "{label}: summary lacks `{want}`:\n{}",
                    stdout(&out)
                ));
            }
        }
        let mut expects: Vec<PathBuf> = fs::read_dir(step.join("expect"))
            .map(|r| r.map(|e| e.expect("entry").path()).collect())
            .unwrap_or_default();
        expects.sort();
        for expect in expects {
            if expect.extension().is_none_or(|e| e != "csv") {
                continue;
            }
            let table = expect
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            // `<name>.sql` beside `<name>.csv` is the query to compare; else the table.
            let sql = fs::read_to_string(expect.with_extension("sql"))
                .unwrap_or_else(|_| format!("SELECT * FROM {table}"));
            let q = cdcflow(&["query", "-p", &dir, sql.trim(), "--format", "csv"]);
            if !q.status.success() {
                problems.push(format!("{label}: query {table} failed: {}", stderr(&q)));
                continue;
            }
            let actual: Vec<String> = stdout(&q).lines().map(str::to_string).collect();
            let (want, got) = (canonical(&lines_of(&expect)), canonical(&actual));
            if want != got {
                problems.push(format!(
                    "{label}: {table} differs\n--- expected\n{}\n--- actual\n{}",
                    want.join("\n"),
                    got.join("\n")
                ));
            }
        }
    }
    problems
}

#[test]
fn every_run_case_produces_its_expected_tables() {
    let root = repo().join("tests/run");
    let cases = sorted_dirs(&root);
    assert!(!cases.is_empty(), "no cases under {}", root.display());
    let only = std::env::var("CDCFLOW_CASE").ok();
    let mut problems = Vec::new();
    for case in cases {
        if only.as_deref().is_some_and(|o| !case.ends_with(o)) {
            continue;
        }
        problems.extend(run_case(&case));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
