//! Fills the `_metadata` column of a file source whose query reads it
//! (`cdcflow_plan::file_metadata`): every row of a file gets that file's path (a
//! `file://` URL), name, size and modification time.

use std::path::Path;
use std::sync::Arc;

use cdcflow_plan::file_metadata;
use datafusion::arrow::array::{
    ArrayRef, Int64Array, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::SchemaRef;

use crate::RunError;
use crate::landing::Stamp;

/// `batches` (read from the file at `path`) with the column `_metadata` added, as in
/// `schema` (the file schema with the column). `url` is the file's as `_metadata`
/// gives it: the `file://` URL of `path`, or for a file fetched from an object store
/// the object's URL.
pub fn attach(
    batches: Vec<RecordBatch>,
    (path, url): (&Path, Option<String>),
    stamp: &Stamp,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>, RunError> {
    let url = url.unwrap_or_else(|| file_metadata::file_url(path));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let size = i64::try_from(stamp.size).unwrap_or(i64::MAX);
    batches
        .into_iter()
        .map(|batch| {
            let n = batch.num_rows();
            let children: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(vec![url.as_str(); n])),
                Arc::new(StringArray::from(vec![name.as_str(); n])),
                Arc::new(Int64Array::from(vec![size; n])),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![stamp.modified_micros; n])
                        .with_timezone("UTC"),
                ),
            ];
            let metadata = StructArray::try_new(file_metadata::fields(), children, None)?;
            let mut columns = batch.columns().to_vec();
            columns.push(Arc::new(metadata));
            Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
        })
        .collect()
}
