//! The state of a flow's stateful operator, one version per batch, in the flow's
//! checkpoint folder. A version is `state/<batch>-<run>/meta.json`: the watermark, what the
//! state is of, and the list of Parquet files holding its rows, each the rows of one
//! bucket of one part (an aggregation's groups are bucketed by the time they close, a
//! join's sides are one bucket each). A batch writes only the buckets it changed into
//! its own folder and lists the others where earlier batches wrote them, so a small
//! batch into a large state rewrites little, and the operator holds one bucket in
//! memory at a time: the state lives on disk, the memory holds what a batch touches.
//!
//! Parquet, because the rows are Arrow batches already, the files are compact and any
//! reader can open them; immutable files per bucket and version, as Arroyo keeps its
//! state, rather than an embedded key-value store (RocksDB): the operators read and
//! merge a bucket as one Arrow batch, which a columnar file gives whole, and the
//! commit stays a rename.
//!
//! A version is written into `state/<batch>-<run>/`, a name no other run writes, with
//! its `meta.json` last, before the target's commit of the batch; the batch's offsets
//! name it (`Offsets::state`), so the commit says which version it goes with. The
//! version a run starts from is the one the last committed batch's offsets name (the
//! target's transaction id says which batch that is). Versions of batches up to the
//! committed one that it does not name were written by attempts that never committed
//! and are removed, as is every file of theirs the version in use does not list;
//! versions of later batches are left alone (a writer may be at work on them) until
//! their batch number is committed. No rename is needed, so the same code serves a
//! folder and, later, a bucket. So target, offsets and state agree after a kill at any
//! point. A checkpoint of an earlier cdcflow, whose versions are `state/<batch>/` and
//! whose offsets name none, reads as it is.
//!
//! The state goes through the checkpoint's [`Storage`]: a folder, or a bucket. In a
//! folder a version's files are read from the disk as the operator asks and written as
//! it makes them. In a bucket the files of the version a batch starts from are fetched
//! whole before it runs, and those it writes are held until its commit puts them, then
//! `meta.json`: the operators read and write synchronously, while they run, and a bucket
//! is reached asynchronously (docs/storage.md says what a batch so holds).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::checkpoint::Checkpoint;
use crate::storage::{Key, Storage};

/// The layout of a version this build writes and reads: files listed per bucket.
const LAYOUT: u32 = 2;

fn first_layout() -> u32 {
    1
}

/// One file of a version: the rows of one bucket of one part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StateFile {
    pub part: String,
    pub bucket: i64,
    /// Relative to the state folder: `<batch>/<part>-<bucket>.parquet`.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    /// The earliest time at which a row of the file closes (`None`: none ever does),
    /// so a batch opens only the buckets its watermark closes rows of.
    pub closes_from: Option<i64>,
}

/// What a version says besides its rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub batch: i64,
    /// The watermark after the batch, in microseconds since the epoch.
    pub watermark_micros: i64,
    /// Whether any batch has had rows yet (before that the watermark is 0 and holds
    /// nothing back).
    pub seen_rows: bool,
    /// Each watermarked input's own watermark after the batch (a join's two), carried
    /// to the next batch only within the same run of the query (see `join.rs`).
    #[serde(default)]
    pub inputs: BTreeMap<String, i64>,
    /// The process that wrote the version ([`super::run::process`]).
    #[serde(default)]
    pub process: String,
    /// Rows the state held after the batch.
    #[serde(default)]
    pub rows: u64,
    /// Batches in a row, up to this one, whose state grew while the watermark stayed.
    #[serde(default)]
    pub growing_batches: u32,
    /// The operator the state is of (its columns and what they aggregate): a changed
    /// query cannot read an older state.
    pub operator: String,
    #[serde(default = "first_layout")]
    pub layout: u32,
    /// The files holding the state's rows.
    #[serde(default)]
    pub files: Vec<StateFile>,
}

impl Meta {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

/// A kept state, as `cdcflow status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StoredState {
    /// The watermark after the last committed batch.
    pub watermark: String,
    /// Rows held (open groups, or a join's rows).
    pub groups: u64,
    /// Bytes of the state's files.
    pub bytes: u64,
    /// Files the state is kept in.
    pub files: u64,
}

pub(crate) struct StateStore {
    storage: Storage,
    /// `checkpoints/<flow>/state`.
    key: Key,
    flow: String,
}

impl StateStore {
    /// The state of `flow`, kept in its checkpoint.
    pub fn of(checkpoint: &Checkpoint, flow: &str) -> Result<Self, RunError> {
        Ok(Self {
            storage: checkpoint.storage().clone(),
            key: checkpoint.key().join("state")?,
            flow: flow.to_string(),
        })
    }

    /// The version committed batch `batch` used: the one its offsets name, or the
    /// only one an earlier cdcflow wrote for it.
    fn committed_name(batch: i64, named: Option<&str>) -> String {
        named.map_or_else(|| format!("{batch:020}"), str::to_string)
    }

    fn shown(&self, name: &str) -> String {
        self.key
            .join(name)
            .map_or_else(|_| name.to_string(), |k| self.storage.describe(&k))
    }

    async fn read_meta(&self, name: &str) -> Result<Option<Meta>, RunError> {
        let key = self.key.join(name)?.join("meta.json")?;
        let Some(bytes) = self.storage.get(&key).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| RunError::File {
                path: self.storage.path(&key),
                message: format!("damaged state: {e}"),
            })
    }

    /// The version after batch `committed` (none before the first batch), the one
    /// `named` by its offsets, with the versions of uncommitted attempts removed; what
    /// it lists is read with [`Version::read`].
    pub async fn load(
        &self,
        committed: Option<i64>,
        named: Option<&str>,
        operator: &str,
    ) -> Result<Option<Meta>, RunError> {
        let Some(batch) = committed else {
            return Ok(None);
        };
        let name = Self::committed_name(batch, named);
        let Some(meta) = self.read_meta(&name).await? else {
            return Err(RunError::input(format!(
                "{}: the state of flow `{}` after its batch {batch} is missing",
                self.shown(&name),
                self.flow
            ))
            .with_help("put the folder back from a backup, or run `cdcflow run --full-refresh` on the flow's table to recompute it from its sources; running on without it would emit wrong aggregates"));
        };
        if meta.layout != LAYOUT {
            return Err(RunError::input(format!(
                "the state of flow `{}` after batch {batch} was kept by an earlier cdcflow in layout {} (this one reads layout {LAYOUT})",
                self.flow, meta.layout
            ))
            .with_help("run `cdcflow run --full-refresh` on the flow's table to recompute its state from its sources"));
        }
        if meta.operator != operator {
            return Err(RunError::input(format!(
                "the state of flow `{}` was kept for another query: its aggregation changed since batch {batch}",
                self.flow
            ))
            .with_help("run `cdcflow run --full-refresh` on the flow's table to recompute it with the new query"));
        }
        self.tidy(batch, &name, &meta).await?;
        Ok(Some(meta))
    }

    /// The state after batch `committed` as `cdcflow status` shows it, changing nothing:
    /// its watermark, rows and bytes stored; `None` when there is none.
    pub async fn peek(&self, committed: Option<i64>, named: Option<&str>) -> Option<StoredState> {
        let meta = self
            .read_meta(&Self::committed_name(committed?, named))
            .await
            .ok()??;
        Some(StoredState {
            watermark: super::metrics::format_micros(meta.watermark_micros),
            groups: meta.files.iter().map(|f| f.rows).sum(),
            bytes: meta.bytes(),
            files: meta.files.len() as u64,
        })
    }

    /// Removes the versions of batches up to `committed` other than `kept` (named
    /// `kept_name`), but for the files of theirs `kept` lists; versions of later batches
    /// stay.
    async fn tidy(&self, committed: i64, kept_name: &str, kept: &Meta) -> Result<(), RunError> {
        let listed: BTreeSet<&str> = kept.files.iter().map(|f| f.path.as_str()).collect();
        // Each version (a folder name under the state) with its files.
        let mut versions: BTreeMap<String, Vec<(Key, String)>> = BTreeMap::new();
        for entry in self.storage.list(&self.key).await? {
            let Some(relative) = entry.key.strip_prefix(&self.key) else {
                continue;
            };
            let name = relative.split('/').next().unwrap_or_default().to_string();
            let relative = relative.to_string();
            versions
                .entry(name)
                .or_default()
                .push((entry.key.clone(), relative));
        }
        for (name, files) in versions {
            if name == kept_name || version_batch(&name).is_some_and(|b| b > committed) {
                continue;
            }
            if let [(key, relative)] = files.as_slice()
                && !relative.contains('/')
            {
                // A plain file beside the versions (left by hand, or by a tool).
                self.storage.delete(key).await?;
                continue;
            }
            if !files.iter().any(|(_, r)| listed.contains(r.as_str())) {
                self.storage.delete_all(&self.key.join(&name)?).await?;
                continue;
            }
            // An earlier version whose files the kept one still lists: only those stay.
            for (key, relative) in files {
                if !listed.contains(relative.as_str()) {
                    self.storage.delete(&key).await?;
                }
            }
        }
        Ok(())
    }

    /// The version after batch `committed`, read as [`Self::load`] reads it but
    /// changing nothing (for `explain`, beside a run that may be writing).
    pub async fn look(
        &self,
        committed: Option<i64>,
        named: Option<&str>,
        operator: &str,
    ) -> Result<Option<Meta>, RunError> {
        let Some(batch) = committed else {
            return Ok(None);
        };
        Ok(self
            .read_meta(&Self::committed_name(batch, named))
            .await?
            .filter(|m| m.layout == LAYOUT && m.operator == operator))
    }

    /// Starts the version of batch `batch` over the files of `before` (none: an empty
    /// state).
    pub async fn begin(&self, batch: i64, before: Option<&Meta>) -> Result<Version, RunError> {
        let name = version_name(batch);
        let own = self.key.join(&name)?;
        // This run's earlier attempt at the batch (continuous mode retries in-process).
        self.storage.delete_all(&own).await?;
        if let Storage::Local(_) = &self.storage {
            let dir = self.storage.path(&own);
            fs::create_dir_all(&dir).map_err(|e| RunError::io(&dir, e))?;
        }
        self.version(name, Some(own), before).await
    }

    /// A version that writes nothing (`explain --analyze` runs the batch and commits
    /// nothing): what it would write is counted, not kept.
    pub async fn begin_dry(&self, batch: i64, before: Option<&Meta>) -> Result<Version, RunError> {
        self.version(version_name(batch), None, before).await
    }

    async fn version(
        &self,
        name: String,
        own: Option<Key>,
        before: Option<&Meta>,
    ) -> Result<Version, RunError> {
        let carried = before.map(|m| m.files.clone()).unwrap_or_default();
        let files = match &self.storage {
            Storage::Local(_) => Files::Disk,
            Storage::Remote(_) => {
                let mut fetched = HashMap::new();
                for file in &carried {
                    let key = self.key.join_relative(&file.path)?;
                    let bytes = self.storage.get(&key).await?.ok_or_else(|| {
                        RunError::input(format!(
                            "{}: a file of the state of flow `{}` is missing",
                            self.storage.describe(&key),
                            self.flow
                        ))
                        .with_help("run `cdcflow run --full-refresh` on the flow's table to recompute its state from its sources")
                    })?;
                    fetched.insert(file.path.clone(), Bytes::from(bytes));
                }
                Files::Held {
                    fetched,
                    pending: Vec::new(),
                }
            }
        };
        Ok(Version {
            storage: self.storage.clone(),
            key: self.key.clone(),
            own,
            name,
            carried,
            written: Vec::new(),
            files,
        })
    }

    /// Commits `version` with `meta` (whose file list it fills): its files are in
    /// place first, `meta.json` is written last, then the version is the one a run
    /// after the target's commit reads (the batch's offsets name it).
    pub async fn commit(&self, mut version: Version, mut meta: Meta) -> Result<Meta, RunError> {
        let Some(own) = version.own.take() else {
            return Err(RunError::internal(
                "a dry state version cannot be committed",
            ));
        };
        if let Files::Held { pending, .. } = &mut version.files {
            for (key, bytes) in std::mem::take(pending) {
                self.storage.put(&key, &bytes).await?;
            }
        }
        crate::failpoint::hit(&format!("state-written:{}", self.flow));
        meta.layout = LAYOUT;
        meta.files = std::mem::take(&mut version.carried);
        meta.files.append(&mut version.written);
        meta.files
            .sort_by(|a, b| (&a.part, a.bucket).cmp(&(&b.part, b.bucket)));
        let text =
            serde_json::to_string_pretty(&meta).map_err(|e| RunError::internal(e.to_string()))?;
        self.storage
            .put(&own.join("meta.json")?, text.as_bytes())
            .await?;
        crate::failpoint::hit(&format!("state-renamed:{}", self.flow));
        Ok(meta)
    }
}

/// Where a version's files are read from and written to.
enum Files {
    /// A folder's: read from the disk, written as they are made.
    Disk,
    /// A bucket's: those of the version before fetched, those written held until the
    /// commit puts them.
    Held {
        fetched: HashMap<String, Bytes>,
        pending: Vec<(Key, Vec<u8>)>,
    },
}

/// A version being written: the files it carries over from the one before, and the
/// buckets written anew (into its own folder `own`; none for a dry version). Dropped
/// uncommitted, its files go.
pub(crate) struct Version {
    storage: Storage,
    /// The state's key.
    key: Key,
    own: Option<Key>,
    /// Its folder's name, `<batch>-<run>`.
    name: String,
    carried: Vec<StateFile>,
    written: Vec<StateFile>,
    files: Files,
}

impl Version {
    /// The files carried over from the version before.
    pub fn carried(&self) -> &[StateFile] {
        &self.carried
    }

    /// Rows held by the files carried over and written.
    pub fn rows(&self) -> u64 {
        self.carried
            .iter()
            .chain(&self.written)
            .map(|f| f.rows)
            .sum()
    }

    /// Bytes of the files carried over and written.
    pub fn bytes(&self) -> u64 {
        self.carried
            .iter()
            .chain(&self.written)
            .map(|f| f.bytes)
            .sum()
    }

    /// The rows of `file`, one of this version's.
    pub fn read(&self, file: &StateFile) -> Result<Vec<RecordBatch>, RunError> {
        let key = self.key.join_relative(&file.path)?;
        match &self.files {
            Files::Disk => read_parquet(&self.storage.path(&key)),
            Files::Held { fetched, .. } => {
                let bytes = fetched.get(&file.path).cloned().ok_or_else(|| {
                    RunError::internal(format!(
                        "{} was read before it was fetched",
                        self.storage.describe(&key)
                    ))
                })?;
                decode_parquet(&self.storage.path(&key), bytes)
            }
        }
    }

    /// Takes the files of `part`'s `bucket` out of the version (their rows are to be
    /// rewritten, or let go), giving their rows.
    pub fn take(&mut self, part: &str, bucket: i64) -> Result<Vec<RecordBatch>, RunError> {
        let (taken, kept): (Vec<StateFile>, Vec<StateFile>) = std::mem::take(&mut self.carried)
            .into_iter()
            .partition(|f| f.part == part && f.bucket == bucket);
        self.carried = kept;
        let mut rows = Vec::new();
        for f in taken {
            rows.extend(self.read(&f)?);
        }
        Ok(rows)
    }

    /// Takes every file of `part` out of the version, giving their rows.
    pub fn take_part(&mut self, part: &str) -> Result<Vec<RecordBatch>, RunError> {
        let buckets: BTreeSet<i64> = self
            .carried
            .iter()
            .filter(|f| f.part == part)
            .map(|f| f.bucket)
            .collect();
        let mut rows = Vec::new();
        for b in buckets {
            rows.extend(self.take(part, b)?);
        }
        Ok(rows)
    }

    /// Writes `rows` as `part`'s `bucket` in this version (nothing when there are none).
    pub fn put(
        &mut self,
        part: &str,
        bucket: i64,
        schema: &SchemaRef,
        rows: &[RecordBatch],
        closes_from: Option<i64>,
    ) -> Result<(), RunError> {
        let count: usize = rows.iter().map(RecordBatch::num_rows).sum();
        if count == 0 {
            return Ok(());
        }
        let file = format!("{part}-{bucket}.parquet");
        let bytes = match (&self.own, &mut self.files) {
            (None, _) => rows.iter().map(|b| b.get_array_memory_size() as u64).sum(),
            (Some(own), Files::Disk) => {
                write_parquet(&self.storage.path(&own.join(&file)?), schema, rows)?
            }
            (Some(own), Files::Held { pending, .. }) => {
                let key = own.join(&file)?;
                let encoded = encode_parquet(&self.storage.path(&key), schema, rows)?;
                let size = encoded.len() as u64;
                pending.push((key, encoded));
                size
            }
        };
        self.written.push(StateFile {
            part: part.to_string(),
            bucket,
            path: format!("{}/{file}", self.name),
            rows: count as u64,
            bytes,
            closes_from,
        });
        Ok(())
    }
}

impl Drop for Version {
    fn drop(&mut self) {
        if let (Some(own), Files::Disk) = (&self.own, &self.files) {
            // Best effort: a later load removes whatever is left.
            let _ = fs::remove_dir_all(self.storage.path(own));
        }
    }
}

/// The name of the version this run writes for batch `batch`: `<batch>-<run>`, the
/// name its offsets record.
pub(crate) fn version_name(batch: i64) -> String {
    format!("{batch:020}-{}", crate::checkpoint::run_token())
}

/// The batch a version's folder (`<batch>-<run>`, `<batch>`, an earlier cdcflow's
/// `<batch>.tmp`) was written for.
fn version_batch(name: &str) -> Option<i64> {
    name.split(['-', '.']).next()?.parse().ok()
}

fn damaged(path: &Path, e: &dyn std::fmt::Display) -> RunError {
    RunError::File {
        path: path.to_path_buf(),
        message: format!("damaged state: {e}"),
    }
}

fn read_parquet(path: &Path) -> Result<Vec<RecordBatch>, RunError> {
    let file = fs::File::open(path).map_err(|e| RunError::io(path, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| damaged(path, &e))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| damaged(path, &e))
}

/// The rows of a Parquet file fetched whole (`path` names it in messages).
fn decode_parquet(path: &Path, bytes: Bytes) -> Result<Vec<RecordBatch>, RunError> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| damaged(path, &e))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| damaged(path, &e))
}

/// `rows` encoded as one Parquet file (`path` names it in messages).
fn encode_parquet(
    path: &Path,
    schema: &SchemaRef,
    rows: &[RecordBatch],
) -> Result<Vec<u8>, RunError> {
    let parquet_error = |e: datafusion::parquet::errors::ParquetError| RunError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut writer =
        ArrowWriter::try_new(Vec::new(), Arc::clone(schema), None).map_err(parquet_error)?;
    for batch in rows {
        writer.write(batch).map_err(parquet_error)?;
    }
    writer.into_inner().map_err(parquet_error)
}

/// Writes `rows` to `path`, synced; gives the file's size.
fn write_parquet(path: &Path, schema: &SchemaRef, rows: &[RecordBatch]) -> Result<u64, RunError> {
    let file = fs::File::create(path).map_err(|e| RunError::io(path, e))?;
    let parquet_error = |e: datafusion::parquet::errors::ParquetError| RunError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut writer = ArrowWriter::try_new(file, Arc::clone(schema), None).map_err(parquet_error)?;
    for batch in rows {
        writer.write(batch).map_err(parquet_error)?;
    }
    let file = writer.into_inner().map_err(parquet_error)?;
    file.sync_all().map_err(|e| RunError::io(path, e))?;
    Ok(file.metadata().map_err(|e| RunError::io(path, e))?.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn rows(values: &[i64]) -> (SchemaRef, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(values.to_vec()))],
        )
        .unwrap();
        (schema, vec![batch])
    }

    fn meta(batch: i64) -> Meta {
        Meta {
            batch,
            watermark_micros: batch * 10,
            seen_rows: true,
            inputs: Default::default(),
            rows: 0,
            growing_batches: 0,
            operator: "op".into(),
            process: String::new(),
            layout: LAYOUT,
            files: Vec::new(),
        }
    }

    fn count(rows: &[RecordBatch]) -> usize {
        rows.iter().map(RecordBatch::num_rows).sum()
    }

    fn store_in(dir: &Path) -> StateStore {
        let checkpoint = Checkpoint::in_storage(&Storage::local(dir), "f").unwrap();
        StateStore::of(&checkpoint, "f").unwrap()
    }

    #[tokio::test]
    async fn a_version_rewrites_its_changed_buckets_and_lists_the_others_where_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path());
        assert!(store.load(None, None, "op").await.unwrap().is_none());
        let (schema, two) = rows(&[1, 2]);
        let (_, one) = rows(&[3]);
        let mut v = store.begin(0, None).await.unwrap();
        v.put("groups", 1, &schema, &two, Some(10)).unwrap();
        v.put("groups", 2, &schema, &one, Some(20)).unwrap();
        v.put("groups", 3, &schema, &[], None).unwrap();
        let m0 = store.commit(v, meta(0)).await.unwrap();
        assert_eq!(m0.files.len(), 2);
        let (v0, v1, v2) = (version_name(0), version_name(1), version_name(2));

        // Batch 1 rewrites bucket 2 only; bucket 1 stays in batch 0's folder.
        let loaded = store.load(Some(0), Some(&v0), "op").await.unwrap().unwrap();
        let mut v = store.begin(1, Some(&loaded)).await.unwrap();
        assert_eq!(count(&v.take("groups", 2).unwrap()), 1);
        v.put("groups", 2, &schema, &two, Some(20)).unwrap();
        let m1 = store.commit(v, meta(1)).await.unwrap();
        let paths: Vec<&str> = m1.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                format!("{v0}/groups-1.parquet"),
                format!("{v1}/groups-2.parquet")
            ]
        );
        assert_eq!(store.peek(Some(1), Some(&v1)).await.unwrap().groups, 4);

        // Batch 1 committed: batch 0's meta and its rewritten bucket go, its other stays.
        let loaded = store.load(Some(1), Some(&v1), "op").await.unwrap().unwrap();
        let zero = dir.path().join("checkpoints/f/state").join(&v0);
        assert!(zero.join("groups-1.parquet").exists());
        assert!(!zero.join("groups-2.parquet").exists());
        assert!(!zero.join("meta.json").exists());
        let mut v = store.begin(2, Some(&loaded)).await.unwrap();
        assert_eq!(count(&v.take_part("groups").unwrap()), 4);
        store.commit(v, meta(2)).await.unwrap();

        // Batch 2 never committed: its version is left alone (a writer may be at it)
        // and never read; batch 1's is read whole.
        let loaded = store.load(Some(1), Some(&v1), "op").await.unwrap().unwrap();
        assert_eq!(loaded.files, m1.files);
        assert!(dir.path().join("checkpoints/f/state").join(&v2).exists());
        // Another attempt at batch 2 commits: the version it names is read, the
        // abandoned one goes.
        let other = format!("{:020}-other", 2);
        fs::create_dir_all(dir.path().join("checkpoints/f/state").join(&other)).unwrap();
        let meta2 = Meta {
            files: m1.files.clone(),
            ..meta(2)
        };
        fs::write(
            dir.path()
                .join("checkpoints/f/state")
                .join(&other)
                .join("meta.json"),
            serde_json::to_string(&meta2).unwrap(),
        )
        .unwrap();
        let loaded = store
            .load(Some(2), Some(&other), "op")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(loaded.files, m1.files);
        assert!(!dir.path().join("checkpoints/f/state").join(&v2).exists());

        // A changed operator is refused; a missing version is an error, not empty state.
        assert!(store.load(Some(2), Some(&other), "changed").await.is_err());
        assert!(store.load(Some(5), None, "op").await.is_err());
    }

    #[tokio::test]
    async fn a_state_an_earlier_cdcflow_kept_reads_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path());
        let old = dir
            .path()
            .join("checkpoints/f/state")
            .join(format!("{:020}", 3));
        fs::create_dir_all(&old).unwrap();
        fs::write(
            old.join("meta.json"),
            serde_json::to_string(&meta(3)).unwrap(),
        )
        .unwrap();
        let leftover = dir
            .path()
            .join("checkpoints/f/state")
            .join(format!("{:020}.tmp", 2));
        fs::create_dir_all(&leftover).unwrap();
        fs::write(leftover.join("groups-1.parquet"), b"cut short").unwrap();
        let loaded = store.load(Some(3), None, "op").await.unwrap().unwrap();
        assert_eq!(loaded.batch, 3);
        assert!(!leftover.exists(), "an old attempt's temporary folder goes");
        assert_eq!(version_batch(&format!("{:020}-abc", 7)), Some(7));
        assert_eq!(version_batch(&format!("{:020}.tmp", 7)), Some(7));
        assert_eq!(version_batch("junk"), None);
    }
}
