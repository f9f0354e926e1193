//! A flow's checkpoint: the input each batch covers, written down *before* the batch is
//! committed (a write-ahead offsets log, as Spark's streaming checkpoints keep).
//!
//! Whether batch `n` was committed is not recorded here: the target table knows it,
//! because its commit carries the flow's application-transaction id with version `n`.
//! So after a crash at any point either the commit happened (the offsets of `n` count as
//! processed) or it did not (they are discarded and the input is read again). Nothing is
//! skipped and nothing applied twice, without a two-phase commit.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RunError;
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
}

/// What a flow has processed.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// The last committed batch.
    pub committed: Option<i64>,
    /// Landing files read by committed batches, per input, as the latest batch that
    /// read each found it.
    pub files: BTreeMap<String, BTreeMap<FileName, ReadRecord>>,
    /// The offsets of the last committed batch.
    pub last: Option<Offsets>,
}

impl Progress {
    pub fn next_batch(&self) -> i64 {
        self.committed.map_or(0, |c| c + 1)
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

    fn offsets_dir(&self) -> PathBuf {
        self.dir.join("offsets")
    }

    /// The progress given the last batch the target committed; offsets of batches
    /// after it were never committed and are removed.
    pub fn load(&self, committed: Option<i64>) -> Result<Progress, RunError> {
        self.read(committed, true)
    }

    /// As [`Checkpoint::load`], changing nothing (for `cdcflow status` beside a run).
    pub fn peek(&self, committed: Option<i64>) -> Result<Progress, RunError> {
        self.read(committed, false)
    }

    fn read(&self, committed: Option<i64>, tidy: bool) -> Result<Progress, RunError> {
        let dir = self.offsets_dir();
        let mut progress = Progress {
            committed,
            ..Progress::default()
        };
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(progress),
            Err(e) => return Err(RunError::io(&dir, e)),
        };
        let mut batches: Vec<(i64, PathBuf)> = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| RunError::io(&dir, e))?.path();
            let batch = path
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|_| path.extension().is_some_and(|e| e == "json"))
                .and_then(|s| s.parse::<i64>().ok());
            if let Some(b) = batch {
                batches.push((b, path));
            }
        }
        batches.sort();
        for (batch, path) in batches {
            if committed.is_none_or(|c| batch > c) {
                if tidy {
                    fs::remove_file(&path).map_err(|e| RunError::io(&path, e))?;
                }
                continue;
            }
            let text = fs::read_to_string(&path).map_err(|e| RunError::io(&path, e))?;
            let offsets: Offsets = serde_json::from_str(&text).map_err(|e| RunError::File {
                path: path.clone(),
                message: format!("corrupt checkpoint: {e}"),
            })?;
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

    /// Records what batch `offsets.batch` reads; durable before the batch commits.
    pub fn write_intent(&self, offsets: &Offsets) -> Result<(), RunError> {
        let dir = self.offsets_dir();
        fs::create_dir_all(&dir).map_err(|e| RunError::io(&dir, e))?;
        let path = dir.join(format!("{:020}.json", offsets.batch));
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

    /// Forgets everything (full refresh), after the tables were reset.
    pub fn reset(&self) -> Result<(), RunError> {
        match fs::remove_dir_all(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RunError::io(&self.dir, e)),
        }
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
