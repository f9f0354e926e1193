//! Rows an aggregation over a watermarked stream dropped as late, kept where a user can
//! query them: the Delta table `<target>__late` beside the flow's target, one row per
//! row and window dropped, with the input's columns, the window that had closed, the
//! watermark at the time and the reason. Spark drops such rows and counts them; Flink
//! routes them to a side output, which this is.

use cdcflow_plan::Flow;
use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use std::sync::Arc;

use crate::RunError;
use crate::delta::{self, Commit};

/// The late-rows table's name for `target`.
pub fn table_name(target: &str) -> String {
    format!("{}__late", target.to_lowercase())
}

/// Appends `rows` for batch `batch` of `flow`, once: a rerun of a batch whose commit
/// here landed (its transaction id says so) writes nothing. Returns the table's name.
pub(crate) async fn write(
    flow: &Flow,
    target_dir: &cdcflow_plan::location::Location,
    app: &str,
    batch: i64,
    rows: RecordBatch,
) -> Result<String, RunError> {
    let name = table_name(&flow.target);
    let dir = crate::layout::late_dir(target_dir);
    let n = rows.num_rows();
    let mut fields: Vec<Field> = vec![
        Field::new("_flow", DataType::Utf8, true),
        Field::new("_batch", DataType::Int64, true),
    ];
    fields.extend(rows.schema().fields().iter().map(|f| f.as_ref().clone()));
    let schema = Arc::new(Schema::new(fields));
    let mut columns: Vec<datafusion::arrow::array::ArrayRef> = vec![
        Arc::new(StringArray::from(vec![flow.name.clone(); n])),
        Arc::new(Int64Array::from(vec![batch; n])),
    ];
    columns.extend(rows.columns().iter().cloned());
    let rows = RecordBatch::try_new(Arc::clone(&schema), columns)?;
    let commit = Commit {
        txns: vec![(app.to_string(), batch)],
        name: name.clone(),
        description: Some(format!(
            "rows the aggregation of `{}` dropped as late (after the watermark closed their window)",
            flow.target
        )),
        ..Commit::default()
    };
    delta::append_once(&dir, &schema, vec![rows], app, batch, &commit).await?;
    Ok(name)
}
