//! What the two stateful execution plans share: one partition out, each input taken
//! whole in one partition, the batch run once under a session of the task's, and
//! Spark's state operator metrics as the plan's own (`explain --analyze` shows them).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ExecutionPlan, Partitioning, PlanProperties, SendableRecordBatchStream,
};
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};

use super::metrics::StateMetrics;
use crate::RunError;

/// A plan of one partition whose rows come when its inputs are read whole.
pub(crate) fn properties(schema: SchemaRef) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// Fails unless `partition` is 0.
pub(crate) fn only_partition(plan: &str, partition: usize) -> datafusion::error::Result<()> {
    match partition {
        0 => Ok(()),
        _ => Err(DataFusionError::Internal(format!(
            "{plan} has one partition, not {partition}"
        ))),
    }
}

/// The rows of `input`'s one partition.
pub(crate) async fn read(
    input: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
) -> datafusion::error::Result<Vec<RecordBatch>> {
    input.execute(0, task)?.try_collect().await
}

/// A session running the operator's merges with the task's configuration and memory.
pub(crate) fn session(task: &TaskContext) -> SessionContext {
    SessionContext::new_with_config_rt(task.session_config().clone(), task.runtime_env())
}

/// A stream of the one batch `rows` gives, of `schema`.
pub(crate) fn once(
    schema: SchemaRef,
    rows: impl Future<Output = Result<RecordBatch, RunError>> + Send + 'static,
) -> SendableRecordBatchStream {
    let stream = futures::stream::once(async move {
        rows.await
            .map_err(|e| DataFusionError::External(Box::new(e)))
    })
    .boxed();
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// `rows` (the operator's output columns, `c0`, `c1`, …) under `schema`'s names.
pub(crate) fn renamed(schema: &SchemaRef, rows: &RecordBatch) -> Result<RecordBatch, RunError> {
    Ok(RecordBatch::try_new(
        Arc::clone(schema),
        rows.columns().to_vec(),
    )?)
}

/// Records a batch's state metrics, under Spark's names, as the plan's.
pub(crate) fn record(set: &ExecutionPlanMetricsSet, m: &StateMetrics) {
    let gauge = |name: &'static str, value: u64| {
        MetricBuilder::new(set)
            .global_gauge(name)
            .set(usize::try_from(value).unwrap_or(usize::MAX));
    };
    gauge("numRowsTotal", m.rows_total);
    gauge("numRowsUpdated", m.rows_updated);
    gauge("numRowsRemoved", m.rows_removed);
    gauge("numRowsDroppedByWatermark", m.rows_dropped_by_watermark);
    gauge("memoryUsedBytes", m.memory_used_bytes);
    gauge("stateBytes", m.state_bytes);
}
