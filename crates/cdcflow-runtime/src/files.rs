//! Reading landing files (`read_files`) into Arrow batches of a known schema.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use cdcflow_plan::read_files::{FileFormat, ReadFiles};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::csv::ReaderBuilder as CsvReaderBuilder;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::json::ReaderBuilder as JsonReaderBuilder;

use crate::RunError;
use crate::delta::{conform, read_parquet};

const BATCH_ROWS: usize = 64 * 1024;

/// Reads one landing file of `source` as `schema`.
pub fn read_file(
    source: &ReadFiles,
    schema: &SchemaRef,
    path: &Path,
) -> Result<Vec<RecordBatch>, RunError> {
    let fail = |message: String| RunError::File {
        path: path.to_path_buf(),
        message,
    };
    match source.format {
        FileFormat::Parquet => read_parquet(path, schema),
        FileFormat::Json => {
            let file = File::open(path).map_err(|e| RunError::io(path, e))?;
            // A STRING column takes numbers and booleans as their text, as Spark's
            // reader does (and Auto Loader relies on, inferring every column a string).
            let reader = JsonReaderBuilder::new(Arc::clone(schema))
                .with_coerce_primitive(true)
                .with_batch_size(BATCH_ROWS)
                .build(BufReader::new(file))
                .map_err(|e| fail(e.to_string()))?;
            collect(reader, schema, &fail)
        }
        FileFormat::Csv => {
            let file = File::open(path).map_err(|e| RunError::io(path, e))?;
            let reader = CsvReaderBuilder::new(Arc::clone(schema))
                .with_header(source.csv_header())
                .with_delimiter(source.csv_delimiter())
                .with_batch_size(BATCH_ROWS)
                .build(file)
                .map_err(|e| fail(e.to_string()))?;
            collect(reader, schema, &fail)
        }
    }
}

fn collect<E: std::fmt::Display>(
    reader: impl Iterator<Item = Result<RecordBatch, E>>,
    schema: &SchemaRef,
    fail: &dyn Fn(String) -> RunError,
) -> Result<Vec<RecordBatch>, RunError> {
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| fail(e.to_string()))?;
        out.push(conform(&batch, schema)?);
    }
    Ok(out)
}

/// `path` relative to the landing folder of `source` (how checkpoints name files).
pub fn relative_name(source: &ReadFiles, path: &Path) -> String {
    match path.strip_prefix(&source.path) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => path
            .file_name()
            .map_or_else(|| path.to_string_lossy(), |n| n.to_string_lossy())
            .into_owned(),
    }
}
