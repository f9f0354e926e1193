//! Crash safety: a run that dies at any step of a commit (offsets written, before a
//! Delta commit, after it — including between the two commits of an AUTO CDC batch),
//! followed by a normal run, gives exactly the tables of uninterrupted runs. The death
//! is an abort at a failpoint (`CDCFLOW_FAILPOINT`): no unwinding, no destructors, the
//! run lock left behind, as after a SIGKILL.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::{cdcflow, copy_dir, repo, snapshot, stderr, stdout};

pub(crate) const POINTS: &[&str] = &[
    "offsets:bronze_order_changes",
    "before-commit:bronze_order_changes",
    "committed:bronze_order_changes",
    "offsets:orders_changes",
    "before-commit:silver_orders_history__state",
    "committed:silver_orders_history__state",
    "before-commit:silver_orders_history",
    "committed:silver_orders_history",
    "offsets:gold_orders_by_status",
    "before-commit:gold_orders_by_status",
    "committed:gold_orders_by_status",
];

pub(crate) const SNAPSHOT: &[&str] = &[
    "SELECT * FROM bronze_order_changes ORDER BY log_position, order_id",
    "SELECT * FROM silver_orders_history ORDER BY order_id, __START_AT",
    "SELECT * FROM gold_orders_by_status ORDER BY status",
];

/// The orders example with its second landing file held back.
fn staged() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let second = dir.path().join("landing/orders/0002.json");
    let held = fs::read(&second).expect("0002.json");
    fs::remove_file(&second).expect("remove");
    (dir, held)
}

/// A run of the pipeline in `dir` that dies at failpoint `point`.
fn run_to_failpoint(dir: &Path, point: &str) {
    run_to_failpoint_with(dir, point, &[]);
}

/// [`run_to_failpoint`] with `env` set as well.
pub(crate) fn run_to_failpoint_with(dir: &Path, point: &str, env: &[(&str, String)]) {
    let died = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.to_str().expect("utf-8")])
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .env("CDCFLOW_FAILPOINT", point)
        .output()
        .expect("run");
    assert!(
        !died.status.success() && stderr(&died).contains("failpoint"),
        "{point}: the run did not reach its failpoint:\n{}{}",
        stdout(&died),
        stderr(&died)
    );
}

fn run(dir: &Path) {
    let out = cdcflow(&["run", "-p", dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn a_run_killed_at_any_step_of_a_commit_then_rerun_gives_the_uninterrupted_tables() {
    let (reference, held) = staged();
    run(reference.path());
    fs::write(reference.path().join("landing/orders/0002.json"), &held).expect("land");
    run(reference.path());
    let want = snapshot(reference.path(), SNAPSHOT);

    for point in POINTS {
        let (dir, held) = staged();
        run(dir.path());
        fs::write(dir.path().join("landing/orders/0002.json"), &held).expect("land");
        run_to_failpoint(dir.path(), point);
        run(dir.path());
        assert_eq!(
            snapshot(dir.path(), SNAPSHOT),
            want,
            "after a crash at {point}"
        );
    }
}

/// A pipeline with enough change events that a run takes a while (debug build).
pub(crate) fn big_pipeline(dir: &Path) {
    fs::write(dir.join("pipeline.yaml"), "name: big\n").expect("write");
    fs::write(
        dir.join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v BIGINT, op STRING, seq BIGINT');\n\
         CREATE OR REFRESH STREAMING TABLE cur;\n\
         CREATE FLOW cur_cdc AS AUTO CDC INTO cur FROM STREAM(raw) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op);\n\
         CREATE OR REFRESH STREAMING TABLE hist;\n\
         CREATE FLOW hist_cdc AS AUTO CDC INTO hist FROM STREAM(raw) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op) STORED AS SCD TYPE 2;\n\
         CREATE OR REFRESH MATERIALIZED VIEW totals AS SELECT count(*) AS n, sum(v) AS v FROM cur;\n",
    )
    .expect("write");
    fs::create_dir_all(dir.join("landing")).expect("mkdir");
    // 24 files of 4,000 events over 20,000 keys; a small LCG keeps it deterministic.
    let mut x: u64 = 42;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    for f in 0..24u64 {
        let mut text = String::new();
        for i in 0..4000u64 {
            let id = next() % 20_000;
            let seq = (f * 4000 + i) ^ (next() % 7);
            let op = if next() % 10 == 0 { "D" } else { "U" };
            text.push_str(&format!(
                "{{\"id\":{id},\"v\":{},\"op\":\"{op}\",\"seq\":{seq}}}\n",
                next() % 1000
            ));
        }
        fs::write(dir.join(format!("landing/{f:03}.json")), text).expect("write");
    }
}

pub(crate) const BIG_SNAPSHOT: &[&str] = &[
    "SELECT count(*) AS n, sum(v) AS v, sum(seq) AS s FROM raw",
    "SELECT count(*) AS n, sum(id * 7 + v) AS h, sum(seq) AS s FROM cur",
    "SELECT count(*) AS n, sum(id * 7 + v) AS h, sum(__START_AT) AS s, sum(coalesce(__END_AT, 0)) AS e FROM hist",
    "SELECT * FROM totals",
];

#[test]
fn the_real_binary_killed_at_random_moments_then_rerun_gives_the_uninterrupted_tables() {
    let reference = tempfile::tempdir().expect("tempdir");
    big_pipeline(reference.path());
    run(reference.path());
    let want = snapshot(reference.path(), BIG_SNAPSHOT);

    let dir = tempfile::tempdir().expect("tempdir");
    big_pipeline(dir.path());
    // Deterministic "random" moments, spread over a run's length.
    for delay_ms in [40u64, 260, 610, 150, 900, 1400] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["run", "-p", dir.path().to_str().expect("utf-8")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
    }
    run(dir.path());
    assert_eq!(snapshot(dir.path(), BIG_SNAPSHOT), want);
}

/// A golden run case's pipeline (`tests/run/<case>`), without its landing files.
fn case_staged(case: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let from = repo().join("tests/run").join(case);
    for f in ["pipeline.yaml", "flows.sql"] {
        fs::copy(from.join(f), dir.path().join(f)).expect("copy");
    }
    dir
}

/// Runs golden case `case` step by step (landing `steps/<n>/files` before each run),
/// killing the run of step `killed` at each of `points` and running it again; the
/// tables after the last step must equal those of uninterrupted runs.
fn killed_at_each_point(
    case: &str,
    steps: &[&str],
    killed: &str,
    tables: &[&str],
    points: &[&str],
) {
    killed_at_each_point_in(case, (steps, killed), tables, points, &Keep::default());
}

/// Where a kill test keeps the storage of the pipelines it kills: their folders, or
/// prefixes under a bucket URL, with the environment that reaches the bucket.
#[derive(Default)]
pub(crate) struct Keep<'a> {
    pub bucket: Option<&'a str>,
    pub env: Vec<(&'static str, String)>,
}

/// [`killed_at_each_point`], each killed pipeline's storage kept as `keep` says (the
/// uninterrupted reference's in its folder).
pub(crate) fn killed_at_each_point_in(
    case: &str,
    (steps, killed): (&[&str], &str),
    tables: &[&str],
    points: &[&str],
    keep: &Keep,
) {
    let files = |step: &str| {
        repo()
            .join("tests/run")
            .join(case)
            .join("steps")
            .join(step)
            .join("files")
    };
    let run_kept = |dir: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["run", "-p", dir.to_str().expect("utf-8")])
            .envs(keep.env.iter().map(|(k, v)| (*k, v)))
            .output()
            .expect("run");
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    };
    let snapshot_kept = |dir: &Path| -> Vec<String> {
        tables
            .iter()
            .map(|sql| {
                let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
                    .args(["query", "-p", dir.to_str().expect("utf-8"), sql])
                    .args(["--format", "csv"])
                    .envs(keep.env.iter().map(|(k, v)| (*k, v)))
                    .output()
                    .expect("query");
                assert!(out.status.success(), "{sql}: {}", stderr(&out));
                stdout(&out)
            })
            .collect()
    };
    let reference = case_staged(case);
    for step in steps {
        copy_dir(&files(step), reference.path());
        run_kept(reference.path());
    }
    let want = snapshot_kept(reference.path());
    for (i, point) in points.iter().enumerate() {
        let dir = case_staged(case);
        if let Some(bucket) = keep.bucket {
            crate::object_store::store_at(dir.path(), &format!("{bucket}/{case}/{i}"));
        }
        for step in steps {
            copy_dir(&files(step), dir.path());
            if step == &killed {
                run_to_failpoint_with(dir.path(), point, &keep.env);
            }
            run_kept(dir.path());
        }
        assert_eq!(
            snapshot_kept(dir.path()),
            want,
            "{case}: after a crash at {point}"
        );
    }
}

/// The table of the `snapshot_versions_scd2` case its kill tests compare.
pub(crate) const SNAPSHOT_VERSIONS_TABLES: &[&str] =
    &["SELECT * FROM target ORDER BY Key, __START_AT"];

/// Every point of a `snapshot_versions_scd2` batch a kill test stops it at.
pub(crate) const SNAPSHOT_VERSIONS_POINTS: &[&str] = &[
    "offsets:target_history",
    "before-commit:target__state",
    "committed:target__state",
    "before-commit:target",
    "committed:target",
];

/// The tables of the `stream_tumbling` case its kill tests compare.
pub(crate) const TUMBLING_TABLES: &[&str] = &[
    "SELECT * FROM per_minute ORDER BY k, window_start",
    "SELECT k, ts, v, _batch, _window_start, _watermark FROM per_minute__late ORDER BY k, ts",
];

/// Every point of a `stream_tumbling` batch a kill test stops it at.
pub(crate) const TUMBLING_POINTS: &[&str] = &[
    "offsets:per_minute",
    "state-written:per_minute",
    "state-renamed:per_minute",
    "before-commit:per_minute__late",
    "committed:per_minute__late",
    "before-commit:per_minute",
    "committed:per_minute",
];

/// A run of an aggregation over a watermarked stream killed at any point of its batch
/// (offsets written, state written but not in place, state in place, the late rows
/// committed, the target committed), then rerun, gives the tables of uninterrupted
/// runs: target, state and offsets agree.
#[test]
fn a_stateful_aggregation_killed_at_any_point_then_rerun_gives_the_uninterrupted_tables() {
    killed_at_each_point(
        "stream_tumbling",
        &["1", "2", "4"],
        "2",
        TUMBLING_TABLES,
        TUMBLING_POINTS,
    );
}

/// The same for a left outer join of two watermarked streams, killed in the run that
/// drops late rows of both sides.
#[test]
fn a_stream_stream_join_killed_at_any_point_then_rerun_gives_the_uninterrupted_tables() {
    killed_at_each_point(
        "stream_join_left_outer",
        &["1", "2", "3", "5", "6"],
        "3",
        &[
            "SELECT * FROM clicked ORDER BY id, shown_at, clicked_at",
            "SELECT id, _side, _watermark FROM clicked__late ORDER BY id",
        ],
        &[
            "offsets:clicked",
            "state-written:clicked",
            "state-renamed:clicked",
            "before-commit:clicked__late",
            "committed:clicked__late",
            "before-commit:clicked",
            "committed:clicked",
        ],
    );
}

/// The same for a deduplication within the watermark, killed in the run that drops a
/// late row, drops duplicates and lets keys go.
#[test]
fn a_deduplication_killed_at_any_point_then_rerun_gives_the_uninterrupted_tables() {
    killed_at_each_point(
        "stream_dedup",
        &["1", "2", "3"],
        "2",
        &[
            "SELECT * FROM deliveries ORDER BY id, ts",
            "SELECT id, ts, _batch, _watermark FROM deliveries__late ORDER BY id",
        ],
        &[
            "offsets:deliveries",
            "state-written:deliveries",
            "state-renamed:deliveries",
            "before-commit:deliveries__late",
            "committed:deliveries__late",
            "before-commit:deliveries",
            "committed:deliveries",
        ],
    );
}

/// The same for AUTO CDC FROM SNAPSHOT, killed in the run that applies two versioned
/// snapshots (SCD type 2 with TRACK HISTORY): a batch committed to one of the target's
/// two tables and not the other is applied again, with its version, against the rows
/// from before it.
#[test]
fn a_snapshot_flow_killed_at_any_point_then_rerun_gives_the_uninterrupted_tables() {
    killed_at_each_point(
        "snapshot_versions_scd2",
        &["1"],
        "1",
        SNAPSHOT_VERSIONS_TABLES,
        SNAPSHOT_VERSIONS_POINTS,
    );
}

/// A periodic snapshot flow (no WITH VERSION) killed after its published commit and
/// before its state's, whose source then changes before the rerun (key 1 changed back,
/// key 2 changed): the rerun gives the state what the published table took (not the
/// changed source compared again), and the run after it applies the changed source to
/// both, so the published history is that of uninterrupted runs.
#[test]
fn a_periodic_snapshot_killed_between_its_commits_then_changed_gives_the_uninterrupted_history() {
    periodic_snapshot_killed_between_its_commits("_storage", &[]);
}

/// The periodic snapshot kill test with the killed pipeline's storage at `storage` and
/// its runs given `env` (a bucket's settings); the reference runs in a folder.
pub(crate) fn periodic_snapshot_killed_between_its_commits(
    storage: &str,
    env: &[(&'static str, String)],
) {
    const FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE users;
CREATE FLOW users_cdc AS AUTO CDC INTO users
FROM SNAPSHOT (SELECT id, city FROM read_files('landing/users', format => 'csv',
  header => true, schema => 'id INT, city STRING'))
KEYS (id)
STORED AS SCD TYPE 2;";
    let staged = |storage: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(
            dir.path().join("pipeline.yaml"),
            format!("name: periodic\nlanding_settle_seconds: 0\nstorage: {storage}\n"),
        )
        .expect("pipeline.yaml");
        fs::write(dir.path().join("flows.sql"), FLOWS).expect("flows.sql");
        fs::create_dir_all(dir.path().join("landing/users")).expect("landing");
        dir
    };
    let land = |dir: &Path, rows: &str| {
        fs::write(
            dir.join("landing/users/users.csv"),
            format!("id,city\n{rows}"),
        )
        .expect("land");
    };
    let run_at = |dir: &Path, seconds: i64, failpoint: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cdcflow"));
        command
            .args(["run", "-p", dir.to_str().expect("utf-8")])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("CDCFLOW_NOW_MICROS", (seconds * 1_000_000).to_string());
        if let Some(point) = failpoint {
            command.env("CDCFLOW_FAILPOINT", point);
        }
        let out = command.output().expect("run");
        match failpoint {
            Some(point) => assert!(
                !out.status.success() && stderr(&out).contains("failpoint"),
                "{point}: the run did not reach its failpoint:\n{}{}",
                stdout(&out),
                stderr(&out)
            ),
            None => assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out)),
        }
    };
    let history = "SELECT * FROM users ORDER BY id, __START_AT";
    let query = |dir: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["query", "-p", dir.to_str().expect("utf-8"), history])
            .args(["--format", "csv"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .expect("query");
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let (s0, s1, s2) = (
        "1,Oslo\n2,Bergen\n",
        "1,Paris\n2,Bergen\n",
        "1,Oslo\n2,Rome\n",
    );

    let reference = staged("_storage");
    for (rows, at) in [(s0, 1_000), (s1, 2_000), (s2, 4_000)] {
        land(reference.path(), rows);
        run_at(reference.path(), at, None);
    }
    let want = query(reference.path());

    let dir = staged(storage);
    land(dir.path(), s0);
    run_at(dir.path(), 1_000, None);
    land(dir.path(), s1);
    run_at(dir.path(), 2_000, Some("committed:users"));
    land(dir.path(), s2);
    run_at(dir.path(), 3_000, None); // the batch of 2,000 applied to the state again
    run_at(dir.path(), 4_000, None);
    assert_eq!(query(dir.path()), want);
}
