//! Delta Lake tables on the local disk: open, read whole or incrementally, and commit
//! with application-transaction ids (the exactly-once marker of each flow batch).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cdcflow_plan::location::Location;
use datafusion::arrow::array::{RecordBatch, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options, concat_batches};
use datafusion::arrow::datatypes::SchemaRef;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::operations::write::SchemaMode;
use deltalake::protocol::SaveMode;
use deltalake::{DeltaTable, DeltaTableError};
use url::Url;

use crate::RunError;

mod cluster;
mod data_file;
mod deletion_vectors;
mod encoding;
pub mod lineage;
pub(crate) mod merge;
pub mod operation;
mod parallel;
mod partitioning;
pub mod pruning;
pub(crate) mod read;
pub(crate) mod remote;
mod rewrite;
pub(crate) mod scan;
mod sink;

pub(crate) use cluster::sorted;
pub use data_file::DataFile;
pub use operation::Operation;
/// Data files written in cdcflow's encodings, uncommitted: compaction's output.
pub(crate) use parallel::{FileLayout, stage as stage_files};
pub use read::read_parquet;
pub use rewrite::{Rewrite, rewrite};
pub use sink::Sink;

/// A Delta table location and, when it exists, the table.
#[derive(Debug, Clone)]
pub struct Table {
    /// Where it is.
    pub at: Location,
    /// Its folder; for a remote table, its URL (for messages).
    pub dir: PathBuf,
    pub table: Option<DeltaTable>,
    /// A table at an object-store URL: the files fetched for reads (`remote.rs`).
    pub(crate) remote: Option<Arc<remote::Fetched>>,
}

fn url_of(dir: &Path) -> Result<Url, RunError> {
    let abs = std::path::absolute(dir).map_err(|e| RunError::io(dir, e))?;
    Url::from_directory_path(&abs).map_err(|()| RunError::File {
        path: abs.clone(),
        message: "not a usable table path".into(),
    })
}

/// The URL deltalake opens the table at `at` by.
fn url_at(at: &Location) -> Result<Url, RunError> {
    match at {
        Location::Local(dir) => url_of(dir),
        Location::Remote(url) => {
            remote::register_stores();
            Ok(url.clone())
        }
    }
}

impl Table {
    /// Opens the table at `at`, a folder or an object-store URL; a missing table is not
    /// an error. A remote table's files are fetched by the reads that need them
    /// ([`Table::fetch`], [`Table::fetch_current`]).
    pub async fn open(at: &Location) -> Result<Self, RunError> {
        let dir = match at {
            Location::Local(dir) => dir,
            Location::Remote(url) => return Self::open_remote(url, None).await,
        };
        if !has_commits(dir) {
            return Ok(Self::missing(at));
        }
        let table = match deltalake::open_table(url_of(dir)?).await {
            Ok(table) => table,
            Err(e) => return Err(damaged(dir).unwrap_or_else(|| RunError::delta(dir, e))),
        };
        Ok(Self {
            at: at.clone(),
            dir: dir.to_path_buf(),
            table: Some(table),
            remote: None,
        })
    }

    /// Opens the local table in the folder `dir`.
    pub async fn open_dir(dir: &Path) -> Result<Self, RunError> {
        Self::open(&Location::Local(dir.to_path_buf())).await
    }

    /// No table (yet) at `at`.
    pub(crate) fn missing(at: &Location) -> Self {
        Self {
            at: at.clone(),
            dir: at.shown(),
            table: None,
            remote: None,
        }
    }

    /// The table at the object-store URL `url`, at `version` (the newest when `None`).
    async fn open_remote(url: &Url, version: Option<u64>) -> Result<Self, RunError> {
        remote::register_stores();
        let at = Location::Remote(url.clone());
        let shown = at.shown();
        let mut table = DeltaTable::try_from_url(url.clone())
            .await
            .map_err(|e| RunError::delta(&shown, e))?;
        if !table
            .verify_deltatable_existence()
            .await
            .map_err(|e| RunError::delta(&shown, e))?
        {
            return Ok(Self::missing(&at));
        }
        match version {
            Some(v) => table.load_version(v).await,
            None => table.load().await,
        }
        .map_err(|e| RunError::delta(&shown, e))?;
        Ok(Self::remote_table(at, table))
    }

    /// A table at a remote location, opened, with nothing fetched yet.
    fn remote_table(at: Location, table: DeltaTable) -> Self {
        let store = table.log_store().object_store(None);
        Self {
            remote: Some(Arc::new(remote::Fetched::new(store, at.to_string()))),
            dir: at.shown(),
            at,
            table: Some(table),
        }
    }

    /// For a remote table, fetches what reading `files` needs (their data and deletion
    /// vector files); nothing for a local one.
    pub(crate) async fn fetch(&self, relative: Vec<String>) -> Result<(), RunError> {
        match &self.remote {
            Some(fetched) => fetched.fetch(relative).await,
            None => Ok(()),
        }
    }

    /// For a remote table, lets go of the fetched files at `relative`.
    pub(crate) fn forget(&self, relative: &[String]) -> Result<(), RunError> {
        match &self.remote {
            Some(fetched) => fetched.forget(relative),
            None => Ok(()),
        }
    }

    /// For a remote table, fetches every file of its current version, so that
    /// [`Table::files`] and the reads of them can run.
    pub async fn fetch_current(&self) -> Result<(), RunError> {
        self.fetch_of_current(true).await
    }

    /// For a remote table, fetches the deletion vector files of its current version, so
    /// that [`Table::files`] can run (the data files are fetched by the reads of them).
    pub async fn fetch_vectors(&self) -> Result<(), RunError> {
        self.fetch_of_current(false).await
    }

    async fn fetch_of_current(&self, data: bool) -> Result<(), RunError> {
        let (Some(t), Some(_)) = (&self.table, &self.remote) else {
            return Ok(());
        };
        let snapshot = t.snapshot().map_err(|e| self.err(e))?;
        let mut wanted = Vec::new();
        for view in snapshot.snapshot().log_data().iter() {
            if data {
                wanted.push(view.path().to_string());
            }
            if let Some(d) = view.deletion_vector_descriptor() {
                wanted.extend(deletion_vectors::stored_file(&d).map_err(|why| self.damaged(&why))?);
            }
        }
        self.fetch(wanted).await
    }

    fn damaged(&self, why: &str) -> RunError {
        RunError::File {
            path: self.dir.clone(),
            message: why.to_string(),
        }
    }

    /// The table at `at` as it was at `version` (time travel).
    pub async fn open_at(at: &Location, version: i64) -> Result<Self, RunError> {
        let dir = at.shown();
        let version = u64::try_from(version)
            .map_err(|_| RunError::input(format!("{}: no version {version}", dir.display())))?;
        let dir = match at {
            Location::Local(dir) => dir,
            Location::Remote(url) => return Self::open_remote(url, Some(version)).await,
        };
        let table = deltalake::open_table_with_version(url_of(dir)?, version)
            .await
            .map_err(|e| RunError::delta(dir, e))?;
        Ok(Self {
            at: at.clone(),
            dir: dir.to_path_buf(),
            table: Some(table),
            remote: None,
        })
    }

    pub fn exists(&self) -> bool {
        self.table.is_some()
    }

    /// The table a write goes to: the snapshot read (the one its commit replaces), or
    /// a new one at `dir` (its folder created) that the write's commit creates.
    pub(crate) async fn for_write(&self) -> Result<DeltaTable, RunError> {
        if let Some(table) = &self.table {
            return Ok(table.clone());
        }
        let dir = self.dir.as_path();
        // A bucket has no folders to make: the first object written makes the prefix.
        if let Location::Local(dir) = &self.at {
            std::fs::create_dir_all(dir).map_err(|e| RunError::io(dir, e))?;
        }
        DeltaTable::try_from_url(url_at(&self.at)?)
            .await
            .map_err(|e| RunError::delta(dir, e))
    }

    /// Whether a write of `schema` can go file by file ([`rewrite`]): the table exists,
    /// keeps these columns and has no rules of its own.
    pub fn rewritable(&self, schema: &SchemaRef, commit: &Commit) -> bool {
        self.table
            .as_ref()
            .is_some_and(|t| parallel::applies(t, schema, commit))
    }

    /// The table's current schema.
    pub fn arrow_schema(&self) -> Option<SchemaRef> {
        let t = self.table.as_ref()?;
        Some(t.snapshot().ok()?.snapshot().arrow_schema())
    }

    pub fn version(&self) -> Option<i64> {
        self.table
            .as_ref()
            .and_then(DeltaTable::version)
            .map(|v| v as i64)
    }

    /// The newest version whose commit changed the table's rows or columns: the
    /// commits of compaction and vacuum, which change neither, are passed over, so a
    /// reader that fingerprints its inputs sees the table unchanged.
    pub async fn data_version(&self) -> Result<Option<i64>, RunError> {
        let (Some(t), Some(mut v)) = (&self.table, self.version()) else {
            return Ok(None);
        };
        while v > 0 {
            let Some(actions) = self.commit_actions(t, v).await? else {
                break;
            };
            let changes = actions.iter().any(|a| match a {
                Action::Add(add) => add.data_change,
                Action::Remove(remove) => remove.data_change,
                Action::Metadata(_) | Action::Protocol(_) => true,
                _ => false,
            });
            if changes {
                break;
            }
            v -= 1;
        }
        Ok(Some(v))
    }

    /// The actions of commit `v` of `t` (this table), `None` when log cleanup removed it.
    pub(crate) async fn commit_actions(
        &self,
        t: &DeltaTable,
        v: i64,
    ) -> Result<Option<Vec<Action>>, RunError> {
        let Some(bytes) = t
            .log_store()
            .read_commit_entry(v as u64)
            .await
            .map_err(|e| self.err(e))?
        else {
            return Ok(None);
        };
        deltalake::logstore::get_actions(v as u64, &bytes)
            .map(Some)
            .map_err(|e| self.err(e))
    }

    /// The last batch committed by application `app`.
    pub async fn txn_version(&self, app: &str) -> Result<Option<i64>, RunError> {
        let Some(t) = &self.table else {
            return Ok(None);
        };
        let snapshot = t.snapshot().map_err(|e| self.err(e))?;
        snapshot
            .transaction_version(t.log_store().as_ref(), app)
            .await
            .map_err(|e| self.err(e))
    }

    /// The offsets recorded in the commits that carry `app` at one of `batches`, found by
    /// reading the log from the newest commit back (commits removed by log cleanup are
    /// not searched).
    pub async fn batch_offsets(
        &self,
        app: &str,
        batches: &BTreeSet<i64>,
    ) -> Result<BTreeMap<i64, serde_json::Value>, RunError> {
        let mut found = BTreeMap::new();
        let Some(t) = &self.table else {
            return Ok(found);
        };
        for v in (0..=self.version().unwrap_or(-1)).rev() {
            if found.len() == batches.len() {
                break;
            }
            let Some(actions) = self.commit_actions(t, v).await? else {
                break;
            };
            let batch = actions.iter().find_map(|a| match a {
                Action::Txn(t) if t.app_id == app && batches.contains(&t.version) => {
                    Some(t.version)
                }
                _ => None,
            });
            let offsets = actions.iter().find_map(|a| match a {
                Action::CommitInfo(info) => info.info.get(OFFSETS_KEY).cloned(),
                _ => None,
            });
            if let (Some(batch), Some(offsets)) = (batch, offsets) {
                found.entry(batch).or_insert(offsets);
            }
        }
        Ok(found)
    }

    fn err(&self, e: DeltaTableError) -> RunError {
        RunError::delta(&self.dir, e)
    }

    /// [`Table::files`], once a remote table's files are fetched: what a read of the
    /// whole current version calls.
    pub async fn fetched_files(&self) -> Result<Vec<DataFile>, RunError> {
        self.fetch_current().await?;
        self.files()
    }

    /// The data files of the current version, with their deletion vectors loaded (a
    /// remote table's fetched first: [`Table::fetched_files`]).
    pub fn files(&self) -> Result<Vec<DataFile>, RunError> {
        let Some(t) = &self.table else {
            return Ok(vec![]);
        };
        let snapshot = t.snapshot().map_err(|e| self.err(e))?;
        snapshot
            .snapshot()
            .log_data()
            .iter()
            .map(|view| self.file_of(&view))
            .collect()
    }

    /// The data file of the log entry `view` of this table, with its deletion vector
    /// loaded (a remote table's vector fetched first: [`Table::fetch_vectors`]).
    pub(crate) fn file_of(
        &self,
        view: &deltalake::kernel::LogicalFileView,
    ) -> Result<DataFile, RunError> {
        match &self.remote {
            Some(fetched) => remote_data_file(&self.dir, fetched, view),
            None => data_file(&self.dir, local_file_of(&self.dir, view)?, view),
        }
    }

    /// The add actions of the current version's files (paths and statistics); no file
    /// is read.
    pub fn adds(&self) -> Result<Vec<deltalake::kernel::Add>, RunError> {
        let Some(t) = &self.table else {
            return Ok(vec![]);
        };
        let snapshot = t.snapshot().map_err(|e| self.err(e))?;
        // The kernel's view is what deltalake reads; its add action is the log's.
        #[allow(deprecated)]
        let adds = snapshot
            .snapshot()
            .log_data()
            .iter()
            .map(|view| view.add_action())
            .collect();
        Ok(adds)
    }

    /// Whether the current version has no data files (a table a full refresh emptied).
    pub fn is_empty(&self) -> Result<bool, RunError> {
        let Some(t) = &self.table else {
            return Ok(true);
        };
        let snapshot = t.snapshot().map_err(|e| self.err(e))?;
        Ok(snapshot.snapshot().log_data().iter().next().is_none())
    }

    /// Whether the table's protocol lets rows be deleted by deletion vectors.
    pub fn has_deletion_vectors(&self) -> bool {
        let Some(snapshot) = self.table.as_ref().and_then(|t| t.snapshot().ok()) else {
            return false;
        };
        // The kernel's feature list is internal; its JSON form is the protocol's own.
        serde_json::to_value(snapshot.protocol())
            .ok()
            .and_then(|p| p.get("writerFeatures").cloned())
            .and_then(|f| f.as_array().cloned())
            .is_some_and(|f| f.iter().any(|x| x == "deletionVectors"))
    }

    /// Every live row of the current version, in the columns of `schema` (cast by
    /// name; a column the files lack is null), in file order.
    pub async fn read_batches(&self, schema: &SchemaRef) -> Result<Vec<RecordBatch>, RunError> {
        read::read_files(&self.fetched_files().await?, schema)
    }

    /// Every row of the current version as one batch.
    pub async fn read_all(&self, schema: &SchemaRef) -> Result<RecordBatch, RunError> {
        Ok(concat_batches(schema, &self.read_batches(schema).await?)?)
    }

    /// The rows added by commits after `after` up to the current version (the whole
    /// current version when `after` is `None`), each batch with where it came from (the
    /// landing files its commit read, else its data file), and the current version.
    /// Fails on a commit that removed data: a streaming source must be append-only.
    pub async fn appended_since(
        &self,
        after: Option<i64>,
        schema: &SchemaRef,
    ) -> Result<(Vec<(String, RecordBatch)>, Option<i64>), RunError> {
        let (files, current) = self.appended_files(after).await?;
        Ok((read_named(&files, schema)?, current))
    }

    /// The files whose rows [`Table::appended_since`] reads, each with where its rows
    /// came from, and the current version.
    pub async fn appended_files(
        &self,
        after: Option<i64>,
    ) -> Result<(Vec<(String, DataFile)>, Option<i64>), RunError> {
        let Some(t) = &self.table else {
            return Ok((vec![], None));
        };
        let current = t.version().map(|v| v as i64);
        let mut out = Vec::new();
        let Some(after) = after else {
            // A first read takes the current snapshot, as Delta streaming sources do:
            // older versions may hold rows a full refresh removed since.
            self.fetch_current().await?;
            let files = self.files()?;
            let wanted: Vec<String> = files
                .iter()
                .filter_map(|f| f.add.as_ref().map(|a| a.path.clone()))
                .collect();
            let labels = self.landing_labels(t, &wanted).await?;
            for file in files {
                let name = file
                    .add
                    .as_ref()
                    .and_then(|a| labels.get(&a.path).cloned())
                    .or_else(|| {
                        file.path
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                    })
                    .unwrap_or_default();
                out.push((name, file));
            }
            return Ok((out, current));
        };
        let first = after + 1;
        for v in first..=current.unwrap_or(-1) {
            let v = v as u64;
            let bytes = t
                .log_store()
                .read_commit_entry(v)
                .await
                .map_err(|e| self.err(e))?
                .ok_or_else(|| {
                    RunError::input(format!(
                        "{}: commit {v} is gone from the Delta log",
                        self.dir.display()
                    ))
                    .with_help("the log was cleaned up before this flow read it; run with --full-refresh for the tables reading it")
                })?;
            let actions = deltalake::logstore::get_actions(v, &bytes).map_err(|e| self.err(e))?;
            let landing = lineage::label_of(&actions);
            for action in actions {
                match action {
                    Action::Add(add) if add.data_change => {
                        let (path, remote) = match &self.remote {
                            Some(fetched) => (
                                self.dir.join(&add.path),
                                Some(remote::RemoteFile {
                                    fetched: Arc::clone(fetched),
                                    relative: add.path.clone(),
                                }),
                            ),
                            None => (data_file_path(&self.dir, &add.path)?, None),
                        };
                        let origin = landing.clone().unwrap_or_else(|| add.path.clone());
                        let file = DataFile {
                            path,
                            deleted: None,
                            add: Some(add),
                            remote,
                        };
                        out.push((origin, file));
                    }
                    Action::Remove(r) if r.data_change => {
                        // The reader names the source and the tables reading it.
                        let name = self
                            .dir
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        return Err(RunError::rewritten(&name, v as i64, &[]));
                    }
                    _ => {}
                }
            }
        }
        self.fetch(
            out.iter()
                .filter_map(|(_, f)| f.remote.as_ref().map(|r| r.relative.clone()))
                .collect(),
        )
        .await?;
        Ok((out, current))
    }
}

/// The rows of `files`, each batch with the name of the file it came from.
pub fn read_named(
    files: &[(String, DataFile)],
    schema: &SchemaRef,
) -> Result<Vec<(String, RecordBatch)>, RunError> {
    let mut rows = Vec::new();
    for (origin, file) in files {
        for batch in read::read_files(std::slice::from_ref(file), schema)? {
            rows.push((origin.clone(), batch));
        }
    }
    Ok(rows)
}

/// The data file at `path` of the table at `dir`, from its log entry `view`, with its
/// deletion vector loaded.
pub(crate) fn data_file(
    dir: &Path,
    path: PathBuf,
    view: &deltalake::kernel::LogicalFileView,
) -> Result<DataFile, RunError> {
    file_of(path, view, None, |d| deletion_vectors::load(dir, d))
}

/// The data file of a remote table from its log entry `view`, with its deletion vector
/// read from the fetched files.
fn remote_data_file(
    url: &Path,
    fetched: &Arc<remote::Fetched>,
    view: &deltalake::kernel::LogicalFileView,
) -> Result<DataFile, RunError> {
    let relative = view.path().to_string();
    let path = url.join(&relative);
    let remote = remote::RemoteFile {
        fetched: Arc::clone(fetched),
        relative,
    };
    file_of(path, view, Some(remote), |d| {
        deletion_vectors::load_fetched(url, fetched, d)
    })
}

/// A data file from its log entry `view`, its deletion vector read by `load`.
fn file_of(
    path: PathBuf,
    view: &deltalake::kernel::LogicalFileView,
    remote: Option<remote::RemoteFile>,
    load: impl FnOnce(
        &deltalake::kernel::DeletionVectorDescriptor,
    ) -> Result<roaring::RoaringTreemap, RunError>,
) -> Result<DataFile, RunError> {
    let deleted = view
        .deletion_vector_descriptor()
        .map(|d| load(&d))
        .transpose()?;
    // The add action is what a merge-on-write re-adds with a larger vector.
    #[allow(deprecated)]
    let add = view.add_action();
    Ok(DataFile {
        path,
        deleted: deleted.map(Arc::new),
        add: Some(add),
        remote,
    })
}

pub use cdcflow_plan::delta_schema::has_commits;

/// The newest commit file of the table at `dir` when it is damaged: cut short (a full
/// disk, a copy stopped half way) or otherwise not JSON lines. deltalake cannot open
/// such a table at all.
pub fn damaged_commit(dir: &Path) -> Option<PathBuf> {
    let log = dir.join("_delta_log");
    let newest = std::fs::read_dir(&log)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| s.parse::<u64>().is_ok())
        })
        .max()?;
    let text = std::fs::read(&newest).ok()?;
    let whole = !text.is_empty()
        && text
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .all(|l| serde_json::from_slice::<serde_json::Value>(l).is_ok());
    (!whole).then_some(newest)
}

/// The error for a table whose newest commit is damaged, naming the file and the fix.
fn damaged(dir: &Path) -> Option<RunError> {
    let file = damaged_commit(dir)?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(
        RunError::input(format!(
            "Delta table {}: its newest commit {} is damaged (cut short or not JSON), so the table cannot be read",
            dir.display(),
            file.display()
        ))
        .with_help(format!(
            "run `cdcflow run --full-refresh {name}` to rebuild the table (the damaged commit is moved to {}); or move that file away by hand to go back to the version before it",
            dir.join(DAMAGED_DIR).display()
        )),
    )
}

/// Where a full refresh moves a table's damaged commit: outside the log, kept for a look.
const DAMAGED_DIR: &str = "_delta_log_damaged";

/// Moves the damaged newest commit of the table at `dir` out of its log (see
/// [`damaged_commit`]), so that the table opens at the version before it; the file
/// moved, if any.
pub fn set_damaged_commit_aside(dir: &Path) -> Result<Option<PathBuf>, RunError> {
    let Some(file) = damaged_commit(dir) else {
        return Ok(None);
    };
    let aside = dir.join(DAMAGED_DIR);
    std::fs::create_dir_all(&aside).map_err(|e| RunError::io(&aside, e))?;
    let to = aside.join(file.file_name().unwrap_or_default());
    std::fs::rename(&file, &to).map_err(|e| RunError::io(&file, e))?;
    // The only commit was damaged: there is no table left to open, so there is none.
    let log = dir.join("_delta_log");
    let versions_left = std::fs::read_dir(&log)
        .map_err(|e| RunError::io(&log, e))?
        .filter_map(|e| e.ok())
        .any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".json") || name.ends_with(".parquet")
        });
    if !versions_left {
        std::fs::remove_dir_all(&log).map_err(|e| RunError::io(&log, e))?;
    }
    Ok(Some(to))
}

/// The environment variable through which deltalake's file writer takes how many parts
/// of one file it uploads at a time ([`UPLOAD_CONCURRENCY`] unless a user sets it).
pub const UPLOAD_CONCURRENCY_VAR: &str = "DELTARS_MAX_CONCURRENCY_TASKS";

/// Parts of a data file in flight at a time. deltalake's default (10 parts of 5 MB per
/// file, each holding its bytes until written) buys nothing on a local disk, and with a
/// file writer per core it held 153 MB of a 1.1e7-row append at its peak; two parts
/// keep a write as fast (measured on that append, 2026-12-01).
pub const UPLOAD_CONCURRENCY: &str = "2";

/// How a commit changes the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Append,
    Overwrite,
    /// Rows deleted by deletion vectors and rows appended ([`merge::stage_written`]). Like an
    /// overwrite, it may carry a batch again: it replaces what it read.
    Merge,
}

/// What a commit records besides the data (data itself: an execution plan that commits
/// carries it across machines, `cdc::exec::codec`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Commit {
    /// (application id, batch) pairs: a rerun of a committed batch is detected by them.
    pub txns: Vec<(String, i64)>,
    /// Table properties for a new table (`delta.*` ones are Delta's own).
    pub configuration: BTreeMap<String, String>,
    pub name: String,
    pub description: Option<String>,
    /// The batch's offsets, kept in the commit's `commitInfo` so that a lost or damaged
    /// checkpoint file of a committed batch is restored from the table.
    pub offsets: Option<serde_json::Value>,
    /// The landing files the batch's rows were read from, as shown to users: readers
    /// of the table name them for its rows ([`lineage`]).
    pub landing_files: Vec<String>,
    /// What the commit does, for its `commitInfo` (`DESCRIBE HISTORY`).
    pub operation: Operation,
    /// The table's declared partition columns (`PARTITIONED BY`, none for an
    /// unpartitioned table); `None` keeps whatever the table has (cdcflow's own tables).
    pub partition_columns: Option<Vec<String>>,
    /// `CLUSTER BY`: the columns the rows of each write are sorted by.
    pub cluster_columns: Vec<String>,
}

const TWO_RUNS_HELP: &str = "are two cdcflow runs using this storage folder? Run again when it is alone: the next run goes on from what is committed";

/// The `commitInfo` key of a batch's offsets.
pub const OFFSETS_KEY: &str = "cdcflow.offsets";

/// The table property naming how many commits lie between two Delta checkpoints.
const CHECKPOINT_INTERVAL_KEY: &str = "delta.checkpointInterval";

/// The checkpoint interval of the tables cdcflow creates, unless their TBLPROPERTIES
/// name one: Delta Lake's own default (Spark writes a checkpoint every 10 commits), not
/// delta-rs's 100. Every batch opens its tables and replays the log since the last
/// checkpoint, so a pipeline committing every half second would pay for up to 100 JSON
/// commits a table a batch (docs/runtime.md, "Continuous mode").
const CHECKPOINT_INTERVAL: &str = "10";

/// `configuration` with the checkpoint interval added where it names none.
fn with_checkpoint_interval(
    mut configuration: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    if !configuration
        .keys()
        .any(|k| k.eq_ignore_ascii_case(CHECKPOINT_INTERVAL_KEY))
    {
        configuration.insert(CHECKPOINT_INTERVAL_KEY.into(), CHECKPOINT_INTERVAL.into());
    }
    configuration
}

/// Writes `batches` to the table at `at` (created with `schema` when missing) in one
/// atomic commit carrying `commit.txns`.
pub async fn write(
    at: &Location,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    mode: Mode,
    commit: &Commit,
) -> Result<(), RunError> {
    stage(at, schema, batches, commit)
        .await?
        .commit(mode, commit)
        .await
}

/// Appends `batches` for batch `batch` of the flow whose commits carry `app`, once: when
/// the table already holds that batch's commit (a rerun after a crash past it), nothing
/// is written. For the side tables a batch writes before its target (quarantined
/// records, late rows), whose commit carries the same transaction id.
pub async fn append_once(
    at: &Location,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    app: &str,
    batch: i64,
    commit: &Commit,
) -> Result<(), RunError> {
    let table = Table::open(at).await?;
    if table.txn_version(app).await?.is_some_and(|v| v >= batch) {
        return Ok(());
    }
    write(at, schema, batches, Mode::Append, commit).await
}

/// A write whose data files may be written already, awaiting its commit: two tables'
/// files can be encoded together and committed in the order their consistency needs.
pub struct Staged {
    dir: PathBuf,
    table: DeltaTable,
    schema: SchemaRef,
    data: StagedData,
}

enum StagedData {
    /// Data files written, to be committed with these actions.
    Files(Vec<Action>),
    /// A write that changes the table's columns: deltalake's write operation writes
    /// and commits at once.
    Batches(Vec<RecordBatch>),
}

/// Writes the data files of a [`write`] of `batches` to the table at `at`, without
/// committing them (a crash leaves them unreferenced, as a failed write would).
pub async fn stage(
    at: &Location,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    commit: &Commit,
) -> Result<Staged, RunError> {
    let table = Table::missing(at).for_write().await?;
    let dir = at.shown();
    let data = match parallel::applies(&table, schema, commit) {
        true => StagedData::Files(
            parallel::stage(&table, schema, batches, &commit.file_layout())
                .await
                .map_err(|e| RunError::delta(&dir, e))?,
        ),
        false => StagedData::Batches(batches),
    };
    Ok(Staged {
        dir,
        table,
        schema: Arc::clone(schema),
        data,
    })
}

impl Staged {
    /// Commits the staged write, carrying `commit.txns`. An append of a batch the table
    /// has already is refused, and no commit lands on a table changed since it was
    /// read: a batch is never applied twice, even by two runs that read the same table
    /// version. (An overwrite may carry a batch again: AUTO CDC re-applies a batch
    /// whose published commit landed without its state's, replacing what it read.)
    pub async fn commit(self, mode: Mode, commit: &Commit) -> Result<(), RunError> {
        // A run whose lease on a bucket is lost stops before it commits.
        crate::storage::lease::fence(&self.dir.to_string_lossy())?;
        let dir = self.dir.clone();
        let read_version = self.table.version();
        let log_store = self.table.log_store();
        commit.check_partitioning(&dir, &self.table, mode)?;
        if mode == Mode::Append {
            commit.refuse_committed(&dir, &self.table).await?;
        }
        match self.commit_unchecked(mode, commit).await {
            Ok(()) => Ok(()),
            Err(e) => Err(commit
                .interfered(&dir, log_store, read_version)
                .await
                .unwrap_or(e)),
        }
    }

    async fn commit_unchecked(self, mode: Mode, commit: &Commit) -> Result<(), RunError> {
        let Self {
            dir,
            table,
            schema,
            data,
        } = self;
        let batches = match data {
            StagedData::Files(adds) => {
                return parallel::commit_staged(&table, &schema, adds, mode, commit)
                    .await
                    .map_err(|e| RunError::delta(&dir, e));
            }
            StagedData::Batches(b) if b.is_empty() => {
                vec![RecordBatch::new_empty(Arc::clone(&schema))]
            }
            StagedData::Batches(b) => cluster::sorted_batches(b, &commit.cluster_columns)?,
        };
        let properties = encoding::writer_properties(&schema, &batches);
        let new_table = table.version().is_none();
        let mut builder = table
            .write(batches)
            .with_save_mode(match mode {
                Mode::Append | Mode::Merge => SaveMode::Append,
                Mode::Overwrite => SaveMode::Overwrite,
            })
            .with_commit_properties(commit.properties())
            // Columns may be added (schema drift in landing files, `COLUMNS *`): appends
            // merge them in, rewrites take the new schema.
            .with_schema_mode(match mode {
                Mode::Append | Mode::Merge => SchemaMode::Merge,
                Mode::Overwrite => SchemaMode::Overwrite,
            })
            .with_table_name(&commit.name)
            .with_writer_properties(properties);
        // A new table, or a replacement, takes the declared partitioning; any other
        // write keeps the table's (`Staged::commit` refused one that differs).
        if let Some(partitions) = &commit.partition_columns
            && (new_table || mode == Mode::Overwrite)
        {
            builder = builder.with_partition_columns(partitions.clone());
        }
        if let Some(d) = &commit.description {
            builder = builder.with_description(d);
        }
        let delta_props = commit.delta_properties();
        if !delta_props.is_empty() {
            builder = builder.with_configuration(delta_props);
        }
        crate::failpoint::hit(&format!("before-commit:{}", commit.name));
        builder.await.map_err(|e| RunError::delta(&dir, e))?;
        crate::failpoint::hit(&format!("committed:{}", commit.name));
        Ok(())
    }
}

impl Commit {
    /// The table properties Delta itself reads (`delta.*`), for a new table: those
    /// declared, and the checkpoint interval of [`with_checkpoint_interval`].
    pub(crate) fn delta_properties(&self) -> Vec<(String, Option<String>)> {
        with_checkpoint_interval(self.configuration.clone())
            .into_iter()
            .filter(|(k, _)| k.starts_with("delta."))
            .map(|(k, v)| (k, Some(v)))
            .collect()
    }

    /// The application transactions to record, as Delta commit properties. No retry:
    /// a commit lands on the table version it was built from or not at all, so the
    /// check of [`Commit::refuse_committed`] holds for the version it lands on (deltalake
    /// would otherwise retry a lost race to create a table on top of the winner's
    /// commit without checking its transactions).
    fn properties(&self) -> CommitProperties {
        let mut properties = CommitProperties::default()
            .with_max_retries(0)
            .with_application_transactions(
                self.txns
                    .iter()
                    .map(|(app, v)| deltalake::kernel::Transaction::new(app, *v))
                    .collect(),
            );
        // `with_metadata` replaces what it had: every key goes in at once.
        let mut metadata = Vec::new();
        if let Some(offsets) = &self.offsets {
            metadata.push((OFFSETS_KEY.to_string(), offsets.clone()));
        }
        if !self.landing_files.is_empty() {
            metadata.push((
                lineage::LANDING_KEY.to_string(),
                serde_json::json!(self.landing_files),
            ));
        }
        // deltalake merges these into the parameters of its own operation (and of the
        // `commitInfo` that [`Commit::commit_info`] gives, which names the operation).
        let parameters = self.operation.parameters();
        if !parameters.is_empty() {
            metadata.push((
                "operationParameters".to_string(),
                serde_json::Value::Object(parameters.into_iter().collect()),
            ));
        }
        if !metadata.is_empty() {
            properties = properties.with_metadata(metadata);
        }
        properties
    }

    /// The `commitInfo` action that names what the commit did, when deltalake's name
    /// for the operation it runs would not say it (`WRITE` for every kind of write):
    /// deltalake keeps a `commitInfo` it is given, adding the parameters and metadata
    /// of [`Commit::properties`].
    pub(crate) fn commit_info(&self) -> Option<Action> {
        let name = self.operation.name()?;
        Some(Action::CommitInfo(deltalake::kernel::CommitInfo {
            timestamp: Some(chrono::Utc::now().timestamp_millis()),
            operation: Some(name.to_string()),
            engine_info: Some(format!("cdcflow-{} (delta-rs)", env!("CARGO_PKG_VERSION"))),
            ..Default::default()
        }))
    }

    /// The batches of `txns` (a reset, version -1, excepted) that `table` has already.
    async fn already_in(&self, table: &DeltaTable) -> Result<Vec<(String, i64)>, DeltaTableError> {
        let Ok(snapshot) = table.snapshot() else {
            return Ok(vec![]);
        };
        let mut found = Vec::new();
        for (app, batch) in self.txns.iter().filter(|(_, v)| *v >= 0) {
            let have = snapshot
                .transaction_version(table.log_store().as_ref(), app)
                .await?;
            if have.is_some_and(|h| h >= *batch) {
                found.push((app.clone(), *batch));
            }
        }
        Ok(found)
    }

    /// Refuses a commit of a batch the table read has already.
    async fn refuse_committed(&self, dir: &Path, table: &DeltaTable) -> Result<(), RunError> {
        let found = self
            .already_in(table)
            .await
            .map_err(|e| RunError::delta(dir, e))?;
        match found.first() {
            None => Ok(()),
            Some((app, batch)) => Err(self.twice(dir, app, *batch)),
        }
    }

    /// After a failed commit: why, when another writer changed the table since it was
    /// read (`None` when it did not, and the failure is the commit's own).
    async fn interfered(
        &self,
        dir: &Path,
        log_store: deltalake::logstore::LogStoreRef,
        read_version: Option<u64>,
    ) -> Option<RunError> {
        // The table as it is now, read through the store the commit went to (a folder
        // or a bucket alike).
        let mut table = DeltaTable::new(log_store);
        table.load().await.ok()?;
        if table.version() == read_version {
            return None;
        }
        let found = self.already_in(&table).await.ok()?;
        Some(match found.first() {
            Some((app, batch)) => self.twice(dir, app, *batch),
            None => RunError::input(format!(
                "`{}` ({}): another process committed to the table while this batch was being written; this commit was refused",
                self.name,
                dir.display()
            ))
            .with_help(TWO_RUNS_HELP),
        })
    }

    fn twice(&self, dir: &Path, app: &str, batch: i64) -> RunError {
        let flow = app.strip_prefix("cdcflow:").unwrap_or(app);
        RunError::input(format!(
            "`{}` ({}): batch {batch} of flow `{flow}` is in the table already; this commit of it was refused, so nothing is applied twice",
            self.name,
            dir.display()
        ))
        .with_help(TWO_RUNS_HELP)
    }

    /// A commit to the published table of `dataset`: its properties, name and comment.
    pub(crate) fn to_published(dataset: &cdcflow_plan::Dataset, txns: Vec<(String, i64)>) -> Self {
        Self {
            txns,
            configuration: dataset.properties.clone(),
            name: dataset.name.clone(),
            description: dataset.def.comment.clone(),
            offsets: None,
            landing_files: vec![],
            operation: Operation::Write,
            partition_columns: Some(dataset.partition_columns.clone()),
            cluster_columns: dataset.cluster_columns.clone(),
        }
    }

    /// The commit saying it does `operation`.
    pub(crate) fn doing(self, operation: Operation) -> Self {
        Self { operation, ..self }
    }

    /// The commit carrying the offsets of the batch it commits (a checkpoint's).
    pub(crate) fn with_offsets(self, offsets: &impl serde::Serialize) -> Self {
        Self {
            offsets: serde_json::to_value(offsets).ok(),
            ..self
        }
    }

    /// The landing files the batch's rows were read from.
    pub(crate) fn with_landing_files(self, files: &[String]) -> Self {
        Self {
            landing_files: files.to_vec(),
            ..self
        }
    }
}

/// A data file location as a local path: delta-rs gives plain paths for local tables
/// and `file://` URLs in places.
/// The local path of the data file of `view`, of the table at `dir` (a partitioned
/// table's files are in folders named by their partition values, escaped).
pub(crate) fn local_file_of(
    dir: &Path,
    view: &deltalake::kernel::LogicalFileView,
) -> Result<PathBuf, RunError> {
    data_file_path(dir, &view.path())
}

/// The local path of a data file the log names `path` (as deltalake's actions hold it,
/// unescaped once: a partition folder `city=New%20York` is `city=New%2520York` in the
/// log's JSON): relative to the table folder `dir`, or a `file://` URL. A relative name
/// that leads out of the table folder is refused.
pub(crate) fn data_file_path(dir: &Path, path: &str) -> Result<PathBuf, RunError> {
    let bad = |why: &str| RunError::File {
        path: dir.to_path_buf(),
        message: format!("data file {path}: {why}"),
    };
    if path.contains("://") {
        return Url::parse(path)
            .ok()
            .filter(|u| u.scheme() == "file")
            .and_then(|u| u.to_file_path().ok())
            .ok_or_else(|| bad("not on the local disk"));
    }
    let relative = Path::new(path);
    let plain = relative.components().next().is_some()
        && relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    match plain {
        true => Ok(dir.join(relative)),
        false => Err(bad("the log names a file outside the table folder")),
    }
}

/// Casts that fail on a value they cannot convert instead of making it null.
pub(crate) const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: datafusion::arrow::util::display::FormatOptions::new(),
};

/// `batch` in the columns of `schema`: matched by name, cast, and null where missing.
/// A value the cast cannot convert is an error, never a null (a landing file's text
/// `four` in a BIGINT column is quarantined, as the JSON reader's would be).
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, RunError> {
    if batch.schema_ref() == schema {
        return Ok(batch.clone());
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => Ok(Arc::clone(c)),
            Some(c) => cast_with_options(c, f.data_type(), &STRICT).map_err(RunError::from),
            None => Ok(new_null_array(f.data_type(), batch.num_rows())),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// The error of a write whose rows have a column of another type than the table's
/// (schema drift that only a rebuild takes in), naming the table, the column and both
/// types; `None` when no column changed its type.
pub fn changed_type(old: Option<&SchemaRef>, new: &SchemaRef, table: &str) -> Option<RunError> {
    let old = old?;
    let (was, is) = new.fields().iter().find_map(|f| {
        let was = old.field_with_name(f.name()).ok()?;
        (was.data_type() != f.data_type()).then_some((was, f))
    })?;
    Some(
        RunError::input(format!(
            "schema change: column `{}` of `{table}` is {} in the table but {} in this batch (its type changed upstream); nothing was committed",
            is.name(),
            was.data_type(),
            is.data_type()
        ))
        .with_help(format!(
            "run `cdcflow run --full-refresh {table} --cascade` to rebuild it (and the tables that read it) with the new type"
        )),
    )
}

/// Columns of `new` that `old` lacks, as a sentence for the run summary.
pub fn added_columns(old: Option<&SchemaRef>, new: &SchemaRef, table: &str) -> Option<String> {
    let old = old?;
    let added: Vec<String> = new
        .fields()
        .iter()
        .filter(|f| old.field_with_name(f.name()).is_err())
        .map(|f| format!("`{}` {}", f.name(), f.data_type()))
        .collect();
    (!added.is_empty()).then(|| {
        format!(
            "schema change: `{table}` gained column(s) {} (rows written before have null)",
            added.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_checkpoint_every_ten_commits_unless_their_properties_say_otherwise() {
        let default = with_checkpoint_interval(BTreeMap::new());
        assert_eq!(
            default.get("delta.checkpointInterval").map(String::as_str),
            Some("10")
        );
        let declared: BTreeMap<String, String> =
            [("delta.CheckpointInterval".to_string(), "50".to_string())].into();
        assert_eq!(with_checkpoint_interval(declared.clone()), declared);
    }
}
