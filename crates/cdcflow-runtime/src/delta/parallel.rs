//! Writing a large batch set to an existing table as one Parquet file per core, encoded
//! at the same time, and committing them together. deltalake's write operation encodes
//! one file at a time, which leaves all but one core idle while a table is rewritten.
//!
//! The files and their statistics come from deltalake's `RecordBatchWriter`; the commit
//! (adds, the removes of an overwrite, the application transactions) from its
//! `CommitBuilder` (or, for a new table, its `CreateBuilder`), so the log is what the
//! write operation would have produced. Writes that change an existing table's columns
//! take the write operation instead.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::file::properties::WriterProperties;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel as _;
use deltalake::kernel::transaction::CommitBuilder;
use deltalake::kernel::{Action, StructType, normalize_for_delta};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::{DeltaResult, DeltaTable, DeltaTableError};
use futures::TryStreamExt;

use super::{Commit, Mode};

/// Rows below which one file is written: small writes are not worth splitting.
const MIN_ROWS_PER_FILE: usize = 256 * 1024;

/// Whether [`stage`] can take this write: a plain table (see [`is_plain`]) that is new,
/// or keeps its columns.
pub(super) fn applies(table: &DeltaTable, schema: &SchemaRef, commit: &Commit) -> bool {
    if commit.repartitions(table) {
        // Only a replacement may change the partitioning, and deltalake's write does.
        return false;
    }
    if table.version().is_none() {
        let properties = commit.delta_properties();
        return is_plain(
            properties
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_deref().unwrap_or(""))),
            schema,
        );
    }
    let Ok(snapshot) = table.snapshot() else {
        return false;
    };
    let current = snapshot.snapshot().arrow_schema();
    let configuration = snapshot.metadata().configuration();
    is_plain(
        configuration.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        &current,
    ) && current.fields().len() == schema.fields().len()
        && current
            .fields()
            .iter()
            .zip(schema.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
}

/// A table whose writes need nothing but data files: no CHECK constraints, invariants,
/// generated or identity columns to enforce, no column mapping, row tracking or change
/// data feed to maintain. deltalake's write operation handles those; the file writer
/// does not.
fn is_plain<'a>(
    mut properties: impl Iterator<Item = (&'a str, &'a str)>,
    schema: &SchemaRef,
) -> bool {
    let enabled = |v: &str| !v.eq_ignore_ascii_case("false") && !v.eq_ignore_ascii_case("none");
    let special_property = properties.any(|(k, v)| {
        k.starts_with("delta.constraints.")
            || (matches!(
                k,
                "delta.columnMapping.mode"
                    | "delta.enableRowTracking"
                    | "delta.enableChangeDataFeed"
            ) && enabled(v))
    });
    let special_column = schema.fields().iter().any(|f| {
        f.metadata().keys().any(|k| {
            k.starts_with("delta.generationExpression")
                || k.starts_with("delta.invariants")
                || k.starts_with("delta.identity")
        })
    });
    !special_property && !special_column
}

/// How a write lays its rows out in files.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileLayout {
    /// The partition columns of a table the write creates (an existing table's own
    /// are kept).
    pub partitions: Vec<String>,
    /// The columns rows are sorted by before they are cut into files (`CLUSTER BY`).
    pub cluster: Vec<String>,
}

impl Commit {
    /// How the commit's write lays out its files.
    pub(crate) fn file_layout(&self) -> FileLayout {
        FileLayout {
            partitions: self.new_table_partitions(),
            cluster: self.cluster_columns.clone(),
        }
    }
}

/// A writer of new data files of `table` (which may not exist yet, and is then
/// partitioned by `partitions`). The writer splits rows by their partition values.
pub(super) fn file_writer(
    table: &DeltaTable,
    schema: &SchemaRef,
    partitions: &[String],
    properties: WriterProperties,
) -> DeltaResult<RecordBatchWriter> {
    let writer = match table.version().is_some() {
        true => RecordBatchWriter::for_table(table)?,
        false => RecordBatchWriter::try_new(
            table.table_url().as_str(),
            Arc::clone(schema),
            (!partitions.is_empty()).then(|| partitions.to_vec()),
            None,
        )?,
    };
    Ok(writer.with_writer_properties(properties))
}

/// Writes the data files of `batches` (one per core, sorted by the clustering
/// columns first), not yet committed.
pub(crate) async fn stage(
    table: &DeltaTable,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    layout: &FileLayout,
) -> DeltaResult<Vec<Action>> {
    let batches = super::cluster::sorted_batches(batches, &layout.cluster)
        .map_err(|e| DeltaTableError::Generic(e.to_string()))?;
    let properties = super::encoding::writer_properties(schema, &batches);
    let mut handles = Vec::new();
    for part in split(batches) {
        let mut writer = file_writer(table, schema, &layout.partitions, properties.clone())?;
        handles.push(tokio::spawn(async move {
            for batch in part {
                writer.write(batch).await?;
            }
            writer.flush().await
        }));
    }
    let mut adds = Vec::new();
    for handle in handles {
        let written = handle
            .await
            .map_err(|e| DeltaTableError::Generic(format!("file writer task: {e}")))??;
        adds.extend(written.into_iter().map(Action::Add));
    }
    Ok(adds)
}

/// Commits staged files: creating the table, or adding them to it.
pub(super) async fn commit_staged(
    table: &DeltaTable,
    schema: &SchemaRef,
    adds: Vec<Action>,
    mode: Mode,
    commit: &Commit,
) -> DeltaResult<()> {
    crate::failpoint::hit(&format!("before-commit:{}", commit.name));
    match table.version().is_some() {
        true => commit_to(table, adds, mode, commit).await?,
        false => create(table, schema, adds, commit).await?,
    }
    crate::failpoint::hit(&format!("committed:{}", commit.name));
    Ok(())
}

/// Creates the table with its first files in one commit.
async fn create(
    table: &DeltaTable,
    schema: &SchemaRef,
    adds: Vec<Action>,
    commit: &Commit,
) -> DeltaResult<()> {
    let columns: StructType = normalize_for_delta(schema).as_ref().try_into_kernel()?;
    let mut builder = table
        .create()
        .with_columns(columns.fields().cloned())
        .with_table_name(&commit.name)
        .with_partition_columns(commit.new_table_partitions())
        .with_configuration(commit.delta_properties())
        .with_commit_properties(commit.properties())
        .with_actions(commit.commit_info())
        .with_actions(adds);
    if let Some(d) = &commit.description {
        builder = builder.with_comment(d);
    }
    builder.await?;
    Ok(())
}

/// Commits `adds` to an existing table (replacing every current file on overwrite).
async fn commit_to(
    table: &DeltaTable,
    mut actions: Vec<Action>,
    mode: Mode,
    commit: &Commit,
) -> DeltaResult<()> {
    let snapshot = table.snapshot()?;
    let log_store = table.log_store();
    if mode == Mode::Overwrite {
        let removes: Vec<Action> = snapshot
            .snapshot()
            .file_views(&log_store, None)
            .map_ok(|f| Action::Remove(f.remove_action(true)))
            .try_collect()
            .await?;
        actions.extend(removes);
    }
    let operation = match mode {
        Mode::Merge => DeltaOperation::Merge {
            predicate: None,
            merge_predicate: None,
            matched_predicates: vec![],
            not_matched_predicates: vec![],
            not_matched_by_source_predicates: vec![],
        },
        Mode::Append | Mode::Overwrite => DeltaOperation::Write {
            mode: match mode {
                Mode::Overwrite => SaveMode::Overwrite,
                _ => SaveMode::Append,
            },
            partition_by: None,
            predicate: None,
        },
    };
    // The commit's own `commitInfo` first, where deltalake would put its own.
    let mut all: Vec<Action> = commit.commit_info().into_iter().collect();
    all.extend(actions);
    CommitBuilder::from(commit.properties())
        .with_actions(all)
        .build(Some(snapshot), Arc::clone(&log_store), operation)
        .await?;
    Ok(())
}

/// How many files a write of `rows` rows takes: one per core, fewer when the rows are
/// few, at least one.
pub(super) fn files_for(rows: usize) -> usize {
    (rows / MIN_ROWS_PER_FILE).clamp(1, crate::par::cores())
}

/// The batches in as many runs of about equal rows as there are cores (fewer when the
/// rows are few), in order; at least one run, so that an empty write commits too.
fn split(batches: Vec<RecordBatch>) -> Vec<Vec<RecordBatch>> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let parts = files_for(rows);
    let per_part = rows.div_ceil(parts).max(1);
    let mut out: Vec<Vec<RecordBatch>> = vec![Vec::new()];
    let mut filled = 0;
    for mut batch in batches {
        while batch.num_rows() > 0 {
            if filled == per_part {
                out.push(Vec::new());
                filled = 0;
            }
            let take = batch.num_rows().min(per_part - filled);
            if let Some(run) = out.last_mut() {
                run.push(batch.slice(0, take));
            }
            filled += take;
            batch = batch.slice(take, batch.num_rows() - take);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn batch(rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .expect("batch")
    }

    #[test]
    fn runs_keep_every_row_in_order_and_split_only_large_writes() {
        let runs = split(vec![batch(10), batch(5)]);
        assert_eq!(runs.len(), 1);
        assert!(split(vec![]).len() == 1);
        let big = 3 * MIN_ROWS_PER_FILE as i64;
        let runs = split(vec![batch(big / 2), batch(big - big / 2)]);
        let cores = crate::par::cores().min(3);
        assert_eq!(runs.len(), cores);
        let sizes: Vec<usize> = runs
            .iter()
            .map(|r| r.iter().map(RecordBatch::num_rows).sum())
            .collect();
        let big = usize::try_from(big).unwrap();
        assert_eq!(sizes.iter().sum::<usize>(), big);
        assert!(
            sizes.iter().all(|&s| s.abs_diff(big / cores) <= 1),
            "{sizes:?}"
        );
    }
}
