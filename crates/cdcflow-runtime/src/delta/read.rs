//! Reading Parquet files on every core: the row groups of the files are shared out in
//! contiguous runs of about equal rows, one thread each, and the batches come back in
//! file and row-group order.

use std::fs::File;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

use super::conform;
use crate::{RunError, par};

/// Rows per batch read.
const BATCH_ROWS: usize = 64 * 1024;

/// Reads a Parquet file into batches of `schema`, matching columns by name.
pub fn read_parquet(path: &Path, schema: &SchemaRef) -> Result<Vec<RecordBatch>, RunError> {
    read_files(&[path.to_path_buf()], schema)
}

/// One row group of one of the files.
struct Group {
    file: usize,
    index: usize,
    rows: usize,
}

/// Reads Parquet files into batches of `schema`, in order, on every core.
pub(crate) fn read_files(
    paths: &[PathBuf],
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>, RunError> {
    let mut metadata = Vec::with_capacity(paths.len());
    let mut groups = Vec::new();
    for (file, path) in paths.iter().enumerate() {
        let meta = ArrowReaderMetadata::load(&open(path)?, ArrowReaderOptions::default())
            .map_err(|e| file_error(path, e))?;
        for (index, g) in meta.metadata().row_groups().iter().enumerate() {
            groups.push(Group {
                file,
                index,
                rows: usize::try_from(g.num_rows()).unwrap_or(0),
            });
        }
        metadata.push(meta);
    }
    let parts = par::map(runs(&groups), |run| read_run(paths, &metadata, run, schema))?;
    Ok(parts.into_iter().flatten().collect())
}

/// `groups` in contiguous runs of about equal rows, one per core.
fn runs(groups: &[Group]) -> Vec<&[Group]> {
    let cores = par::cores();
    let total: usize = groups.iter().map(|g| g.rows).sum();
    let per_run = total.div_ceil(cores.min(groups.len()).max(1)).max(1);
    let mut out = Vec::new();
    let (mut start, mut filled) = (0, 0);
    for (i, g) in groups.iter().enumerate() {
        filled += g.rows;
        if filled >= per_run {
            out.push(&groups[start..=i]);
            (start, filled) = (i + 1, 0);
        }
    }
    if start < groups.len() {
        out.push(&groups[start..]);
    }
    out
}

fn read_run(
    paths: &[PathBuf],
    metadata: &[ArrowReaderMetadata],
    run: &[Group],
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>, RunError> {
    let mut out = Vec::new();
    for file_groups in run.chunk_by(|a, b| a.file == b.file) {
        let file = file_groups[0].file;
        let path = &paths[file];
        let indexes: Vec<usize> = file_groups.iter().map(|g| g.index).collect();
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(open(path)?, metadata[file].clone())
                .with_row_groups(indexes)
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| file_error(path, e))?;
        for batch in reader {
            let batch = batch.map_err(|e| file_error(path, e))?;
            out.push(conform(&batch, schema)?);
        }
    }
    Ok(out)
}

fn open(path: &Path) -> Result<File, RunError> {
    File::open(path).map_err(|e| RunError::io(path, e))
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> RunError {
    RunError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}
