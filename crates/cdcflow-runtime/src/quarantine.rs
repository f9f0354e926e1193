//! Malformed landing records, kept where a user can query them: the Delta table
//! `<target>__quarantine` beside the flow's target, one row per record with its file,
//! line, text and the reason it was refused. The file is named readably (`file`: bytes
//! that are not UTF-8 written `\xNN`) and exactly as the OS names it (`file_bytes`).

use std::sync::Arc;

use cdcflow_plan::Flow;
use datafusion::arrow::array::{BinaryArray, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::RunError;
use crate::delta::{self, Commit};
use crate::files::BadRecord;

/// The quarantine table's name for `target`.
pub fn table_name(target: &str) -> String {
    format!("{}__quarantine", target.to_lowercase())
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("flow", DataType::Utf8, false),
        Field::new("batch", DataType::Int64, false),
        Field::new("file", DataType::Utf8, false),
        Field::new("file_bytes", DataType::Binary, true),
        Field::new("line", DataType::Int64, true),
        Field::new("record", DataType::Utf8, true),
        Field::new("error", DataType::Utf8, false),
    ]))
}

/// The landing file a malformed record is in.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// `folder/name` for people.
    pub shown: String,
    /// `folder/name` as the OS names it.
    pub bytes: Vec<u8>,
}

/// Appends `bad` for batch `batch` of `flow`, once: a rerun of a batch whose
/// quarantine commit landed (its transaction id says so) writes nothing. Returns the
/// table's name.
pub(crate) async fn write(
    flow: &Flow,
    target_dir: &cdcflow_plan::location::Location,
    app: &str,
    batch: i64,
    bad: Vec<(Source, BadRecord)>,
) -> Result<String, RunError> {
    let name = table_name(&flow.target);
    let dir = crate::layout::quarantine_dir(target_dir);
    let n = bad.len();
    let rows = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(StringArray::from(vec![flow.name.clone(); n])),
            Arc::new(Int64Array::from(vec![batch; n])),
            Arc::new(StringArray::from_iter_values(
                bad.iter().map(|(f, _)| f.shown.as_str()),
            )),
            Arc::new(BinaryArray::from_iter_values(
                bad.iter().map(|(f, _)| f.bytes.as_slice()),
            )),
            Arc::new(Int64Array::from_iter(
                bad.iter().map(|(_, b)| b.line.map(|l| l as i64)),
            )),
            Arc::new(StringArray::from_iter(
                bad.iter().map(|(_, b)| b.text.as_deref()),
            )),
            Arc::new(StringArray::from_iter_values(
                bad.iter().map(|(_, b)| b.error.as_str()),
            )),
        ],
    )?;
    let commit = Commit {
        txns: vec![(app.to_string(), batch)],
        name: name.clone(),
        description: Some(format!(
            "records of `{}`'s landing files that could not be read",
            flow.target
        )),
        ..Commit::default()
    };
    delta::append_once(&dir, &schema(), vec![rows], app, batch, &commit).await?;
    Ok(name)
}

/// The failure for malformed records under `bad_records: fail` (and wherever they cannot
/// be quarantined): the first one named by file and line.
pub(crate) fn malformed(bad: &[(Source, BadRecord)]) -> RunError {
    let (file, first) = &bad[0];
    let file = &file.shown;
    let at = first
        .line
        .map_or_else(|| file.clone(), |l| format!("{file}:{l}"));
    let more = match bad.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    RunError::input(format!(
        "malformed record at {at}: {}{more}; nothing was committed",
        first.error
    ))
    .with_help("fix the file and land the fixed copy as a new file, or set `bad_records: quarantine` in pipeline.yaml to keep such records apart")
}
