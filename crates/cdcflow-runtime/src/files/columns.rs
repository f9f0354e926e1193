//! How the columns of a landing Parquet file meet the schema it is read as. A Parquet
//! file holds many records with one set of columns, so it follows, whole, the rules a
//! JSON record follows: a column the schema lacks is new (schema drift) when the schema
//! is inferred and left out when it is declared, and a column the file lacks is null.
//! A file with none of the schema's columns would be rows of nulls only: it is
//! quarantined instead.

use std::fs::File;
use std::path::Path;

use cdcflow_plan::read_files::ReadFiles;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::RunError;

/// Whether a landing Parquet file can be read as the schema.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fit {
    Fits,
    /// Columns the inferred schema lacks: it was inferred before the file landed (a
    /// continuous run, or a file that landed while the run started), so the file waits
    /// for a run that infers them.
    New(Vec<String>),
}

/// How the columns of the Parquet file at `path` meet `schema`; an error (the file is
/// quarantined) when it has none of them.
pub(super) fn parquet_fit(
    source: &ReadFiles,
    schema: &SchemaRef,
    path: &Path,
) -> Result<Fit, RunError> {
    let file = File::open(path).map_err(|e| RunError::io(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| RunError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let columns: Vec<String> = builder
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let known = |c: &String| schema.field_with_name(c).is_ok();
    let new: Vec<String> = columns.iter().filter(|c| !known(c)).cloned().collect();
    if !new.is_empty() && source.declared_schema.is_none() {
        return Ok(Fit::New(new));
    }
    if !columns.is_empty() && !columns.iter().any(known) {
        return Err(RunError::File {
            path: path.to_path_buf(),
            message: format!(
                "none of the schema's columns ({}) is in the file, whose columns are {}: read as the schema, its rows would be nulls only",
                quoted(schema.fields().iter().map(|f| f.name())),
                quoted(columns.iter()),
            ),
        });
    }
    Ok(Fit::Fits)
}

/// Column names as written in messages: `a`, `b`.
fn quoted<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
