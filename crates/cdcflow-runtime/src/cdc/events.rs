//! Source rows → change events: the flow's expressions (WHERE, COLUMNS, SEQUENCE BY,
//! APPLY AS DELETE/TRUNCATE WHEN) evaluated by DataFusion as the planner planned them,
//! then checked for the rows the apply cannot take (null keys, null sequence values):
//! the lower half of the flow's execution plan (`exec`).

use std::sync::Arc;

use cdcflow_plan::autocdc::AutoCdcSpec;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

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
    Ok(super::engine::concat_parts(&rules.event_schema(), parts)?)
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
