//! The vacuum of one table folder: deltalake's `Full` vacuum, asked for a dry run,
//! says which files no retained version needs; the files reached through a link and
//! those a streaming reader has yet to read are set aside; the rest are deleted here,
//! between a `VACUUM START` and a `VACUUM END` commit, and measured as they go.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use cdcflow_plan::location::Location;
use datafusion::object_store::ObjectStoreExt;
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
    place: FilePlace,
    bytes: u64,
}

/// Where a file to delete is.
enum FilePlace {
    /// On this machine.
    Path(PathBuf),
    /// In the table's bucket, relative to the table.
    Object(deltalake::Path),
}

/// Vacuums the Delta table at `at` (`None` when there is none). The caller holds the
/// run lock: a file staged by a batch under way would look unreferenced.
pub async fn vacuum_table(
    at: &Location,
    how: &TableVacuumOptions,
) -> Result<Option<FolderVacuum>, RunError> {
    let started = std::time::Instant::now();
    let opened = Table::open(at).await?;
    let dir = opened.dir.as_path();
    let Some(table) = opened.table.clone() else {
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
    let mut doomed = Vec::new();
    let mut out = FolderVacuum {
        retention,
        millis: 0,
        dry_run: how.dry_run,
        files: vec![],
        kept_for_readers: 0,
        through_links: vec![],
    };
    let sizes = match at {
        Location::Local(_) => None,
        Location::Remote(_) => Some(object_sizes(&table, dir).await?),
    };
    for name in planned.files_deleted {
        let object = object_path(dir, &name)?;
        if keep.contains(object.as_ref()) {
            out.kept_for_readers += 1;
            continue;
        }
        let (place, bytes) = match (at, &sizes) {
            (Location::Local(folder), _) => {
                let root = std::path::absolute(folder).map_err(|e| RunError::io(folder, e))?;
                let path = local_file(&root, &name)?;
                if reached_through_link(&root, &path) {
                    out.through_links.push(name);
                    continue;
                }
                // The file's own size: for a link, the link's.
                match std::fs::symlink_metadata(&path) {
                    Ok(m) => (FilePlace::Path(path), m.len()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(RunError::io(&path, e)),
                }
            }
            // A bucket has no links; a file the listing did not find is gone already.
            (Location::Remote(_), sizes) => {
                match sizes.as_ref().and_then(|s| s.get(object.as_ref())) {
                    Some(&bytes) => (FilePlace::Object(object), bytes),
                    None => continue,
                }
            }
        };
        doomed.push(Doomed {
            shown: name,
            place,
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
    crate::storage::lease::fence(&dir.to_string_lossy())?;
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
    let store = table.log_store().object_store(None);
    for (i, d) in doomed.into_iter().enumerate() {
        crate::storage::lease::fence(&dir.to_string_lossy())?;
        match &d.place {
            FilePlace::Path(path) => match std::fs::remove_file(path) {
                Ok(()) => deleted.push((d.shown, d.bytes)),
                // Gone already (a vacuum stopped half way deleted it).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(RunError::io(path, e)),
            },
            FilePlace::Object(object) => match store.delete(object).await {
                Ok(()) => deleted.push((d.shown, d.bytes)),
                Err(datafusion::object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(RunError::File {
                        path: dir.join(object.as_ref()),
                        message: format!("vacuum: {e}"),
                    });
                }
            },
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
    crate::storage::lease::fence(&dir.to_string_lossy())?;
    CommitBuilder::from(metrics_properties(metrics))
        .build(Some(&started.snapshot), table.log_store(), end)
        .await
        .map_err(err)?;
    failpoint::hit(&format!("vacuum-ended:{}", how.name));
    Ok(deleted)
}

/// The object path of `name`, a file vacuum names (relative to the table).
fn object_path(dir: &Path, name: &str) -> Result<deltalake::Path, RunError> {
    deltalake::Path::parse(name).map_err(|e| RunError::File {
        path: dir.to_path_buf(),
        message: format!("vacuum: unusable file name {name:?}: {e}"),
    })
}

/// The size of every object of a table in a bucket, by its path relative to the table
/// (one listing).
async fn object_sizes(
    table: &DeltaTable,
    dir: &Path,
) -> Result<std::collections::HashMap<String, u64>, RunError> {
    Ok(objects(table, dir)
        .await?
        .into_iter()
        .map(|meta| (meta.location.as_ref().to_string(), meta.size))
        .collect())
}

/// Every object under a table in a bucket (`dir` names it in messages), its log's
/// included, in one listing.
pub(super) async fn objects(
    table: &DeltaTable,
    dir: &Path,
) -> Result<Vec<datafusion::object_store::ObjectMeta>, RunError> {
    use futures::TryStreamExt;
    table
        .log_store()
        .object_store(None)
        .list(None)
        .try_collect()
        .await
        .map_err(|e| RunError::File {
            path: dir.to_path_buf(),
            message: format!("listing the table: {e}"),
        })
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

/// The object paths (relative to the table) of the files added by the commits after
/// version `after` (none when `after` is `None`): what a streaming reader at `after`
/// reads next.
async fn files_added_after(
    table: &DeltaTable,
    dir: &Path,
    after: Option<i64>,
) -> Result<HashSet<String>, RunError> {
    let mut out = HashSet::new();
    let (Some(after), Some(current)) = (after, table.version()) else {
        return Ok(out);
    };
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
                out.insert(object.as_ref().to_string());
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
