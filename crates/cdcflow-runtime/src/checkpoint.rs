//! A flow's checkpoint: the input each batch covers, written down *before* the batch is
//! committed (a write-ahead offsets log, as Spark's streaming checkpoints keep).
//!
//! Whether batch `n` was committed is not recorded here: the target table knows it,
//! because its commit carries the flow's application-transaction id with version `n`.
//! That commit also records the batch's offsets, from which a lost or damaged offsets
//! file of a committed batch is restored.
//! So after a crash at any point either the commit happened (the offsets of `n` count as
//! processed) or it did not (they are discarded and the input is read again). Nothing is
//! skipped and nothing applied twice, without a two-phase commit.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::delta::Table;
use crate::landing::{FileName, ReadRecord};

/// What one batch of a flow reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Offsets {
    pub batch: i64,
    /// Landing files read, per `read_files` input: each named relative to its folder
    /// and recorded as it was read (a plain name in checkpoints of earlier versions).
    #[serde(default)]
    pub files: BTreeMap<String, Vec<ReadRecord>>,
    /// Streaming table inputs: the Delta version read up to (inclusive).
    #[serde(default)]
    pub sources: BTreeMap<String, i64>,
    /// Materialized views: a fingerprint of the inputs the result was computed from.
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// Sources outside the pipeline's storage ([`crate::sources`]): the position each
    /// read up to, by its checkpoint key, as the source wrote it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub positions: BTreeMap<String, serde_json::Value>,
}

/// What a flow has processed.
#[derive(Debug, Clone, Default)]
pub struct Processed {
    /// The last committed batch.
    pub committed: Option<i64>,
    /// Landing files read by committed batches, per input, as the latest batch that
    /// read each found it.
    pub files: BTreeMap<String, BTreeMap<FileName, ReadRecord>>,
    /// The offsets of the last committed batch.
    pub last: Option<Offsets>,
}

impl Processed {
    pub fn next_batch(&self) -> i64 {
        self.committed.map_or(0, |c| c + 1)
    }

    /// The position of external source `key` the last committed batch read up to.
    pub fn source_position(&self, key: &str) -> Option<&serde_json::Value> {
        self.last.as_ref()?.positions.get(key)
    }

    /// The version of `source` read up to by the last committed batch.
    pub fn source_version(&self, source: &str) -> Option<i64> {
        self.last.as_ref()?.sources.get(source).copied()
    }
}

/// The checkpoint folder of one flow.
pub struct Checkpoint {
    dir: PathBuf,
}

impl Checkpoint {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The flow's checkpoint folder (offsets, and the state of a stateful flow).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn offsets_dir(&self) -> PathBuf {
        self.dir.join("offsets")
    }

    /// The progress of the flow whose commits to `table` carry `app`. Offsets of
    /// batches after the last committed one were never committed and are removed; the
    /// offsets file of a committed batch that is missing or damaged is restored from
    /// the table's commit of that batch, so its input is never read a second time.
    pub async fn load(&self, table: &Table, app: &str) -> Result<Processed, RunError> {
        self.read(table, app, true).await
    }

    /// As [`Checkpoint::load`], changing nothing (for `cdcflow status` beside a run).
    pub async fn peek(&self, table: &Table, app: &str) -> Result<Processed, RunError> {
        self.read(table, app, false).await
    }

    fn offsets_file(&self, batch: i64) -> PathBuf {
        self.offsets_dir().join(format!("{batch:020}.json"))
    }

    async fn read(&self, table: &Table, app: &str, tidy: bool) -> Result<Processed, RunError> {
        let committed = table.txn_version(app).await?;
        let dir = self.offsets_dir();
        let mut progress = Processed {
            committed,
            ..Processed::default()
        };
        let entries = match fs::read_dir(&dir) {
            Ok(e) => Some(e),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(RunError::io(&dir, e)),
        };
        let mut batches: BTreeMap<i64, PathBuf> = BTreeMap::new();
        for entry in entries.into_iter().flatten() {
            let path = entry.map_err(|e| RunError::io(&dir, e))?.path();
            let batch = path
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|_| path.extension().is_some_and(|e| e == "json"))
                .and_then(|s| s.parse::<i64>().ok());
            if let Some(b) = batch {
                batches.insert(b, path);
            }
        }
        for (_, path) in batches.range(committed.map_or(i64::MIN, |c| c + 1)..) {
            if tidy {
                fs::remove_file(path).map_err(|e| RunError::io(path, e))?;
            }
        }
        // Every batch up to the committed one wrote its offsets before its commit.
        let mut read: BTreeMap<i64, Offsets> = BTreeMap::new();
        let mut lost: BTreeMap<i64, (PathBuf, String)> = BTreeMap::new();
        for batch in 0..=committed.unwrap_or(-1) {
            let Some(path) = batches.get(&batch) else {
                lost.insert(batch, (self.offsets_file(batch), "missing".into()));
                continue;
            };
            let text = fs::read_to_string(path).map_err(|e| RunError::io(path, e))?;
            match serde_json::from_str::<Offsets>(&text) {
                Ok(offsets) => {
                    read.insert(batch, offsets);
                }
                Err(e) => {
                    lost.insert(batch, (path.clone(), format!("damaged ({e})")));
                }
            }
        }
        if !lost.is_empty() {
            read.extend(self.restore(table, app, lost, tidy).await?);
        }
        for offsets in read.into_values() {
            for (input, files) in &offsets.files {
                progress
                    .files
                    .entry(input.clone())
                    .or_default()
                    .extend(files.iter().map(|r| (r.name.clone(), r.clone())));
            }
            progress.last = Some(offsets);
        }
        Ok(progress)
    }

    /// The offsets of committed batches whose files are `lost`, from the commits that
    /// carry them (and written back when `tidy`); an error naming the first file and
    /// the safe ways out when a commit does not record them.
    async fn restore(
        &self,
        table: &Table,
        app: &str,
        lost: BTreeMap<i64, (PathBuf, String)>,
        tidy: bool,
    ) -> Result<BTreeMap<i64, Offsets>, RunError> {
        let wanted: BTreeSet<i64> = lost.keys().copied().collect();
        let mut recorded = table.batch_offsets(app, &wanted).await?;
        let mut restored = BTreeMap::new();
        for (batch, (path, why)) in lost {
            let offsets = recorded
                .remove(&batch)
                .and_then(|v| serde_json::from_value::<Offsets>(v).ok())
                .filter(|o| o.batch == batch);
            let Some(offsets) = offsets else {
                return Err(self.unrecoverable(table, batch, &path, &why));
            };
            if tidy {
                let text = serde_json::to_string_pretty(&offsets).map_err(|e| RunError::File {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                fs::create_dir_all(self.offsets_dir())
                    .map_err(|e| RunError::io(self.offsets_dir(), e))?;
                write_atomic(&path, text.as_bytes())?;
            }
            tracing::warn!(file = %path.display(), batch, "checkpoint file {why}: restored from the table's commit of the batch");
            restored.insert(batch, offsets);
        }
        Ok(restored)
    }

    fn unrecoverable(&self, table: &Table, batch: i64, path: &Path, why: &str) -> RunError {
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        RunError::input(format!(
            "{}: the checkpoint of batch {batch} of flow `{}` is {why}, and the table's commit of that batch does not record what it read (committed by an older cdcflow, or its log was cleaned up)",
            path.display(),
            name(&self.dir)
        ))
        .with_help(format!(
            "put the file back from a backup, or run `cdcflow run --full-refresh {}` to rebuild the table from its sources; running on without the file would read the batch's input again and apply it twice",
            name(&table.dir)
        ))
    }

    /// Records what batch `offsets.batch` reads; durable before the batch commits.
    pub fn write_intent(&self, offsets: &Offsets) -> Result<(), RunError> {
        let dir = self.offsets_dir();
        fs::create_dir_all(&dir).map_err(|e| RunError::io(&dir, e))?;
        let path = self.offsets_file(offsets.batch);
        let text = serde_json::to_string_pretty(offsets).map_err(|e| RunError::File {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, text.as_bytes())?;
        let flow = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        crate::failpoint::hit(&format!("offsets:{flow}"));
        Ok(())
    }
}

/// Writes through a temporary file and a rename, so a reader sees all or nothing.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    let tmp = path.with_extension("json.tmp");
    let mut f = fs::File::create(&tmp).map_err(|e| RunError::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| RunError::io(&tmp, e))?;
    f.sync_all().map_err(|e| RunError::io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| RunError::io(path, e))
}

/// The position of external source `key` that `flow` (writing into `target`) last
/// committed, changing nothing; `None` before its first commit. Several flows that
/// read through one cursor on the server (one replication slot for the tables of a
/// database) may let it forget only what every one of them has committed.
pub async fn committed_position(
    storage: &Path,
    flow: &str,
    target: &cdcflow_plan::Dataset,
    key: &str,
) -> Result<Option<serde_json::Value>, RunError> {
    let table = Table::open(&crate::layout::table_dir(storage, target)?).await?;
    if !table.exists() {
        return Ok(None);
    }
    let progress = Checkpoint::new(crate::layout::checkpoint_dir(storage, flow)?)
        .peek(&table, &crate::layout::app_id(flow))
        .await?;
    Ok(progress.source_position(key).cloned())
}
