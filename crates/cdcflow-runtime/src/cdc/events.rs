//! Source rows → change events: the flow's expressions (WHERE, COLUMNS, SEQUENCE BY,
//! APPLY AS DELETE/TRUNCATE WHEN) evaluated by DataFusion as the planner planned them,
//! then checked for the rows the apply cannot take (null keys, null sequence values):
//! the lower half of the flow's execution plan (`exec`).

use std::sync::Arc;

use cdcflow_plan::autocdc::AutoCdcSpec;
use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, new_empty_array};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;

use super::exec::{self, EventChecks};
use super::kernel::Rules;
use crate::RunError;

pub use super::exec::Sourced;

/// Evaluates the flow over `rows` (of `source` schema) into events of
/// [`Rules::event_schema`], recorded at `now_micros`, as one batch.
pub async fn to_events(
    spec: &AutoCdcSpec,
    rules: &Rules,
    source: &SchemaRef,
    rows: Sourced,
    now_micros: i64,
) -> Result<RecordBatch, RunError> {
    let parts = event_parts(spec, rules, source, rows, now_micros).await?;
    Ok(concat_parts(&rules.event_schema(), parts)?)
}

/// [`to_events`] in parts, as the flow's expressions give them. The parts share their
/// buffers with the source rows where a column passes through unchanged, so they cost
/// little more than the source rows, which are let go.
pub async fn event_parts(
    spec: &AutoCdcSpec,
    rules: &Rules,
    source: &SchemaRef,
    rows: Sourced,
    now_micros: i64,
) -> Result<Vec<RecordBatch>, RunError> {
    if rows.iter().all(|(_, b)| b.num_rows() == 0) {
        return Ok(vec![]);
    }
    let spec = Arc::new(spec.clone());
    let checks = EventChecks::of(&spec, Arc::new(rules.clone()), now_micros);
    exec::events_plan(&spec, checks, source, rows)
        .await?
        .collect()
        .await
}

/// Event `parts` as one batch, put together a column at a time: each column's parts
/// are let go once it is copied.
pub fn concat_parts(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<RecordBatch, ArrowError> {
    let mut columns: Vec<Vec<ArrayRef>> =
        vec![Vec::with_capacity(batches.len()); schema.fields().len()];
    for batch in batches {
        for (c, column) in batch.columns().iter().enumerate() {
            columns[c].push(Arc::clone(column));
        }
    }
    let mut out = Vec::with_capacity(columns.len());
    for (parts, field) in columns.iter_mut().zip(schema.fields()) {
        let column = match parts.len() {
            0 => new_empty_array(field.data_type()),
            1 => parts.remove(0),
            _ => {
                let arrays: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
                concat(&arrays)?
            }
        };
        parts.clear();
        out.push(column);
    }
    RecordBatch::try_new(Arc::clone(schema), out)
}
