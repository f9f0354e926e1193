//! Vacuum: removing the files of a pipeline's Delta tables that no version within
//! their retention needs. A batch that rewrites a table leaves the files of the
//! version before it behind (time travel and readers under way may still want them),
//! and a crashed batch leaves the files it staged but never committed; vacuum is what
//! takes them away.
//!
//! Which files go is decided by delta-rs's `VacuumBuilder` in `Full` mode, asked for a
//! dry run: files removed from the table longer ago than the retention, and files in
//! the table folder no version refers to (staged by a crashed batch, superseded
//! deletion vectors) older than the retention. `Lite` mode would miss the latter.
//! The deleting is done here, not by delta-rs, for three reasons:
//! - delta-rs lists the folder through `object_store`, which follows links: a link to
//!   a folder elsewhere would have the files under it listed, and deleted, as the
//!   table's. Here a file reached through a link is never deleted (a link itself is
//!   only a name in the table folder, and deleting it leaves what it names alone).
//! - the bytes freed are measured file by file (delta-rs reports names only);
//! - the crash-safety tests stop a vacuum between its steps (failpoints
//!   `vacuum-started:<table>`, `vacuum-deleting:<table>`, `vacuum-ended:<table>`).
//!
//! A vacuum writes the two commits Delta's own writes (`VACUUM START` with the files
//! and bytes to delete, then `VACUUM END`), with no data actions: every version's
//! rows and every application transaction (a flow's exactly-once marker) stay as they
//! were, and a vacuum stopped anywhere leaves a table that reads the same.
//!
//! Besides the retention, files a streaming reader of the table has yet to read (added
//! by commits after the version its checkpoint records) are kept whatever the
//! retention: a flow behind its source reads them by name from the log.
//!
//! Two callers: `cdcflow vacuum` ([`vacuum`], under the run lock, each published
//! table with its `delta.deletedFileRetentionDuration`), and every run, which vacuums
//! the internal AUTO CDC state tables its batches changed ([`vacuum_changed_state`])
//! once they hold more unreferenced bytes than live ones.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use cdcflow_plan::{Dataset, FlowKind, Input, Pipeline};
use cdcflow_sql::ast::DatasetKind;
use deltalake::DeltaTable;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::operations::vacuum::VacuumMode;
use deltalake::protocol::DeltaOperation;
use deltalake::table::config::TablePropertiesExt as _;
use serde::Serialize;
use url::Url;

use crate::checkpoint::Checkpoint;
use crate::delta::Table;
use crate::lock::RunLock;
use crate::report::{FlowOutcome, RunReport};
use crate::{RunError, failpoint, layout};

/// What `cdcflow vacuum` does.
#[derive(Debug, Clone, Default)]
pub struct VacuumOptions {
    /// These tables (all materialized tables when empty); an AUTO CDC target's
    /// internal state table goes with it.
    pub tables: Vec<String>,
    /// Keep the files a version of the last this many hours needs; each table's
    /// `delta.deletedFileRetentionDuration` when `None`.
    pub retain_hours: Option<f64>,
    /// Go ahead with a retention shorter than a table's own.
    pub force: bool,
    /// Only say what would be removed.
    pub dry_run: bool,
}

/// What vacuum did to one table (or, for a dry run, would do).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableVacuum {
    /// The dataset, as declared.
    pub table: String,
    /// The dataset's internal AUTO CDC state table rather than the dataset's own.
    pub internal_state: bool,
    /// Files removed no earlier than this many hours ago were kept.
    pub retention_hours: f64,
    pub dry_run: bool,
    /// Files removed (a dry run: that would be).
    pub files_removed: u64,
    /// Their bytes.
    pub bytes_freed: u64,
    /// Their paths, relative to the table folder.
    pub files: Vec<String>,
    /// Files kept although the retention let them go: a streaming reader of the
    /// table has not read them yet.
    pub kept_for_readers: u64,
    /// Files not removed because they are reached through a link to a folder: the
    /// file is not the table's, whatever its name.
    pub through_links: Vec<String>,
    /// Why nothing was done (the table is not created yet).
    pub note: Option<String>,
    /// How long the vacuum of this table took, listing, commits and deletes.
    pub millis: u64,
}

impl TableVacuum {
    /// The table as people name it: the dataset, or its internal state.
    pub fn shown_name(&self) -> String {
        match self.internal_state {
            true => format!("{} (internal state)", self.table),
            false => self.table.clone(),
        }
    }

    fn untouched(table: &str, internal_state: bool, note: &str) -> Self {
        Self {
            table: table.to_string(),
            internal_state,
            retention_hours: 0.0,
            dry_run: false,
            files_removed: 0,
            bytes_freed: 0,
            files: vec![],
            kept_for_readers: 0,
            through_links: vec![],
            note: Some(note.to_string()),
            millis: 0,
        }
    }
}

/// How to vacuum one table folder.
#[derive(Debug, Clone)]
pub struct TableVacuumOptions {
    /// The retention; the table's `delta.deletedFileRetentionDuration` when `None`.
    pub retention: Option<chrono::Duration>,
    /// Whether the retention is the table's or longer (recorded in the `VACUUM START`
    /// commit, as Delta does).
    pub retention_checked: bool,
    /// Keep every file added by a commit after this version (what a streaming reader
    /// has yet to read).
    pub keep_added_after: Option<i64>,
    pub dry_run: bool,
    /// The name the failpoints of this vacuum carry.
    pub name: String,
}

/// The internal state is vacuumed without waiting: only cdcflow reads it, under the
/// run lock, and only its current version.
const STATE_RETENTION: chrono::Duration = chrono::Duration::zero();

/// Vacuums the tables `options` names (all when none), holding the pipeline's run
/// lock throughout, so no run stages or commits files meanwhile. A retention shorter
/// than a table's own is refused, before anything is deleted, unless forced.
pub async fn vacuum(
    pipeline: &Pipeline,
    options: &VacuumOptions,
) -> Result<Vec<TableVacuum>, RunError> {
    let storage = pipeline.storage_dir();
    let _lock = RunLock::acquire(&storage, &pipeline.config.name)?;
    let datasets = selected(pipeline, &options.tables)?;
    let retention = options.retain_hours.map(hours).transpose()?;
    // Every table's retention is checked before any file is deleted.
    if !options.force
        && let Some(wanted) = retention
    {
        for d in &datasets {
            let table = Table::open(&layout::table_dir(&storage, d)?).await?;
            if let Some(t) = &table.table {
                refuse_short_retention(d, wanted, table_retention(t))?;
            }
        }
    }
    let mut out = Vec::new();
    for d in datasets {
        let dir = layout::table_dir(&storage, d)?;
        let how = TableVacuumOptions {
            retention,
            retention_checked: !options.force,
            keep_added_after: oldest_unread_version(pipeline, &storage, d).await?,
            dry_run: options.dry_run,
            name: d.name.clone(),
        };
        out.push(
            vacuum_table(&dir, &how)
                .await?
                .map(|v| v.named(&d.name, false))
                .unwrap_or_else(|| TableVacuum::untouched(&d.name, false, "not created yet")),
        );
        if pipeline.flows_into(&d.name).any(|f| f.auto_cdc().is_some()) {
            let how = TableVacuumOptions {
                retention: Some(STATE_RETENTION),
                retention_checked: false,
                keep_added_after: None,
                dry_run: options.dry_run,
                name: format!("{}__state", d.name),
            };
            let state = layout::state_dir(&storage, &d.name)?;
            if let Some(v) = vacuum_table(&state, &how).await? {
                out.push(v.named(&d.name, true));
            }
        }
    }
    Ok(out)
}

/// The datasets named (every materialized one when none is), or an error naming the
/// first that is not a table of the pipeline.
fn selected<'p>(pipeline: &'p Pipeline, names: &[String]) -> Result<Vec<&'p Dataset>, RunError> {
    let tables: Vec<&Dataset> = pipeline
        .datasets
        .iter()
        .filter(|d| d.kind != DatasetKind::View)
        .collect();
    if names.is_empty() {
        return Ok(tables);
    }
    let known = || {
        let names: Vec<&str> = tables.iter().map(|d| d.name.as_str()).collect();
        format!("tables of this pipeline: {}", names.join(", "))
    };
    let mut out: Vec<&Dataset> = Vec::new();
    for name in names {
        match pipeline.dataset(name) {
            None => {
                return Err(
                    RunError::input(format!("vacuum: no table named `{name}`")).with_help(known())
                );
            }
            Some(d) if d.kind == DatasetKind::View => {
                return Err(RunError::input(format!(
                    "vacuum: `{}` is a view: it stores no files",
                    d.name
                ))
                .with_help(known()));
            }
            Some(d) if !out.iter().any(|o| o.name == d.name) => out.push(d),
            Some(_) => {}
        }
    }
    Ok(out)
}

fn hours(h: f64) -> Result<chrono::Duration, RunError> {
    if !h.is_finite() || h < 0.0 {
        return Err(
            RunError::input(format!("vacuum: --retain {h}: not a number of hours"))
                .with_help("give the hours as a number of 0 or more, e.g. --retain 168"),
        );
    }
    Ok(chrono::Duration::milliseconds((h * 3_600_000.0) as i64))
}

fn in_hours(d: chrono::Duration) -> f64 {
    d.num_milliseconds() as f64 / 3_600_000.0
}

/// A table's `delta.deletedFileRetentionDuration` (7 days when not set).
fn table_retention(table: &DeltaTable) -> chrono::Duration {
    let setting = table
        .snapshot()
        .map(|s| s.table_config().deleted_file_retention_duration())
        .unwrap_or(std::time::Duration::from_secs(7 * 24 * 3600));
    chrono::Duration::from_std(setting).unwrap_or(chrono::Duration::MAX)
}

fn refuse_short_retention(
    d: &Dataset,
    wanted: chrono::Duration,
    own: chrono::Duration,
) -> Result<(), RunError> {
    if wanted >= own {
        return Ok(());
    }
    Err(RunError::input(format!(
        "vacuum: --retain {} hours is shorter than the retention of `{}` ({} hours, its delta.deletedFileRetentionDuration); nothing was deleted",
        in_hours(wanted),
        d.name,
        in_hours(own)
    ))
    .with_help(format!(
        "readers of older versions of the table (time travel, a query or another engine's job under way) may still need those files: use --retain {} or more, or add --force when no such reader exists (cdcflow's own runs are safe: vacuum holds the run lock)",
        in_hours(own)
    )))
}

/// The oldest version of streaming table `d` that a flow reading it as a stream has
/// read up to, when that is not the current one: the files added after it are still
/// to be read, by name, from the log.
async fn oldest_unread_version(
    pipeline: &Pipeline,
    storage: &Path,
    d: &Dataset,
) -> Result<Option<i64>, RunError> {
    if d.kind != DatasetKind::StreamingTable {
        return Ok(None);
    }
    let mut oldest: Option<i64> = None;
    for flow in &pipeline.flows {
        let streams_it = flow.inputs.iter().any(|i| {
            matches!(i, Input::Dataset { name, streaming: true } if name.eq_ignore_ascii_case(&d.name))
        }) || flow
            .auto_cdc()
            .is_some_and(|s| s.streaming && s.source.eq_ignore_ascii_case(&d.name));
        let Some(target) = pipeline.dataset(&flow.target).filter(|_| streams_it) else {
            continue;
        };
        // An AUTO CDC batch is done once its state commit landed (the published one
        // lands first): its progress is the state's.
        let progress_table = match flow.kind {
            FlowKind::AutoCdc(_) => layout::state_dir(storage, &target.name)?,
            FlowKind::Query { .. } => layout::table_dir(storage, target)?,
        };
        let table = Table::open(&progress_table).await?;
        let progress = Checkpoint::new(layout::checkpoint_dir(storage, &flow.name)?)
            .peek(&table, &layout::app_id(&flow.name))
            .await?;
        if let Some(v) = progress.source_version(&d.name) {
            oldest = Some(oldest.map_or(v, |o| o.min(v)));
        }
    }
    Ok(oldest)
}

/// After a run's batches committed: vacuums the internal state of each AUTO CDC target
/// a batch changed, once its folder holds more unreferenced data bytes than live ones
/// (so the folder stays under about twice the live state, and a vacuum, with its
/// listing and two commits, comes at most every other batch even when every batch
/// rewrites the state). What it freed goes into the report; a failure is a note,
/// never a failed run: the batches are committed.
pub(crate) async fn vacuum_changed_state(
    pipeline: &Pipeline,
    storage: &Path,
    report: &mut RunReport,
) {
    let targets: BTreeSet<String> = report
        .flows
        .iter()
        .filter(|f| matches!(f.outcome, FlowOutcome::Committed { .. }))
        .filter(|f| {
            pipeline
                .flow(&f.flow)
                .is_some_and(|flow| flow.auto_cdc().is_some())
        })
        .filter_map(|f| pipeline.dataset(&f.target).map(|d| d.name.clone()))
        .collect();
    for target in targets {
        match vacuum_state_if_due(storage, &target).await {
            Ok(Some(v)) => report.vacuumed.push(v),
            Ok(None) => {}
            Err(e) => report.notes.push(format!(
                "the internal state of `{target}` was not vacuumed: {}",
                e.with_help_inline()
            )),
        }
    }
}

async fn vacuum_state_if_due(
    storage: &Path,
    target: &str,
) -> Result<Option<TableVacuum>, RunError> {
    let dir = layout::state_dir(storage, target)?;
    let table = Table::open(&dir).await?;
    let Some(t) = &table.table else {
        return Ok(None);
    };
    if !occupancy(t, &dir)?.vacuum_due() {
        return Ok(None);
    }
    let how = TableVacuumOptions {
        retention: Some(STATE_RETENTION),
        retention_checked: false,
        keep_added_after: None,
        dry_run: false,
        name: format!("{target}__state"),
    };
    Ok(vacuum_table(&dir, &how)
        .await?
        .map(|v| v.named(target, true)))
}

/// The data (Parquet) files of a table folder: on disk, and in its current version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    pub live_files: u64,
    pub live_bytes: u64,
    pub disk_files: u64,
    pub disk_bytes: u64,
}

impl Occupancy {
    /// Bytes on disk no current file accounts for.
    pub fn unreferenced_bytes(&self) -> u64 {
        self.disk_bytes.saturating_sub(self.live_bytes)
    }

    /// The rule of the automatic state vacuum: more unreferenced bytes than live ones.
    pub fn vacuum_due(&self) -> bool {
        self.unreferenced_bytes() > self.live_bytes
    }
}

/// Counts the Parquet files of the table at `dir`: those of its current version, and
/// those in its folder (links not followed, Delta's hidden `_`/`.` entries left out).
/// A listing of one folder and no reads: cheap beside the batch that changed it.
pub fn occupancy(table: &DeltaTable, dir: &Path) -> Result<Occupancy, RunError> {
    let mut o = Occupancy::default();
    let snapshot = table.snapshot().map_err(|e| RunError::delta(dir, e))?;
    for f in snapshot.log_data().iter() {
        o.live_files += 1;
        o.live_bytes += f.size().max(0) as u64;
    }
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = std::fs::read_dir(&folder).map_err(|e| RunError::io(&folder, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RunError::io(&folder, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('_') || name.starts_with('.') {
                continue;
            }
            let kind = entry
                .file_type()
                .map_err(|e| RunError::io(entry.path(), e))?;
            if kind.is_dir() {
                folders.push(entry.path());
            } else if kind.is_file() && name.ends_with(".parquet") {
                o.disk_files += 1;
                o.disk_bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    Ok(o)
}

/// What a vacuum of one folder did, before it is named.
#[derive(Debug)]
pub struct FolderVacuum {
    pub retention: chrono::Duration,
    pub millis: u64,
    pub dry_run: bool,
    /// (path relative to the table folder, bytes) of each file removed.
    pub files: Vec<(String, u64)>,
    pub kept_for_readers: u64,
    pub through_links: Vec<String>,
}

impl FolderVacuum {
    fn named(self, table: &str, internal_state: bool) -> TableVacuum {
        TableVacuum {
            table: table.to_string(),
            internal_state,
            retention_hours: in_hours(self.retention),
            dry_run: self.dry_run,
            files_removed: self.files.len() as u64,
            bytes_freed: self.files.iter().map(|(_, b)| b).sum(),
            files: self.files.into_iter().map(|(f, _)| f).collect(),
            kept_for_readers: self.kept_for_readers,
            through_links: self.through_links,
            note: None,
            millis: self.millis,
        }
    }
}

/// A file vacuum will delete.
struct Doomed {
    shown: String,
    path: PathBuf,
    bytes: u64,
}

/// Vacuums the Delta table at `dir` (`None` when there is none). The caller holds the
/// run lock: a file staged by a batch under way would look unreferenced.
pub async fn vacuum_table(
    dir: &Path,
    how: &TableVacuumOptions,
) -> Result<Option<FolderVacuum>, RunError> {
    let started = std::time::Instant::now();
    let Some(table) = Table::open(dir).await?.table else {
        return Ok(None);
    };
    let err = |e| RunError::delta(dir, e);
    let own = table_retention(&table);
    let retention = how.retention.unwrap_or(own);
    let keep = files_added_after(&table, dir, how.keep_added_after).await?;
    let (table, planned) = table
        .vacuum()
        .with_mode(VacuumMode::Full)
        .with_retention_period(retention)
        .with_enforce_retention_duration(false)
        .with_dry_run(true)
        .await
        .map_err(err)?;
    let root = std::path::absolute(dir).map_err(|e| RunError::io(dir, e))?;
    let mut doomed = Vec::new();
    let mut out = FolderVacuum {
        retention,
        millis: 0,
        dry_run: how.dry_run,
        files: vec![],
        kept_for_readers: 0,
        through_links: vec![],
    };
    for name in planned.files_deleted {
        let path = local_file(&root, &name)?;
        if keep.contains(&path) {
            out.kept_for_readers += 1;
            continue;
        }
        if reached_through_link(&root, &path) {
            out.through_links.push(name);
            continue;
        }
        // The file's own size: for a link, the link's.
        let bytes = match std::fs::symlink_metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(RunError::io(&path, e)),
        };
        doomed.push(Doomed {
            shown: name,
            path,
            bytes,
        });
    }
    doomed.sort_by(|a, b| a.shown.cmp(&b.shown));
    out.files = match how.dry_run || doomed.is_empty() {
        true => doomed.into_iter().map(|d| (d.shown, d.bytes)).collect(),
        false => delete(&table, dir, retention, own, how, doomed).await?,
    };
    out.millis = started.elapsed().as_millis() as u64;
    Ok(Some(out))
}

/// Deletes `doomed` between a `VACUUM START` and a `VACUUM END` commit, as Delta does;
/// the files deleted, with their bytes.
async fn delete(
    table: &DeltaTable,
    dir: &Path,
    retention: chrono::Duration,
    own: chrono::Duration,
    how: &TableVacuumOptions,
    doomed: Vec<Doomed>,
) -> Result<Vec<(String, u64)>, RunError> {
    let err = |e| RunError::delta(dir, e);
    let start = DeltaOperation::VacuumStart {
        retention_check_enabled: how.retention_checked,
        specified_retention_millis: Some(retention.num_milliseconds()),
        default_retention_millis: own.num_milliseconds(),
    };
    let metrics = serde_json::json!({
        "numFilesToDelete": doomed.len(),
        "sizeOfDataToDelete": doomed.iter().map(|d| d.bytes).sum::<u64>(),
    });
    let started = CommitBuilder::from(metrics_properties(metrics))
        .build(
            Some(table.snapshot().map_err(err)?),
            table.log_store(),
            start,
        )
        .await
        .map_err(err)?;
    failpoint::hit(&format!("vacuum-started:{}", how.name));
    let mut deleted = Vec::with_capacity(doomed.len());
    for (i, d) in doomed.into_iter().enumerate() {
        match std::fs::remove_file(&d.path) {
            Ok(()) => deleted.push((d.shown, d.bytes)),
            // Gone already (a vacuum stopped half way deleted it).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(RunError::io(&d.path, e)),
        }
        if i == 0 {
            failpoint::hit(&format!("vacuum-deleting:{}", how.name));
        }
    }
    let metrics = serde_json::json!({
        "numDeletedFiles": deleted.len(),
        "numVacuumedDirectories": 0,
    });
    let end = DeltaOperation::VacuumEnd {
        status: "COMPLETED".to_string(),
    };
    CommitBuilder::from(metrics_properties(metrics))
        .build(Some(&started.snapshot), table.log_store(), end)
        .await
        .map_err(err)?;
    failpoint::hit(&format!("vacuum-ended:{}", how.name));
    Ok(deleted)
}

/// Commit properties carrying `operationMetrics`; no retry, as every cdcflow commit:
/// under the run lock there is no one to race.
fn metrics_properties(metrics: serde_json::Value) -> CommitProperties {
    CommitProperties::default()
        .with_max_retries(0)
        .with_metadata([("operationMetrics".to_string(), metrics)])
}

/// The local path of `name`, an object-store path relative to the table folder
/// `root`, found as `object_store`'s local store finds it; an error unless it is
/// inside `root`.
fn local_file(root: &Path, name: &str) -> Result<PathBuf, RunError> {
    let bad = |why: String| RunError::File {
        path: root.to_path_buf(),
        message: format!("vacuum: unusable file name {name:?}: {why}"),
    };
    let object = deltalake::Path::parse(name).map_err(|e| bad(e.to_string()))?;
    let mut url = Url::from_directory_path(root).map_err(|()| bad("not a local folder".into()))?;
    url.path_segments_mut()
        .map_err(|()| bad("not a local folder".into()))?
        .pop_if_empty()
        .extend(object.parts());
    let path = url
        .to_file_path()
        .map_err(|()| bad("not a local path".into()))?;
    layout::ensure_within(root, &path)?;
    Ok(path)
}

/// Whether a folder between `root` and `path` is a link: the file then lives
/// elsewhere, and is not the table's to delete.
fn reached_through_link(root: &Path, path: &Path) -> bool {
    path.ancestors()
        .skip(1)
        .take_while(|a| *a != root)
        .any(|a| {
            std::fs::symlink_metadata(a)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(true)
        })
}

/// The local paths of the files added by the commits after version `after` (none when
/// `after` is `None`): what a streaming reader at `after` reads next.
async fn files_added_after(
    table: &DeltaTable,
    dir: &Path,
    after: Option<i64>,
) -> Result<HashSet<PathBuf>, RunError> {
    let mut out = HashSet::new();
    let (Some(after), Some(current)) = (after, table.version()) else {
        return Ok(out);
    };
    let root = std::path::absolute(dir).map_err(|e| RunError::io(dir, e))?;
    let err = |e| RunError::delta(dir, e);
    for v in (after + 1).max(0) as u64..=current {
        let Some(bytes) = table.log_store().read_commit_entry(v).await.map_err(err)? else {
            continue;
        };
        for action in deltalake::logstore::get_actions(v, &bytes).map_err(err)? {
            if let Action::Add(add) = action {
                let object = deltalake::Path::from_url_path(&add.path).map_err(|e| {
                    RunError::input(format!(
                        "{}: bad data file path {}: {e}",
                        dir.display(),
                        add.path
                    ))
                })?;
                out.insert(local_file(&root, object.as_ref())?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_found_where_the_local_store_keeps_it() {
        let root = Path::new("/data/p/_storage/tables/t");
        assert_eq!(
            local_file(root, "part-0001.parquet").expect("inside"),
            root.join("part-0001.parquet")
        );
        assert_eq!(
            local_file(root, "d=1/part 2.parquet").expect("inside"),
            root.join("d=1/part 2.parquet")
        );
        assert!(local_file(root, "../other/x.parquet").is_err());
    }

    #[test]
    fn the_state_is_due_for_a_vacuum_once_unreferenced_bytes_exceed_live_ones() {
        let o = |live_bytes, disk_bytes| Occupancy {
            live_files: 1,
            live_bytes,
            disk_files: 2,
            disk_bytes,
        };
        assert!(!o(100, 100).vacuum_due());
        assert!(!o(100, 200).vacuum_due());
        assert!(o(100, 201).vacuum_due());
        assert!(o(0, 1).vacuum_due());
        assert!(!o(0, 0).vacuum_due());
    }

    #[test]
    fn retentions_are_hours_of_zero_or_more() {
        assert_eq!(hours(1.5).expect("hours").num_minutes(), 90);
        assert!(hours(-1.0).is_err());
        assert!(hours(f64::NAN).is_err());
    }
}
