//! `StatefulExec`: one batch of a stateful operator as an execution plan of its own,
//! named as Spark names the operator: `StatefulAggregateExec` (an aggregation,
//! [`super::aggregate`]), `StreamingSymmetricHashJoinExec` (a join of two streams,
//! [`super::join`]), `StreamingDeduplicateWithinWatermarkExec` (DISTINCT ON,
//! [`super::dedup`]). Its inputs are the rows the operator reads, each taken whole in
//! one partition; its output is what the batch appends. The batch runs once, under a
//! session of the task's, and Spark's state operator metrics are the plan's own
//! (`explain --analyze` shows them).

use std::fmt;
use std::sync::Arc;

use cdcflow_plan::stream_aggregate::StatefulOp;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, RecordOutput,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};

use super::metrics::StateMetrics;
use super::run::StateRun;
use super::{aggregate, dedup, join};
use crate::RunError;

#[derive(Debug)]
pub(crate) struct StatefulExec {
    op: Arc<StatefulOp>,
    run: Arc<StateRun>,
    schema: SchemaRef,
    inputs: Vec<Arc<dyn ExecutionPlan>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl StatefulExec {
    pub fn new(
        op: Arc<StatefulOp>,
        run: Arc<StateRun>,
        schema: SchemaRef,
        inputs: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Self {
        Self {
            op,
            run,
            properties: Arc::new(PlanProperties::new(
                EquivalenceProperties::new(Arc::clone(&schema)),
                Partitioning::UnknownPartitioning(1),
                EmissionType::Final,
                Boundedness::Bounded,
            )),
            schema,
            inputs,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for StatefulExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let mode = match self.op.as_ref() {
            StatefulOp::Aggregate(_) => "mode=append, ",
            _ => "",
        };
        write!(
            f,
            "{}: {mode}{}, {}",
            self.name(),
            super::describe_op(&self.op),
            super::describe_state(self.run.before.as_ref())
        )
    }
}

impl ExecutionPlan for StatefulExec {
    fn name(&self) -> &'static str {
        match self.op.as_ref() {
            StatefulOp::Aggregate(_) => "StatefulAggregateExec",
            StatefulOp::Join(_) => "StreamingSymmetricHashJoinExec",
            StatefulOp::Dedup(_) => "StreamingDeduplicateWithinWatermarkExec",
        }
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.inputs.iter().collect()
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition; self.inputs.len()]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.inputs.len()]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != self.inputs.len() {
            return Err(DataFusionError::Internal(format!(
                "{} takes {} input(s)",
                self.name(),
                self.inputs.len()
            )));
        }
        Ok(Arc::new(Self::new(
            Arc::clone(&self.op),
            Arc::clone(&self.run),
            Arc::clone(&self.schema),
            children,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "{} has one partition, not {partition}",
                self.name()
            )));
        }
        let op = Arc::clone(&self.op);
        let run = Arc::clone(&self.run);
        let schema = Arc::clone(&self.schema);
        let inputs = self.inputs.clone();
        let metrics = self.metrics.clone();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let batch = async move {
            let mut rows = Vec::with_capacity(inputs.len());
            for input in inputs {
                let read: Vec<RecordBatch> = input
                    .execute(0, Arc::clone(&context))?
                    .try_collect()
                    .await?;
                rows.push(read);
            }
            let timer = baseline.elapsed_compute().timer();
            let mut version = run.take_version()?;
            // The operator's merges run with the task's configuration and memory.
            let session = SessionContext::new_with_config_rt(
                context.session_config().clone(),
                context.runtime_env(),
            );
            let (out, outcome) = match op.as_ref() {
                StatefulOp::Aggregate(sa) => {
                    aggregate::batch(&session, sa, &run, &mut version, &rows).await?
                }
                StatefulOp::Join(sj) => {
                    join::batch(&session, sj, &run, &mut version, &rows).await?
                }
                StatefulOp::Dedup(sd) => dedup::batch(sd, &run, &mut version, &rows)?,
            };
            drop(rows);
            record(&metrics, &outcome.metrics);
            // The operator's columns (`c0`, `c1`, …) under the replaced node's names.
            let out = RecordBatch::try_new(Arc::clone(&schema), out.columns().to_vec())?
                .record_output(&baseline);
            timer.done();
            run.done(version, outcome)?;
            Ok::<_, RunError>(out)
        };
        let stream = futures::stream::once(async move {
            batch
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))
        })
        .boxed();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Records a batch's state metrics, under Spark's names, as the plan's.
fn record(set: &ExecutionPlanMetricsSet, m: &StateMetrics) {
    let gauge = |name: &'static str, value: u64| {
        MetricBuilder::new(set)
            .global_gauge(name)
            .set(usize::try_from(value).unwrap_or(usize::MAX));
    };
    gauge("numRowsTotal", m.rows_total);
    gauge("numRowsUpdated", m.rows_updated);
    gauge("numRowsRemoved", m.rows_removed);
    gauge("numRowsDroppedByWatermark", m.rows_dropped_by_watermark);
    gauge("numDroppedDuplicateRows", m.duplicates_dropped);
    gauge("memoryUsedBytes", m.memory_used_bytes);
    gauge("stateBytes", m.state_bytes);
}
