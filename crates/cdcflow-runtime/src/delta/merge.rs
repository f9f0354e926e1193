//! A merge-on-write change of a table: rows of its files are deleted by deletion
//! vectors and the new rows are appended as files of their own, all in one commit. The
//! files that keep their rows are never rewritten, so what a change writes follows the
//! change: its new rows, one vector per touched file, and the log entries.
//!
//! A touched file is removed with its old vector and added again with the union of old
//! and new deletions (Delta replays a file by path and vector id); a file whose every
//! row is deleted is only removed. Its statistics keep the file's row count and are
//! marked not tight, because the minimum and maximum may belong to deleted rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Utc;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use deltalake::kernel::{Action, Add, Remove};

use super::deletion_vectors::VectorFile;
use super::{Commit, DataFile, Staged, StagedData, Table, parallel};
use crate::RunError;

/// Writes `batches` (rows of `schema`) as new data files of `table`, uncommitted: the
/// add actions of a merge-on-write ([`stage_written`]).
pub async fn write_files(
    table: &Table,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    commit: &Commit,
) -> Result<Vec<Action>, RunError> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Ok(vec![]);
    }
    let delta = existing(table)?;
    parallel::stage(&delta, schema, batches, &commit.file_layout())
        .await
        .map_err(|e| RunError::delta(&table.dir, e))
}

/// Stages a merge-on-write of `table`: the rows at `deleted` (positions per index into
/// `files`, the files it was read from) deleted, and the files of `added` (their add
/// actions, uncommitted: [`write_files`]'s or a [`super::Sink`]'s) added. The vector
/// file is written; nothing is committed until the [`Staged`] is, with
/// [`super::Mode::Merge`].
pub async fn stage_written(
    table: &Table,
    files: &[DataFile],
    deleted: BTreeMap<usize, Vec<u64>>,
    schema: &SchemaRef,
    added: Vec<Action>,
) -> Result<Staged, RunError> {
    let dir = table.dir.clone();
    let delta = existing(table)?;
    let mut actions = added;
    let mut vectors = VectorFile::new();
    let mut any_vector = false;
    for (index, positions) in deleted {
        let Some(file) = files.get(index) else {
            continue;
        };
        let mut all = file.deleted.as_deref().cloned().unwrap_or_default();
        let before = all.len();
        all.extend(positions);
        if all.len() == before {
            continue;
        }
        let Some(add) = &file.add else {
            return Err(RunError::internal(format!(
                "{}: a file outside the table cannot take a deletion vector",
                file.path.display()
            )));
        };
        actions.push(Action::Remove(removed(add)));
        let rows = row_count(file, add)?;
        if all.len() >= rows {
            continue;
        }
        any_vector = true;
        let mut again = add.clone();
        again.deletion_vector = Some(vectors.push(&all)?);
        again.data_change = true;
        again.stats = Some(loose_stats(add.stats.as_deref(), rows));
        actions.push(Action::Add(again));
    }
    if any_vector {
        vectors.write_to(table).await?;
    }
    Ok(Staged {
        dir,
        table: delta,
        schema: Arc::clone(schema),
        data: StagedData::Files(actions),
    })
}

fn existing(table: &Table) -> Result<deltalake::DeltaTable, RunError> {
    table.table.clone().ok_or_else(|| {
        RunError::internal(format!(
            "{}: a merge-on-write needs an existing table",
            table.dir.display()
        ))
    })
}

/// The remove of a file as it stands, old vector and all.
fn removed(add: &Add) -> Remove {
    Remove {
        path: add.path.clone(),
        data_change: true,
        deletion_timestamp: Some(Utc::now().timestamp_millis()),
        extended_file_metadata: Some(true),
        size: Some(add.size),
        partition_values: Some(add.partition_values.clone()),
        deletion_vector: add.deletion_vector.clone(),
        tags: None,
        base_row_id: add.base_row_id,
        default_row_commit_version: add.default_row_commit_version,
    }
}

/// Rows of `files` (a table's, some with deletion vectors) once `deleted` (positions by
/// index into `files`) are deleted too and `added` (add actions) added.
pub fn rows_after(
    files: &[DataFile],
    deleted: &BTreeMap<usize, Vec<u64>>,
    added: &[Action],
) -> Result<u64, RunError> {
    let mut rows = 0;
    for (index, file) in files.iter().enumerate() {
        let mut gone = file.deleted.as_deref().cloned().unwrap_or_default();
        if let Some(positions) = deleted.get(&index) {
            gone.extend(positions.iter().copied());
        }
        let all = match &file.add {
            Some(add) => row_count(file, add)?,
            None => 0,
        };
        rows += all.saturating_sub(gone.len());
    }
    for action in added {
        if let Action::Add(add) = action {
            let stats = add.get_stats().ok().flatten().ok_or_else(|| {
                RunError::internal(format!("{}: a new file without statistics", add.path))
            })?;
            rows += u64::try_from(stats.num_records).unwrap_or(0);
        }
    }
    Ok(rows)
}

/// Rows the file holds, deleted ones included: from its statistics, else its footer.
fn row_count(file: &DataFile, add: &Add) -> Result<u64, RunError> {
    if let Some(stats) = add.get_stats().ok().flatten() {
        return Ok(u64::try_from(stats.num_records).unwrap_or(0));
    }
    let path = &file.path;
    let source = super::read::open(file)?;
    let meta = ArrowReaderMetadata::load(&source, ArrowReaderOptions::default()).map_err(|e| {
        RunError::File {
            path: path.clone(),
            message: e.to_string(),
        }
    })?;
    Ok(u64::try_from(meta.metadata().file_metadata().num_rows()).unwrap_or(0))
}

/// A file's statistics once a vector deletes some of its rows: the same row count (a
/// reader subtracts the vector's), bounds kept but no longer tight.
fn loose_stats(stats: Option<&str>, rows: u64) -> String {
    let mut value = stats
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .filter(serde_json::Value::is_object)
        .unwrap_or_else(|| serde_json::json!({}));
    value["numRecords"] = serde_json::json!(rows);
    value["tightBounds"] = serde_json::json!(false);
    value.to_string()
}
