//! The vacuum of one table folder: deltalake's `Full` vacuum, asked for a dry run,
//! says which files no retained version needs; the files reached through a link and
//! those a streaming reader has yet to read are set aside; the rest are deleted here,
//! between a `VACUUM START` and a `VACUUM END` commit, and measured as they go.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use deltalake::DeltaTable;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::operations::vacuum::VacuumMode;
use deltalake::protocol::DeltaOperation;
use deltalake::table::config::TablePropertiesExt as _;
use url::Url;

use super::{TableVacuum, in_hours};
use crate::delta::Table;
use crate::{RunError, failpoint, layout};

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

/// A table's `delta.deletedFileRetentionDuration` (7 days when not set).
pub(super) fn table_retention(table: &DeltaTable) -> chrono::Duration {
    let setting = table
        .snapshot()
        .map(|s| s.table_config().deleted_file_retention_duration())
        .unwrap_or(std::time::Duration::from_secs(7 * 24 * 3600));
    chrono::Duration::from_std(setting).unwrap_or(chrono::Duration::MAX)
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
    pub(super) fn named(self, table: &str, internal_state: bool) -> TableVacuum {
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
    out.millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
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
}
