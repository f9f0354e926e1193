//! The state of a flow's stateful operator, one version per batch, in the flow's
//! checkpoint folder: `state/<batch>/` holds `groups.parquet` (the open groups) and
//! `meta.json` (the watermark, what the state is of). Parquet, because the rows are
//! Arrow batches already, the files are compact and any reader can open them, and one
//! immutable file per version makes the commit a rename (as Arroyo keeps its state).
//!
//! A version is written whole into `state/<batch>.tmp/` and renamed into place before
//! the target's commit of the batch. The version a run starts from is the one of the
//! last committed batch (the target's transaction id says which): a version written
//! by a batch that never committed is removed, as its offsets are, and so are the
//! versions before the one in use. So target, offsets and state agree after a kill at
//! any point.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::checkpoint::write_atomic;

fn read_parquet(path: &Path) -> Result<Vec<RecordBatch>, RunError> {
    let damaged = |e: &dyn std::fmt::Display| RunError::File {
        path: path.to_path_buf(),
        message: format!("damaged state: {e}"),
    };
    let file = fs::File::open(path).map_err(|e| RunError::io(path, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| damaged(&e))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| damaged(&e))
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
    /// Each watermarked input's own watermark after the batch, from its rows in the
    /// batch (a join's two; shown, not carried over: see `join.rs`).
    #[serde(default)]
    pub inputs: std::collections::BTreeMap<String, i64>,
    /// Rows the state held after the batch.
    #[serde(default)]
    pub rows: u64,
    /// Batches in a row, up to this one, whose state grew while the watermark stayed.
    #[serde(default)]
    pub growing_batches: u32,
    /// The operator the state is of (its columns and what they aggregate): a changed
    /// query cannot read an older state.
    pub operator: String,
}

/// A kept state, as `cdcflow status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StoredState {
    /// The watermark after the last committed batch.
    pub watermark: String,
    /// Open groups held.
    pub groups: u64,
    /// Bytes of the state's file.
    pub bytes: u64,
}

/// A version read back: its meta and its parts' rows, by part name.
pub(crate) struct Loaded {
    pub meta: Meta,
    pub parts: std::collections::BTreeMap<String, Vec<RecordBatch>>,
}

/// One part of a state version: a name (its file's) and its rows.
pub(crate) struct Part<'a> {
    pub name: &'a str,
    pub schema: &'a SchemaRef,
    pub rows: &'a [RecordBatch],
}

pub(crate) struct StateStore {
    dir: PathBuf,
    flow: String,
}

impl StateStore {
    pub fn new(checkpoint_dir: &Path, flow: &str) -> Self {
        Self {
            dir: checkpoint_dir.join("state"),
            flow: flow.to_string(),
        }
    }

    fn version_dir(&self, batch: i64) -> PathBuf {
        self.dir.join(format!("{batch:020}"))
    }

    /// The state after batch `committed` (none before the first batch), with every
    /// other version removed.
    pub fn load(&self, committed: Option<i64>, operator: &str) -> Result<Option<Loaded>, RunError> {
        self.tidy(committed)?;
        let Some(batch) = committed else {
            return Ok(None);
        };
        let dir = self.version_dir(batch);
        let meta_path = dir.join("meta.json");
        let text = match fs::read_to_string(&meta_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RunError::input(format!(
                    "{}: the state of flow `{}` after its batch {batch} is missing",
                    dir.display(),
                    self.flow
                ))
                .with_help("put the folder back from a backup, or run `cdcflow run --full-refresh` on the flow's table to recompute it from its sources; running on without it would emit wrong aggregates"));
            }
            Err(e) => return Err(RunError::io(&meta_path, e)),
        };
        let meta: Meta = serde_json::from_str(&text).map_err(|e| RunError::File {
            path: meta_path.clone(),
            message: format!("damaged state: {e}"),
        })?;
        if meta.operator != operator {
            return Err(RunError::input(format!(
                "the state of flow `{}` was kept for another query: its aggregation changed since batch {batch}",
                self.flow
            ))
            .with_help("run `cdcflow run --full-refresh` on the flow's table to recompute it with the new query"));
        }
        let mut parts = std::collections::BTreeMap::new();
        for entry in fs::read_dir(&dir).map_err(|e| RunError::io(&dir, e))? {
            let path = entry.map_err(|e| RunError::io(&dir, e))?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".parquet"))
            else {
                continue;
            };
            parts.insert(name.to_string(), read_parquet(&path)?);
        }
        Ok(Some(Loaded { meta, parts }))
    }

    /// The state after batch `committed` as `cdcflow status` shows it, changing nothing:
    /// its watermark, groups and bytes on disk; `None` when there is none.
    pub fn peek(&self, committed: Option<i64>) -> Option<StoredState> {
        let dir = self.version_dir(committed?);
        let meta: Meta =
            serde_json::from_str(&fs::read_to_string(dir.join("meta.json")).ok()?).ok()?;
        let (mut groups, mut bytes) = (0i64, 0u64);
        for entry in fs::read_dir(&dir).ok()? {
            let path = entry.ok()?.path();
            if path.extension().is_none_or(|e| e != "parquet") {
                continue;
            }
            let file = fs::File::open(&path).ok()?;
            bytes += file.metadata().ok()?.len();
            groups += ParquetRecordBatchReaderBuilder::try_new(file)
                .ok()?
                .metadata()
                .file_metadata()
                .num_rows();
        }
        Some(StoredState {
            watermark: crate::stateful::aggregate::format_micros(meta.watermark_micros),
            groups: u64::try_from(groups).unwrap_or_default(),
            bytes,
        })
    }

    /// Removes the versions other than `committed`'s (and unfinished ones).
    fn tidy(&self, committed: Option<i64>) -> Result<(), RunError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(RunError::io(&self.dir, e)),
        };
        for entry in entries {
            let path = entry.map_err(|e| RunError::io(&self.dir, e))?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let keep = committed.is_some_and(|c| name == format!("{c:020}"));
            if !keep {
                fs::remove_dir_all(&path).map_err(|e| RunError::io(&path, e))?;
            }
        }
        Ok(())
    }

    /// Writes the state after batch `meta.batch`: whole, then renamed into place.
    pub fn write(&self, meta: &Meta, parts: &[Part<'_>]) -> Result<(), RunError> {
        let done = self.version_dir(meta.batch);
        let tmp = done.with_extension("tmp");
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(|e| RunError::io(&tmp, e))?;
        }
        fs::create_dir_all(&tmp).map_err(|e| RunError::io(&tmp, e))?;
        for part in parts {
            write_parquet(
                &tmp.join(format!("{}.parquet", part.name)),
                part.schema,
                part.rows,
            )?;
        }
        crate::failpoint::hit(&format!("state-written:{}", self.flow));
        let text =
            serde_json::to_string_pretty(meta).map_err(|e| RunError::internal(e.to_string()))?;
        write_atomic(&tmp.join("meta.json"), text.as_bytes())?;
        if done.exists() {
            fs::remove_dir_all(&done).map_err(|e| RunError::io(&done, e))?;
        }
        fs::rename(&tmp, &done).map_err(|e| RunError::io(&done, e))?;
        crate::failpoint::hit(&format!("state-renamed:{}", self.flow));
        Ok(())
    }
}

fn write_parquet(path: &Path, schema: &SchemaRef, rows: &[RecordBatch]) -> Result<(), RunError> {
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
    file.sync_all().map_err(|e| RunError::io(path, e))
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
        }
    }

    #[test]
    fn the_committed_version_is_read_and_the_others_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path(), "f");
        assert!(store.load(None, "op").unwrap().is_none());
        let (schema, b) = rows(&[1, 2]);
        let part = |rows| Part {
            name: "groups",
            schema: &schema,
            rows,
        };
        store.write(&meta(0), &[part(&b)]).unwrap();
        let (_, b1) = rows(&[3]);
        store.write(&meta(1), &[part(&b1)]).unwrap();
        // Batch 1 never committed: its version goes, batch 0's is read.
        let loaded = store.load(Some(0), "op").unwrap().unwrap();
        assert_eq!(loaded.meta, meta(0));
        assert_eq!(
            loaded.parts["groups"]
                .iter()
                .map(|r| r.num_rows())
                .sum::<usize>(),
            2
        );
        assert!(!dir.path().join("state").join(format!("{:020}", 1)).exists());
        // A changed operator is refused; a missing version is an error, not empty state.
        assert!(store.load(Some(0), "other").is_err());
        assert!(store.load(Some(5), "op").is_err());
    }
}
