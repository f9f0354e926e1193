//! Reading landing files (`read_files`) into Arrow batches of a known schema, with the
//! records that do not fit set apart (file and line kept) instead of failing the file.

use std::path::Path;
use std::sync::Arc;

use cdcflow_plan::read_files::{FileFormat, ReadFiles};
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::csv::ReaderBuilder as CsvReaderBuilder;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::json::ReaderBuilder as JsonReaderBuilder;

use crate::RunError;
use crate::delta::{conform, read_parquet};

mod columns;

use columns::Fit;

const BATCH_ROWS: usize = 64 * 1024;

/// A record that could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct BadRecord {
    /// 1-based; `None` when the whole file is unreadable.
    pub line: Option<u64>,
    /// The record as written, when it is text.
    pub text: Option<String>,
    pub error: String,
}

/// What reading one file gave.
#[derive(Debug, Default)]
pub struct FileRead {
    pub batches: Vec<RecordBatch>,
    pub bad: Vec<BadRecord>,
    /// A text file whose last line has no line end yet: still being written, so it is
    /// left for a later run rather than read half.
    pub incomplete: bool,
    /// Columns of a Parquet file that the inferred schema lacks: the schema was
    /// inferred before the file landed, so it is left for a run that infers them
    /// rather than read without them.
    pub new_columns: Vec<String>,
    /// Of a text file, its content's [`crate::landing::fingerprint`].
    pub fingerprint: Option<u64>,
}

/// Reads one landing file of `source` as `schema`.
pub fn read_file(
    source: &ReadFiles,
    schema: &SchemaRef,
    path: &Path,
) -> Result<FileRead, RunError> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
        return Ok(FileRead::default());
    }
    if source.format == FileFormat::Parquet {
        // The parquet crate can panic on some corrupt files (its fuzzing found one in
        // the definition-level decoder); such a file is quarantined like any other.
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            landing_parquet(source, schema, path)
        }))
        .unwrap_or_else(|_| {
            Err(RunError::File {
                path: path.to_path_buf(),
                message: "corrupt Parquet file (the reader gave up on it)".into(),
            })
        });
        return Ok(match read {
            Ok(read) => read,
            Err(e) => FileRead {
                bad: vec![BadRecord {
                    line: None,
                    text: None,
                    error: e.to_string(),
                }],
                ..FileRead::default()
            },
        });
    }
    let bytes = std::fs::read(path).map_err(|e| RunError::io(path, e))?;
    let fingerprint = Some(crate::landing::fingerprint(&bytes));
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        // Not text: one record for the whole file, with nothing of its content copied
        // (the quarantine table is readable by whoever reads the pipeline's tables).
        return Ok(FileRead {
            bad: vec![BadRecord {
                line: None,
                text: None,
                error: format!(
                    "not a text file ({} bytes, a NUL byte at offset {at}); its content is not copied",
                    bytes.len()
                ),
            }],
            fingerprint,
            ..FileRead::default()
        });
    }
    // A local file without a final line end may still be being written; an object of
    // an object store is visible only once it is whole.
    if !bytes.ends_with(b"\n") && crate::landing_remote::url_of(source).is_none() {
        return Ok(FileRead {
            incomplete: true,
            ..FileRead::default()
        });
    }
    let header = source.format == FileFormat::Csv && source.csv_header();
    let read = match decode(source, schema, &bytes, header) {
        Ok(batches) => FileRead {
            batches,
            ..FileRead::default()
        },
        // Only on failure, decode line by line to set the bad records apart.
        Err(_) => by_line(source, schema, &bytes, header),
    };
    Ok(FileRead {
        fingerprint,
        ..read
    })
}

/// A landing Parquet file read as `schema`, or left for later when its columns are
/// new to an inferred schema.
fn landing_parquet(
    source: &ReadFiles,
    schema: &SchemaRef,
    path: &Path,
) -> Result<FileRead, RunError> {
    Ok(match columns::parquet_fit(source, schema, path)? {
        Fit::Fits => FileRead {
            batches: read_parquet(path, schema)?,
            ..FileRead::default()
        },
        Fit::New(columns) => FileRead {
            new_columns: columns,
            ..FileRead::default()
        },
    })
}

fn decode(
    source: &ReadFiles,
    schema: &SchemaRef,
    bytes: &[u8],
    header: bool,
) -> Result<Vec<RecordBatch>, String> {
    let batches: Vec<RecordBatch> = match source.format {
        FileFormat::Json => JsonReaderBuilder::new(Arc::clone(schema))
            // A STRING column takes numbers and booleans as their text, as Spark's
            // reader does (and Auto Loader relies on, inferring every column a string).
            .with_coerce_primitive(true)
            .with_strict_mode(false)
            .with_batch_size(BATCH_ROWS)
            .build(bytes)
            .map_err(|e| e.to_string())?
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
        FileFormat::Csv => CsvReaderBuilder::new(Arc::clone(schema))
            .with_header(header)
            .with_delimiter(source.csv_delimiter())
            .with_batch_size(BATCH_ROWS)
            .build(bytes)
            .map_err(|e| e.to_string())?
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
        FileFormat::Text => {
            let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
            let lines: StringArray = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(Some)
                .collect();
            let field = Field::new("value", DataType::Utf8, true);
            vec![
                RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![Arc::new(lines)])
                    .map_err(|e| e.to_string())?,
            ]
        }
        FileFormat::Parquet => return Err("not a text format".into()),
    };
    batches
        .iter()
        .map(|b| conform(b, schema).map_err(|e| e.to_string()))
        .collect()
}

fn by_line(source: &ReadFiles, schema: &SchemaRef, bytes: &[u8], header: bool) -> FileRead {
    let mut read = FileRead::default();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line_no = i as u64 + 1;
        if (header && i == 0) || line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let mut record = line.to_vec();
        record.push(b'\n');
        match decode(source, schema, &record, false) {
            Ok(batches) => read.batches.extend(batches),
            Err(error) => read.bad.push(BadRecord {
                line: Some(line_no),
                text: Some(String::from_utf8_lossy(line).into_owned()),
                error,
            }),
        }
    }
    read
}
