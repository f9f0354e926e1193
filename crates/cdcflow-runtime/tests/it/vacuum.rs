//! Vacuum: the automatic vacuum of the internal state keeps its folder bounded over many
//! batches; a vacuum stopped half way leaves tables that read the same and runs that
//! apply every batch once; files a streaming reader has yet to read are kept whatever
//! the retention; and nothing reached through a link in a table folder is deleted.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use cdcflow_plan::Pipeline;
use cdcflow_runtime::delta::Table;
use cdcflow_runtime::vacuum::{TableVacuum, VacuumOptions, vacuum};
use cdcflow_runtime::{RunOptions, RunReport, run};

use crate::recovery::{pipeline_dir, tables};

/// Batch `n`: every one of 20 keys changes (key 7 is deleted in odd batches), so every
/// batch rewrites both states.
fn land(dir: &Path, n: u64) {
    let mut text = String::new();
    for id in 1..=20u64 {
        let op = if id == 7 && n % 2 == 1 { "D" } else { "U" };
        text.push_str(&format!(
            "{{\"id\":{id},\"v\":\"v{n}-{id}\",\"op\":\"{op}\",\"seq\":{}}}\n",
            n * 100 + id
        ));
    }
    let path = dir.join(format!("landing/{n:03}.json"));
    fs::write(&path, text).expect("write");
    // Landed a while ago: settled, so the run does not wait for it.
    fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| {
            f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        })
        .expect("mtime");
}

fn load(dir: &Path) -> Pipeline {
    cdcflow_plan::load(dir, &BTreeMap::new())
        .pipeline
        .expect("pipeline")
}

async fn run_with(dir: &Path, options: &RunOptions) -> RunReport {
    let report = run(&load(dir), options).await.expect("run");
    assert!(!report.failed(), "{report:?}");
    report
}

async fn run_once(dir: &Path) -> RunReport {
    run_with(dir, &RunOptions::default()).await
}

/// The tables after batches `0..n`, each run on its own, in a pipeline never vacuumed
/// by hand.
async fn reference(n: u64) -> Vec<String> {
    let dir = pipeline_dir();
    for b in 0..n {
        land(dir.path(), b);
        run_once(dir.path()).await;
    }
    tables(dir.path()).await
}

/// (bytes, files) of the Parquet files in a table folder, and of those its current
/// version holds, measured on disk.
async fn on_disk(table: &Path) -> ((u64, usize), (u64, usize)) {
    let mut all = (0, 0);
    for e in fs::read_dir(table).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "parquet") {
            all.0 += fs::metadata(&p).expect("stat").len();
            all.1 += 1;
        }
    }
    let live_files = Table::open_dir(table)
        .await
        .expect("open")
        .files()
        .expect("files");
    let live = (
        live_files
            .iter()
            .map(|f| fs::metadata(&f.path).expect("live file on disk").len())
            .sum(),
        live_files.len(),
    );
    (all, live)
}

fn options(retain_hours: Option<f64>, force: bool, dry_run: bool) -> VacuumOptions {
    VacuumOptions {
        tables: vec![],
        retain_hours,
        force,
        dry_run,
    }
}

fn find<'a>(report: &'a [TableVacuum], table: &str, internal: bool) -> &'a TableVacuum {
    report
        .iter()
        .find(|t| t.table == table && t.internal_state == internal)
        .unwrap_or_else(|| panic!("{table} in {report:?}"))
}

#[tokio::test]
async fn the_automatic_state_vacuum_keeps_the_state_folder_under_twice_the_live_state() {
    const BATCHES: u64 = 12;
    let dir = pipeline_dir();
    let storage = dir.path().join("_storage");
    let mut vacuumed: BTreeMap<String, u64> = BTreeMap::new();
    for b in 0..BATCHES {
        land(dir.path(), b);
        let report = run_once(dir.path()).await;
        for v in &report.vacuumed {
            assert!(v.internal_state, "{v:?}");
            *vacuumed.entry(v.table.clone()).or_default() += v.files_removed;
        }
        for state in ["state/cur", "state/hist"] {
            let ((disk, disk_files), (live, live_files)) = on_disk(&storage.join(state)).await;
            assert!(
                disk - live <= live,
                "batch {b}, {state}: {disk} bytes in {disk_files} files on disk, {live} in {live_files} live"
            );
        }
    }
    // Without it, every batch would leave its state files behind: 12 versions' worth.
    for table in ["cur", "hist"] {
        assert!(vacuumed.get(table).is_some_and(|n| *n > 0), "{vacuumed:?}");
        let ((_, disk_files), (_, live_files)) = on_disk(&storage.join("state").join(table)).await;
        assert!(
            disk_files <= 2 * live_files + 1 && (disk_files as u64) < BATCHES,
            "{table}: {disk_files} files on disk, {live_files} live"
        );
    }
    // The published tables are not vacuumed by a run: readers may want older versions.
    let ((_, public_files), (_, live)) = on_disk(&storage.join("tables/cur")).await;
    assert!(public_files > live, "{public_files} files, {live} live");
    assert_eq!(tables(dir.path()).await, reference(BATCHES).await);
}

#[tokio::test]
async fn a_vacuum_stopped_half_way_leaves_tables_that_read_the_same_and_runs_that_apply_each_batch_once()
 {
    let dir = pipeline_dir();
    let storage = dir.path().join("_storage");
    for b in 0..3 {
        land(dir.path(), b);
        run_once(dir.path()).await;
    }
    let before = tables(dir.path()).await;
    let pipeline = load(dir.path());
    let planned = vacuum(&pipeline, &options(Some(0.0), true, true))
        .await
        .expect("dry run");
    let cur = find(&planned, "cur", false);
    assert!(cur.files_removed >= 2 && cur.bytes_freed > 0, "{cur:?}");
    // Stopped after deleting some of the files (a crash after `VACUUM START`).
    for f in cur.files.iter().step_by(2) {
        fs::remove_file(storage.join("tables/cur").join(f)).expect("remove");
    }
    assert_eq!(tables(dir.path()).await, before);
    // Stopped after deleting them all, before `VACUUM END`.
    let done = vacuum(&pipeline, &options(Some(0.0), true, false))
        .await
        .expect("vacuum");
    let cur = find(&done, "cur", false);
    assert!(cur.files_removed > 0, "{cur:?}");
    let log = storage.join("tables/cur/_delta_log");
    let mut commits: Vec<PathBuf> = fs::read_dir(&log)
        .expect("log")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    let end = commits.last().expect("a commit");
    assert!(
        fs::read_to_string(end)
            .expect("read")
            .contains("VACUUM END"),
        "{}",
        end.display()
    );
    fs::remove_file(end).expect("remove the end commit");
    assert_eq!(tables(dir.path()).await, before);
    // A further vacuum finds nothing more; further batches apply once each.
    let again = vacuum(&pipeline, &options(Some(0.0), true, false))
        .await
        .expect("vacuum again");
    assert_eq!(find(&again, "cur", false).files_removed, 0, "{again:?}");
    for b in 3..5 {
        land(dir.path(), b);
        run_once(dir.path()).await;
    }
    assert_eq!(tables(dir.path()).await, reference(5).await);
}

#[tokio::test]
async fn a_retention_shorter_than_the_tables_is_refused_unless_forced_and_a_dry_run_deletes_nothing()
 {
    let dir = pipeline_dir();
    for b in 0..2 {
        land(dir.path(), b);
        run_once(dir.path()).await;
    }
    let pipeline = load(dir.path());
    let err = vacuum(&pipeline, &options(Some(24.0), false, false))
        .await
        .expect_err("refused");
    let text = format!("{err} {}", err.help().unwrap_or_default());
    assert!(
        text.contains("shorter than the retention of `raw` (168 hours") && text.contains("--force"),
        "{text}"
    );
    // The table's own retention: the week-old files are none yet.
    let kept = vacuum(&pipeline, &options(None, false, false))
        .await
        .expect("vacuum");
    let cur = find(&kept, "cur", false);
    assert_eq!(
        (cur.files_removed, cur.retention_hours),
        (0, 168.0),
        "{cur:?}"
    );
    let dry = vacuum(&pipeline, &options(Some(0.0), true, true))
        .await
        .expect("dry run");
    let cur = find(&dry, "cur", false);
    assert!(cur.dry_run && cur.files_removed > 0, "{cur:?}");
    let table = dir.path().join("_storage/tables/cur");
    for f in &cur.files {
        assert!(table.join(f).is_file(), "{f} was deleted by a dry run");
    }
    let named = vacuum(
        &pipeline,
        &VacuumOptions {
            tables: vec!["nosuch".into()],
            ..options(None, false, false)
        },
    )
    .await
    .expect_err("unknown table");
    assert!(
        err_text(&named).contains("no table named `nosuch`"),
        "{named}"
    );
}

fn err_text(e: &cdcflow_runtime::RunError) -> String {
    format!("{e} {}", e.help().unwrap_or_default())
}

#[tokio::test]
async fn files_a_streaming_reader_has_yet_to_read_are_kept_whatever_the_retention() {
    let dir = pipeline_dir();
    land(dir.path(), 0);
    run_once(dir.path()).await;
    // Only the bronze flow runs: the AUTO CDC flows stay at the version before.
    land(dir.path(), 1);
    let bronze = load(dir.path())
        .flows_into("raw")
        .next()
        .expect("flow into raw")
        .name
        .clone();
    run_with(
        dir.path(),
        &RunOptions {
            flows: vec![bronze],
            ..RunOptions::default()
        },
    )
    .await;
    let raw = dir.path().join("_storage/tables/raw");
    let unread = compact_newest_file(&raw).await;
    let pipeline = load(dir.path());
    let report = vacuum(&pipeline, &options(Some(0.0), true, false))
        .await
        .expect("vacuum");
    assert_eq!(
        find(&report, "raw", false).kept_for_readers,
        1,
        "{report:?}"
    );
    assert!(raw.join(&unread).is_file(), "{unread} was deleted");
    // The readers catch up, reading the file by name, once; then it may go.
    run_once(dir.path()).await;
    assert_eq!(tables(dir.path()).await, reference(2).await);
    let report = vacuum(&pipeline, &options(Some(0.0), true, false))
        .await
        .expect("vacuum");
    let raw_report = find(&report, "raw", false);
    assert!(
        raw_report.kept_for_readers == 0 && raw_report.files.contains(&unread),
        "{raw_report:?}"
    );
    assert!(!raw.join(&unread).exists());
}

/// Rewrites the newest data file of the table at `dir` into a copy, as a compaction
/// does (`dataChange=false` remove and add); the name of the file replaced.
async fn compact_newest_file(dir: &Path) -> String {
    use deltalake::kernel::Action;
    use deltalake::kernel::transaction::CommitBuilder;
    use deltalake::protocol::DeltaOperation;

    let table = Table::open_dir(dir).await.expect("open");
    let t = table.table.as_ref().expect("table");
    let version = t.version().expect("version");
    let bytes = t
        .log_store()
        .read_commit_entry(version)
        .await
        .expect("read")
        .expect("commit");
    let add = deltalake::logstore::get_actions(version, &bytes)
        .expect("actions")
        .into_iter()
        .find_map(|a| match a {
            Action::Add(add) => Some(add),
            _ => None,
        })
        .expect("an add");
    let snapshot = t.snapshot().expect("snapshot");
    let remove = snapshot
        .log_data()
        .iter()
        .find(|f| f.path() == add.path)
        .expect("live file")
        .remove_action(false);
    let copy = format!("compacted-{}", add.path);
    fs::copy(dir.join(&add.path), dir.join(&copy)).expect("copy");
    let mut compacted = add.clone();
    compacted.path = copy;
    compacted.data_change = false;
    CommitBuilder::default()
        .with_actions(vec![Action::Remove(remove), Action::Add(compacted)])
        .build(
            Some(snapshot),
            t.log_store(),
            DeltaOperation::Optimize {
                predicate: None,
                target_size: 1 << 20,
            },
        )
        .await
        .expect("commit");
    add.path
}

#[cfg(unix)]
#[tokio::test]
async fn nothing_reached_through_a_link_in_a_table_folder_is_deleted() {
    let dir = pipeline_dir();
    for b in 0..2 {
        land(dir.path(), b);
        run_once(dir.path()).await;
    }
    let outside = tempfile::tempdir().expect("tempdir");
    fs::write(outside.path().join("part-00000-precious.parquet"), "keep").expect("write");
    fs::write(outside.path().join("precious.parquet"), "keep too").expect("write");
    let table = dir.path().join("_storage/tables/cur");
    std::os::unix::fs::symlink(outside.path(), table.join("elsewhere")).expect("link");
    std::os::unix::fs::symlink(
        outside.path().join("precious.parquet"),
        table.join("linked.parquet"),
    )
    .expect("link");
    let report = vacuum(&load(dir.path()), &options(Some(0.0), true, false))
        .await
        .expect("vacuum");
    let cur = find(&report, "cur", false);
    // deltalake's listing follows the link: its vacuum would delete this file.
    assert_eq!(
        fs::read_to_string(outside.path().join("part-00000-precious.parquet")).expect("kept"),
        "keep"
    );
    assert!(
        cur.through_links
            .iter()
            .any(|f| f == "elsewhere/part-00000-precious.parquet"),
        "{cur:?}"
    );
    // A link to a file is only a name in the table folder: removing it removes the name.
    assert!(cur.files.iter().any(|f| f == "linked.parquet"), "{cur:?}");
    assert!(fs::symlink_metadata(table.join("linked.parquet")).is_err());
    assert_eq!(
        fs::read_to_string(outside.path().join("precious.parquet")).expect("kept"),
        "keep too"
    );
}
