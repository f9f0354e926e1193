//! The AUTO CDC apply spread over worker processes (docs/scale-out.md): `cdcflow worker`
//! processes on loopback, and `cdcflow run --workers` splitting each later batch in one
//! slice of its keys per worker, committing in the run. The tables equal a run on one
//! machine, batch after batch, for SCD type 1 and 2; a run whose worker is gone fails
//! and commits nothing, and a run after it, on the workers left, finishes the batch.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{copy_dir, repo, stderr, stdout};

/// A `cdcflow worker` on a free loopback port, killed when dropped.
struct Worker {
    child: Child,
    url: String,
}

impl Worker {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// A worker with `env` (a failpoint).
    fn start_with(env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["worker", "--listen", "127.0.0.1:0"])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("cdcflow worker starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the worker says where it listens");
        let url = line
            .trim()
            .strip_prefix("cdcflow worker listening on ")
            .unwrap_or_else(|| panic!("a worker's first line: {line:?}"))
            .to_string();
        Self { child, url }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The orders example with an SCD type 1 flow besides its SCD type 2 one, in `dir`,
/// its landing folder holding the first of its two files.
fn orders_in(dir: &Path) -> PathBuf {
    let at = dir.join("orders");
    copy_dir(&repo().join("pipelines/orders"), &at);
    std::fs::write(
        at.join("sql/04_current.sql"),
        "CREATE OR REFRESH STREAMING TABLE silver_orders;
CREATE FLOW orders_current AS AUTO CDC INTO silver_orders
FROM STREAM(bronze_order_changes) KEYS (order_id)
APPLY AS DELETE WHEN operation = 'DELETE'
SEQUENCE BY (commit_ts, log_position)
COLUMNS * EXCEPT (operation, commit_ts, log_position);
",
    )
    .expect("write");
    std::fs::rename(at.join("landing/orders/0002.json"), dir.join("0002.json"))
        .expect("set the second file aside");
    at
}

/// Lands `events` (one JSON object per line) as the file `name` of the pipeline.
fn land(pipeline: &Path, name: &str, events: &str) {
    std::fs::write(pipeline.join("landing/orders").join(name), events).expect("land");
}

/// Lands batch `name` in both pipelines; the first batch (no name) is the file
/// [`orders_in`] left in place.
fn land_both(pipelines: [&Path; 2], name: &str, events: &str) {
    if !name.is_empty() {
        for pipeline in pipelines {
            land(pipeline, name, events);
        }
    }
}

/// The three batches of the pipelines [`orders_in`] made under `root` (as `here`): the
/// first file, already in place; the second, set aside beside them; a third.
fn batches(root: &Path) -> [(&'static str, String); 3] {
    let second = std::fs::read_to_string(root.join("here/0002.json")).expect("read");
    [
        ("", String::new()),
        ("0002.json", second),
        ("0003.json", third_batch()),
    ]
}

fn run(pipeline: &Path, workers: &[&Worker]) -> std::process::Output {
    run_with(pipeline, workers, &[])
}

/// [`run`] with `env` (a failpoint).
fn run_with(pipeline: &Path, workers: &[&Worker], env: &[(&str, &str)]) -> std::process::Output {
    let mut args = vec!["run", "-p", pipeline.to_str().expect("utf-8")];
    let list = workers
        .iter()
        .map(|w| w.url.as_str())
        .collect::<Vec<_>>()
        .join(",");
    if !workers.is_empty() {
        args.extend(["--workers", &list]);
    }
    Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .expect("run cdcflow")
}

/// Both silver tables and the gold view, sorted.
fn tables(pipeline: &Path) -> String {
    tables_with(pipeline, &[])
}

/// [`tables`] with `env` (an object store's settings).
fn tables_with(pipeline: &Path, env: &[(&str, &str)]) -> String {
    let mut all = String::new();
    for sql in [
        "SELECT * FROM silver_orders ORDER BY order_id",
        "SELECT * FROM silver_orders_history ORDER BY order_id, __START_AT",
        "SELECT * FROM gold_orders_by_status ORDER BY status",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args([
                "query",
                "-p",
                pipeline.to_str().expect("utf-8"),
                sql,
                "--format",
                "csv",
            ])
            .envs(env.iter().copied())
            .output()
            .expect("query");
        assert!(out.status.success(), "{sql}: {}", stderr(&out));
        all.push_str(&stdout(&out));
    }
    all
}

/// The plan the last batch of `flow` ran, as the run recorded it.
fn last_plan(pipeline: &Path, flow: &str) -> String {
    fn find(dir: &Path, flow: &str) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()? {
            let path = entry.ok()?.path();
            if path.is_dir() {
                if let Some(found) = find(&path, flow) {
                    return Some(found);
                }
            } else if path.file_name().is_some_and(|n| n == "last_batch_plan.txt")
                && path.to_string_lossy().contains(flow)
            {
                return Some(path);
            }
        }
        None
    }
    let path = find(pipeline, flow).unwrap_or_else(|| panic!("no recorded plan of {flow}"));
    std::fs::read_to_string(path).expect("read the plan")
}

/// More changes: new orders, updates and deletes of them, late events for the
/// example's orders, and later changes of them.
fn third_batch() -> String {
    let mut lines = Vec::new();
    for id in 1..=60_i64 {
        let (op, status) = match id % 4 {
            0 => ("DELETE", "cancelled"),
            1 => ("UPDATE", "shipped"),
            _ => ("INSERT", "placed"),
        };
        let order = if id % 15 == 0 { 100 + id / 15 } else { id };
        let month = if id % 2 == 0 { 3 } else { 7 };
        lines.push(format!(
            r#"{{"order_id": {order}, "customer_id": {}, "status": "{status}", "amount": {}.50, "operation": "{op}", "commit_ts": "2024-0{month}-0{}T10:00:00Z", "log_position": {}}}"#,
            id % 7,
            id * 3,
            1 + id % 5,
            1000 + id
        ));
    }
    lines.join("\n") + "\n"
}

#[test]
fn a_run_on_two_and_three_workers_gives_the_tables_of_a_run_on_one_machine() {
    let dir = tempfile::tempdir().expect("dir");
    let workers = [Worker::start(), Worker::start(), Worker::start()];
    for n in [2, 3] {
        let root = dir.path().join(format!("on{n}"));
        let here = orders_in(&root.join("here"));
        let there = orders_in(&root.join("there"));
        let used: Vec<&Worker> = workers.iter().take(n).collect();
        // The first batch too: its tables are created empty, then merged into.
        for (name, events) in batches(&root) {
            land_both([&here, &there], name, &events);
            let out = run(&here, &[]);
            assert!(out.status.success(), "{}", stderr(&out));
            let out = run(&there, &used);
            assert!(
                out.status.success(),
                "{name} on {n} workers: {}",
                stderr(&out)
            );
            assert_eq!(tables(&there), tables(&here), "{name} on {n} workers");
            // Each slice's task is in the run's summary and in the event log.
            let summary = stdout(&out);
            for s in 0..n {
                assert!(summary.contains(&format!("slice {s} on ")), "{summary}");
            }
            let logged = crate::cdcflow(&[
                "query",
                "-p",
                there.to_str().expect("utf-8"),
                "SELECT message FROM event_log WHERE event = 'flow_completed' AND flow = 'orders_current' ORDER BY timestamp DESC LIMIT 1",
                "--format",
                "csv",
            ]);
            assert!(
                stdout(&logged).contains(&format!("slice {} on ", n - 1)),
                "{}{}",
                stdout(&logged),
                stderr(&logged)
            );
            for flow in ["orders_changes", "orders_current"] {
                let plan = last_plan(&there, flow);
                assert!(
                    plan.contains("AutoCdcCommitExec")
                        && plan.contains(&format!("slices={n} tasks={n}")),
                    "{flow}, {name} on {n} workers: {plan}"
                );
            }
        }
        assert!(tables(&here).lines().count() > 60, "{}", tables(&here));
        // Every batch ran on the workers: every file ever added to the tables says
        // which keys' buckets it holds, compacted ones too.
        let out = crate::cdcflow(&["optimize", "-p", there.to_str().expect("utf-8")]);
        assert!(out.status.success(), "{}", stderr(&out));
        let (adds, untagged) = added_files(&there.join("_storage"));
        assert!(
            adds > 0 && untagged == 0,
            "{untagged} of {adds} files untagged"
        );
        // `explain --physical` shows where the stages of the next batch would run.
        let list = used
            .iter()
            .map(|w| w.url.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let out = crate::cdcflow(&[
            "explain",
            "-p",
            there.to_str().expect("utf-8"),
            "--flow",
            "orders_current",
            "--physical",
            "--workers",
            &list,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let shown = stdout(&out);
        for part in [
            "DistributedExec",
            &format!("Stage 2 ── tasks={n}"),
            "NetworkShuffleExec",
            "NetworkCoalesceExec",
            "AutoCdcCommitExec",
            &format!("one per worker of {}", used[0].url),
        ] {
            assert!(shown.contains(part), "{part}: {shown}");
        }
    }
}

/// The Parquet files under `dir`.
fn parquet_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .map(|p| match p.is_dir() {
                    true => parquet_files(&p),
                    false => usize::from(p.extension().is_some_and(|x| x == "parquet")),
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn a_worker_killed_in_its_apply_task_commits_nothing_and_a_rerun_on_the_others_finishes_the_batch()
{
    let dir = tempfile::tempdir().expect("dir");
    let here = orders_in(&dir.path().join("here"));
    let there = orders_in(&dir.path().join("there"));
    let second = std::fs::read_to_string(dir.path().join("here/0002.json")).expect("read");
    let (good, other) = (Worker::start(), Worker::start());
    let out = run(&here, &[]);
    assert!(out.status.success(), "{}", stderr(&out));

    // A first batch on workers whose worker dies: its tables were made empty, and the
    // rerun applies the batch into them.
    let first = orders_in(&dir.path().join("first"));
    let dying = Worker::start_with(&[("CDCFLOW_FAILPOINT", "apply-task:silver_orders")]);
    let out = run(&first, &[&dying, &good]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let out = run(&first, &[&good, &other]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tables(&first), tables(&here));

    for pipeline in [&here, &there] {
        if pipeline == &there {
            let out = run(pipeline, &[]);
            assert!(out.status.success(), "{}", stderr(&out));
        }
        land(pipeline, "0002.json", &second);
    }
    let out = run(&here, &[]);
    assert!(out.status.success(), "{}", stderr(&out));

    // A worker aborts once its slice's files are written, before it returns them.
    let current = |p: &Path| {
        let sql = "SELECT * FROM silver_orders ORDER BY order_id";
        stdout(&crate::cdcflow(&[
            "query",
            "-p",
            p.to_str().expect("utf-8"),
            sql,
        ]))
    };
    let before = current(&there);
    let storage = there.join("_storage");
    let files_before = parquet_files(&storage);
    let dying = Worker::start_with(&[("CDCFLOW_FAILPOINT", "apply-task:silver_orders")]);
    let out = run(&there, &[&dying, &good]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stderr(&out).contains("orders_current"), "{}", stderr(&out));
    // The other flow's batch may or may not have finished before the worker died.
    assert_eq!(current(&there), before, "a failed batch committed");
    let orphans = parquet_files(&storage) - files_before;

    // Run again on the workers left (and one more): the batch is applied once.
    let out = run(&there, &[&good, &other]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tables(&there), tables(&here));

    // The run killed between its two commits of a batch recovers as on one machine.
    for pipeline in [&here, &there] {
        land(pipeline, "0003.json", &third_batch());
    }
    let out = run(&here, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run_with(
        &there,
        &[&good, &other],
        &[("CDCFLOW_FAILPOINT", "committed:silver_orders")],
    );
    assert!(!out.status.success(), "{}", stdout(&out));
    let out = run(&there, &[&good, &other]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tables(&there), tables(&here));
    assert!(last_plan(&there, "orders_current").contains("AutoCdcCommitExec"));

    // The failed attempt's files are named by no commit: vacuum removes them.
    assert!(orphans > 0, "the dying worker wrote no file");
    let shown = there.to_str().expect("utf-8");
    let out = crate::cdcflow(&["vacuum", "-p", shown, "--retain", "0", "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tables(&there), tables(&here));
}

/// A worker that stops answering in its apply task, as a machine gone without closing
/// its connections (its process stops itself with SIGSTOP at a failpoint): the batch
/// fails once the channels' keep-alive gives up (`CDCFLOW_WORKER_TIMEOUT_SECS`,
/// shortened here), committing nothing, and the run after it, on workers that answer,
/// finishes it. A worker stopped before the run is named by the run's version check.
#[test]
fn a_worker_that_stops_answering_fails_the_batch_after_the_timeout_and_a_rerun_finishes_it() {
    let dir = tempfile::tempdir().expect("dir");
    let here = orders_in(&dir.path().join("here"));
    let there = orders_in(&dir.path().join("there"));
    let out = run(&here, &[]);
    assert!(out.status.success(), "{}", stderr(&out));

    let frozen =
        Worker::start_with(&[("CDCFLOW_FAILPOINT", "apply-task-start:silver_orders=stop")]);
    let good = Worker::start();
    let started = std::time::Instant::now();
    let out = run_with(
        &there,
        &[&frozen, &good],
        &[("CDCFLOW_WORKER_TIMEOUT_SECS", "2")],
    );
    let waited = started.elapsed();
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("nothing of the batch was committed"),
        "{}",
        stderr(&out)
    );
    assert!(
        waited < std::time::Duration::from_secs(60),
        "the run waited {waited:?} for a worker that does not answer"
    );

    // The frozen worker, still stopped, is named before a batch is planned.
    let out = run_with(
        &there,
        &[&frozen, &good],
        &[("CDCFLOW_WORKER_TIMEOUT_SECS", "2")],
    );
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("worker {} did not answer", frozen.url))
            || stderr(&out).contains(&format!("worker {}/ did not answer", frozen.url)),
        "{}",
        stderr(&out)
    );

    let other = Worker::start();
    let out = run(&there, &[&good, &other]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tables(&there), tables(&here));
}

#[test]
fn a_pipeline_stored_in_a_bucket_runs_on_two_workers_as_in_a_folder_on_one_machine() {
    let moto = crate::object_store::Moto::start();
    moto.create_bucket("lake");
    let owned = moto.env();
    let env = crate::object_store::as_str_pairs(&owned);
    let dir = tempfile::tempdir().expect("dir");
    let here = orders_in(&dir.path().join("here"));
    let there = orders_in(&dir.path().join("there"));
    crate::object_store::store_at(&there, "s3://lake/pipelines/orders");
    let workers = [Worker::start_with(&env), Worker::start_with(&env)];
    let used: Vec<&Worker> = workers.iter().collect();
    for (name, events) in batches(dir.path()) {
        land_both([&here, &there], name, &events);
        let out = run(&here, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        // The first batch makes the tables on one machine; later ones on the workers.
        let on = if name.is_empty() { &[][..] } else { &used[..] };
        let out = run_with(&there, on, &env);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        if !name.is_empty() {
            assert!(stdout(&out).contains("slice 1 on "), "{}", stdout(&out));
        }
        assert_eq!(tables_with(&there, &env), tables(&here), "{name}");
    }
    crate::object_store::assert_nothing_stored_in(&there);
}

/// `n` changes of about `n / 4` orders (every fourth a delete), their sequence from
/// `base` on: a batch long enough for a kill to land inside it.
fn many_changes(n: i64, base: i64) -> String {
    let mut lines = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for i in 0..n {
        let order = (i * 7919 + base) % (n / 4) + 1000;
        let op = if i % 4 == 3 { "DELETE" } else { "UPDATE" };
        lines.push(format!(
            r#"{{"order_id": {order}, "customer_id": {}, "status": "s{}", "amount": {}.25, "operation": "{op}", "commit_ts": "2024-08-01T00:00:00Z", "log_position": {}}}"#,
            i % 13,
            i % 5,
            i % 1000,
            base + i
        ));
    }
    lines.join("\n") + "\n"
}

#[test]
fn workers_and_the_run_killed_at_random_moments_then_rerun_give_the_tables_of_one_machine() {
    let dir = tempfile::tempdir().expect("dir");
    let here = orders_in(&dir.path().join("here"));
    let there = orders_in(&dir.path().join("there"));
    let out = run(&here, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Each round lands a large batch and kills a worker, or the run itself, a little
    // later each time; the next round's run (on fresh workers) finishes what it left.
    // The first round's run also makes the tables, on the workers.
    let mut killed = 0;
    for round in 0..4_u64 {
        let events = many_changes(20_000, 100_000 * i64::try_from(round + 1).unwrap_or(0));
        let name = format!("big{round}.json");
        land(&here, &name, &events);
        land(&there, &name, &events);
        let workers = [Worker::start(), Worker::start()];
        let list = workers
            .iter()
            .map(|w| w.url.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let mut run = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args([
                "run",
                "-p",
                there.to_str().expect("utf-8"),
                "--workers",
                &list,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run");
        std::thread::sleep(std::time::Duration::from_millis(150 + 250 * round));
        let ended = run.try_wait().expect("wait").is_some();
        match round % 2 {
            0 => drop(workers),
            _ => {
                let _ = run.kill();
            }
        }
        let _ = run.wait();
        killed += usize::from(!ended);
    }
    assert!(
        killed > 0,
        "every run ended before its kill: land larger batches"
    );
    let workers = [Worker::start(), Worker::start()];
    let out = run(&there, &workers.iter().collect::<Vec<_>>());
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&here, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tables(&there), tables(&here));
}

/// Data files added in every Delta log under `dir`, and those without a bucket tag.
fn added_files(dir: &Path) -> (usize, usize) {
    let (mut adds, mut untagged) = (0, 0);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "system") {
                continue;
            }
            let (a, u) = added_files(&path);
            (adds, untagged) = (adds + a, untagged + u);
            continue;
        }
        let in_log = path.parent().is_some_and(|p| p.ends_with("_delta_log"));
        let is_table = ["silver_orders", "silver_orders_history"]
            .iter()
            .any(|t| path.to_string_lossy().contains(&format!("/{t}/")));
        if !in_log || !is_table || path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
            let action: serde_json::Value = serde_json::from_str(line).expect("a log action");
            if let Some(add) = action.get("add") {
                adds += 1;
                if add.pointer("/tags/cdcflow.buckets").is_none() {
                    untagged += 1;
                }
            }
        }
    }
    (adds, untagged)
}
