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
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::delta::Table;
use crate::landing::{FileName, ReadRecord};
use crate::storage::{Key, Storage};

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
    /// A stateful flow's state version the batch wrote (`<batch>-<run>`), so that the
    /// commit names the state it goes with (none: an earlier cdcflow's `<batch>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
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

    /// The state version the last committed batch of a stateful flow wrote.
    pub fn state_version(&self) -> Option<&str> {
        self.last.as_ref()?.state.as_deref()
    }

    /// The version of `source` read up to by the last committed batch.
    pub fn source_version(&self, source: &str) -> Option<i64> {
        self.last.as_ref()?.sources.get(source).copied()
    }
}

/// The checkpoint of one flow: `checkpoints/<flow>/` in the pipeline's storage.
///
/// Offsets are kept under two names. Before its commit a batch writes its *intent*,
/// `offsets/<batch>-<run>.json`, named by the run that writes it, so no other writer
/// ever writes the same record. After its commit landed it *seals* the batch's
/// offsets as `offsets/<batch>.json`, created only if absent. A reader takes sealed
/// offsets only, and only for committed batches: an intent is read only to restore a
/// committed batch whose sealed file and commit record are both gone. Intents of
/// batches after the committed one are never read and never removed by a reader (a
/// writer may still be going); once their batch number is committed they go.
pub struct Checkpoint {
    storage: Storage,
    key: Key,
    flow: String,
}

/// The record of the plan a flow's last batch executed.
const LAST_PLAN: &str = "last_batch_plan.txt";

/// One offsets record, as its name says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Record {
    /// `<batch>.json`: a committed batch's offsets (also every file of checkpoints
    /// written before intents had their own names).
    Sealed(i64),
    /// `<batch>-<run>.json`: what a run meant to commit as batch `batch`.
    Intent(i64),
    /// Anything else (a temporary file a killed write left behind).
    Other,
}

impl Record {
    fn of(name: &str) -> Self {
        let Some(stem) = name.strip_suffix(".json") else {
            return Self::Other;
        };
        if let Ok(batch) = stem.parse::<i64>() {
            return Self::Sealed(batch);
        }
        match stem.split_once('-').map(|(b, run)| (b.parse::<i64>(), run)) {
            Some((Ok(batch), run)) if !run.is_empty() && !run.contains('.') => Self::Intent(batch),
            _ => Self::Other,
        }
    }
}

/// This process's name for the intents it writes: unique among runs.
pub(crate) fn run_token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| uuid::Uuid::new_v4().simple().to_string())
}

impl Checkpoint {
    /// The checkpoint of `flow` in the storage folder `storage`.
    pub fn new(storage: &Path, flow: &str) -> Result<Self, RunError> {
        Self::in_storage(&Storage::local(storage), flow)
    }

    /// The checkpoint of `flow` in `storage`.
    pub fn in_storage(storage: &Storage, flow: &str) -> Result<Self, RunError> {
        Ok(Self {
            storage: storage.clone(),
            key: Key::of(&["checkpoints", &crate::layout::folder_name(flow)])?,
            flow: flow.to_string(),
        })
    }

    /// Forgets the flow's progress: every record of its checkpoint goes (a full refresh).
    pub async fn remove(&self) -> Result<(), RunError> {
        self.storage.delete_all(&self.key).await
    }

    /// The storage the checkpoint is kept in.
    pub(crate) fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The checkpoint's key in its storage (`checkpoints/<flow>`).
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    /// The flow's checkpoint folder (offsets, and the state of a stateful flow).
    pub fn dir(&self) -> PathBuf {
        self.storage.path(&self.key)
    }

    /// The shape the flow's AUTO CDC target was built with (`shape.json`); `None`
    /// before its first batch, or when the record cannot be read (it only warns).
    pub async fn shape(&self) -> Result<Option<cdcflow_plan::stored_shape::Shape>, RunError> {
        let key = self.key.join(cdcflow_plan::stored_shape::FILE)?;
        let bytes = self.storage.get(&key).await?;
        Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
    }

    /// Records the shape the flow's target is built with, for the next batch to compare.
    pub async fn record_shape(
        &self,
        shape: &cdcflow_plan::stored_shape::Shape,
    ) -> Result<(), RunError> {
        let key = self.key.join(cdcflow_plan::stored_shape::FILE)?;
        let text = serde_json::to_vec_pretty(shape)
            .map_err(|e| RunError::internal(format!("the flow's shape: {e}")))?;
        self.storage.put(&key, &text).await
    }

    /// The plan the flow's last batch executed, with its metrics, as kept for
    /// `explain --analyze`.
    pub async fn last_plan(&self) -> Option<String> {
        let key = self.key.join(LAST_PLAN).ok()?;
        let bytes = self.storage.get(&key).await.ok()??;
        String::from_utf8(bytes).ok()
    }

    /// Keeps `text`, the plan a committed batch executed (best effort: a failure is
    /// only logged).
    pub async fn record_plan(&self, text: &str) {
        let written = match self.key.join(LAST_PLAN) {
            Ok(key) => self.storage.put(&key, text.as_bytes()).await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::warn!(flow = %self.flow, error = %e, "the executed plan could not be kept for explain");
        }
    }

    fn offsets(&self) -> Result<Key, RunError> {
        self.key.join("offsets")
    }

    fn sealed(&self, batch: i64) -> Result<Key, RunError> {
        self.offsets()?.join(&format!("{batch:020}.json"))
    }

    fn intent(&self, batch: i64) -> Result<Key, RunError> {
        self.offsets()?
            .join(&format!("{batch:020}-{}.json", run_token()))
    }

    /// The progress of the flow whose commits to `table` carry `app`. The offsets of
    /// a committed batch that are missing or damaged are restored from the table's
    /// commit of that batch (or its intent), so its input is never read a second
    /// time; files nothing will read again are removed.
    pub async fn load(&self, table: &Table, app: &str) -> Result<Processed, RunError> {
        self.read(table, app, true).await
    }

    /// As [`Checkpoint::load`], changing nothing (for `cdcflow status` beside a run).
    pub async fn peek(&self, table: &Table, app: &str) -> Result<Processed, RunError> {
        self.read(table, app, false).await
    }

    async fn read(&self, table: &Table, app: &str, tidy: bool) -> Result<Processed, RunError> {
        let committed = table.txn_version(app).await?;
        let last = committed.unwrap_or(-1);
        let offsets = self.offsets()?;
        let mut sealed: BTreeMap<i64, Key> = BTreeMap::new();
        let mut intents: BTreeMap<i64, Vec<Key>> = BTreeMap::new();
        let mut litter: Vec<Key> = Vec::new();
        for entry in self.storage.list(&offsets).await? {
            let direct = entry
                .key
                .strip_prefix(&offsets)
                .is_some_and(|r| !r.contains('/'));
            match Record::of(entry.key.name()) {
                Record::Sealed(b) if direct && b <= last => {
                    sealed.insert(b, entry.key);
                }
                // Written before a commit by a cdcflow that named intents so.
                Record::Sealed(_) if direct => litter.push(entry.key),
                Record::Intent(b) if direct => intents.entry(b).or_default().push(entry.key),
                _ => litter.push(entry.key),
            }
        }
        // Every batch up to the committed one wrote its offsets before its commit.
        let mut read: BTreeMap<i64, Offsets> = BTreeMap::new();
        let mut lost: BTreeMap<i64, String> = BTreeMap::new();
        for batch in 0..=last {
            let Some(key) = sealed.get(&batch) else {
                lost.insert(batch, "missing".into());
                continue;
            };
            let text = self.storage.get(key).await?.unwrap_or_default();
            match serde_json::from_slice::<Offsets>(&text) {
                Ok(offsets) => {
                    read.insert(batch, offsets);
                }
                Err(e) => {
                    lost.insert(batch, format!("damaged ({e})"));
                }
            }
        }
        if !lost.is_empty() {
            read.extend(self.restore(table, app, lost, &intents, tidy).await?);
        }
        if tidy {
            // Intents of committed batches are sealed by now; the rest is litter.
            let done = intents.range(..=last).flat_map(|(_, keys)| keys);
            for key in litter.iter().chain(done) {
                self.storage.delete(key).await?;
            }
        }
        let mut progress = Processed {
            committed,
            ..Processed::default()
        };
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

    /// The offsets of committed batches that are `lost`, from the commits that carry
    /// them or else from their batch's intents when those agree (and sealed when
    /// `tidy`); an error naming the file and the safe ways out when neither has them.
    async fn restore(
        &self,
        table: &Table,
        app: &str,
        lost: BTreeMap<i64, String>,
        intents: &BTreeMap<i64, Vec<Key>>,
        tidy: bool,
    ) -> Result<BTreeMap<i64, Offsets>, RunError> {
        let wanted: BTreeSet<i64> = lost.keys().copied().collect();
        let mut recorded = table.batch_offsets(app, &wanted).await?;
        let mut restored = BTreeMap::new();
        for (batch, why) in lost {
            let mut offsets = recorded
                .remove(&batch)
                .and_then(|v| serde_json::from_value::<Offsets>(v).ok())
                .filter(|o| o.batch == batch);
            if offsets.is_none() {
                offsets = self.agreed_intent(batch, intents.get(&batch)).await?;
            }
            let key = self.sealed(batch)?;
            let Some(offsets) = offsets else {
                return Err(self.unrecoverable(table, batch, &key, &why));
            };
            if tidy {
                self.storage.put(&key, &to_json(&offsets)?).await?;
            }
            tracing::warn!(file = %self.storage.describe(&key), batch, "checkpoint file {why}: restored from the table's commit of the batch");
            restored.insert(batch, offsets);
        }
        Ok(restored)
    }

    /// The offsets every intent of `batch` holds, when there are some and they agree.
    async fn agreed_intent(
        &self,
        batch: i64,
        keys: Option<&Vec<Key>>,
    ) -> Result<Option<Offsets>, RunError> {
        let mut agreed: Option<Offsets> = None;
        for key in keys.into_iter().flatten() {
            let text = self.storage.get(key).await?.unwrap_or_default();
            let Ok(offsets) = serde_json::from_slice::<Offsets>(&text) else {
                return Ok(None);
            };
            match &agreed {
                Some(a) if *a != offsets => return Ok(None),
                _ => agreed = Some(offsets),
            }
        }
        Ok(agreed.filter(|o| o.batch == batch))
    }

    fn unrecoverable(&self, table: &Table, batch: i64, key: &Key, why: &str) -> RunError {
        let table_name = table
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        RunError::input(format!(
            "{}: the checkpoint of batch {batch} of flow `{}` is {why}, and the table's commit of that batch does not record what it read (committed by an older cdcflow, or its log was cleaned up)",
            self.storage.describe(key),
            self.key.name()
        ))
        .with_help(format!(
            "put the file back from a backup, or run `cdcflow run --full-refresh {table_name}` to rebuild the table from its sources; running on without the file would read the batch's input again and apply it twice"
        ))
    }

    /// Records what batch `offsets.batch` reads, as this run's intent; durable before
    /// the batch commits.
    pub async fn write_intent(&self, offsets: &Offsets) -> Result<(), RunError> {
        let key = self.intent(offsets.batch)?;
        self.storage.put(&key, &to_json(offsets)?).await?;
        crate::failpoint::hit(&format!("offsets:{}", self.key.name()));
        Ok(())
    }

    /// Seals the offsets of batch `offsets.batch`, whose commit has landed, and lets
    /// its intent go. A failure here loses nothing (the next load restores the sealed
    /// file from the commit, or the intent), so it is a warning, not an error.
    pub async fn seal(&self, offsets: &Offsets) {
        if let Err(e) = self.try_seal(offsets).await {
            tracing::warn!(flow = %self.flow, batch = offsets.batch, "could not seal the batch's offsets (the next run restores them): {e}");
        }
    }

    async fn try_seal(&self, offsets: &Offsets) -> Result<(), RunError> {
        let key = self.sealed(offsets.batch)?;
        // Already there: the batch was applied again (an AUTO CDC state whose commit
        // was missing), with the offsets it was first applied with.
        self.storage.put_new(&key, &to_json(offsets)?).await?;
        self.storage.delete(&self.intent(offsets.batch)?).await
    }
}

fn to_json(offsets: &Offsets) -> Result<Vec<u8>, RunError> {
    serde_json::to_vec_pretty(offsets)
        .map_err(|e| RunError::internal(format!("offsets of batch {}: {e}", offsets.batch)))
}

/// Writes through a synced temporary file and a rename, so a reader sees all or
/// nothing (the storage's local `put`, for files named by path).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    crate::storage::write_whole(path, bytes)
}

/// The position of external source `key` that `flow` (writing into `target`) last
/// committed, changing nothing; `None` before its first commit. Several flows that
/// read through one cursor on the server (one replication slot for the tables of a
/// database) may let it forget only what every one of them has committed.
pub async fn committed_position(
    storage: &cdcflow_plan::location::Location,
    flow: &str,
    target: &cdcflow_plan::Dataset,
    key: &str,
) -> Result<Option<serde_json::Value>, RunError> {
    let table = Table::open(&crate::layout::table_dir(storage, target)?).await?;
    if !table.exists() {
        return Ok(None);
    }
    let progress = Checkpoint::in_storage(&Storage::at(storage)?, flow)?
        .peek(&table, &crate::layout::app_id(flow))
        .await?;
    Ok(progress.source_position(key).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_records_are_told_apart_by_their_names() {
        assert_eq!(Record::of("00000000000000000007.json"), Record::Sealed(7));
        assert_eq!(
            Record::of("00000000000000000007-0f3a9c.json"),
            Record::Intent(7)
        );
        for other in [
            "00000000000000000007.json.tmp",
            "00000000000000000007.json.5d1e.tmp",
            "00000000000000000007-.json",
            "x-y.json",
            "notes.txt",
        ] {
            assert_eq!(Record::of(other), Record::Other, "{other}");
        }
    }
}
