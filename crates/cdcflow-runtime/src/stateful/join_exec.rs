//! `StreamingJoinExec`: one batch of a join of two watermarked streams
//! ([`super::join`]) as an execution plan, Spark's `StreamingSymmetricHashJoinExec`.
//! Its inputs are each side's new rows with their event time; its output is the pairs
//! the batch completes and, for an outer join, the rows let go unmatched.

use std::fmt;
use std::sync::Arc;

use cdcflow_plan::stream_aggregate::StatefulOp;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet, RecordOutput,
};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, PlanProperties,
    SendableRecordBatchStream,
};

use super::join::{self, Before, LEFT, RIGHT};
use super::operator;
use super::run::{Outcome, StateRun};
use crate::RunError;

#[derive(Debug)]
pub(crate) struct StreamingJoinExec {
    op: Arc<StatefulOp>,
    run: Arc<StateRun>,
    schema: SchemaRef,
    left: Arc<dyn ExecutionPlan>,
    right: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl StreamingJoinExec {
    pub fn new(
        op: Arc<StatefulOp>,
        run: Arc<StateRun>,
        schema: SchemaRef,
        left: Arc<dyn ExecutionPlan>,
        right: Arc<dyn ExecutionPlan>,
    ) -> Self {
        Self {
            op,
            run,
            properties: operator::properties(Arc::clone(&schema)),
            schema,
            left,
            right,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for StreamingJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "StreamingSymmetricHashJoinExec: {}, {}",
            super::describe_op(&self.op),
            super::describe_state(self.run.before.as_ref())
        )
    }
}

impl ExecutionPlan for StreamingJoinExec {
    fn name(&self) -> &'static str {
        "StreamingSymmetricHashJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.left, &self.right]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition; 2]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; 2]
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
        let [left, right] = <[Arc<dyn ExecutionPlan>; 2]>::try_from(children).map_err(|_| {
            DataFusionError::Internal("StreamingSymmetricHashJoinExec takes two inputs".into())
        })?;
        Ok(Arc::new(Self::new(
            Arc::clone(&self.op),
            Arc::clone(&self.run),
            Arc::clone(&self.schema),
            left,
            right,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        operator::only_partition(self.name(), partition)?;
        let op = Arc::clone(&self.op);
        let run = Arc::clone(&self.run);
        let schema = Arc::clone(&self.schema);
        let (left_plan, right_plan) = (Arc::clone(&self.left), Arc::clone(&self.right));
        let metrics = self.metrics.clone();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        Ok(operator::once(Arc::clone(&schema), async move {
            let StatefulOp::Join(sj) = op.as_ref() else {
                return Err(RunError::internal(
                    "StreamingSymmetricHashJoinExec over an aggregation",
                ));
            };
            let left = operator::read(left_plan, Arc::clone(&context)).await?;
            let right = operator::read(right_plan, Arc::clone(&context)).await?;
            let timer = baseline.elapsed_compute().timer();
            let mut version = run.take_version()?;
            let before = Before {
                watermark_micros: run.watermark_micros(),
                seen_rows: run.seen_rows(),
                left: version.take_part(LEFT)?,
                right: version.take_part(RIGHT)?,
            };
            let session = operator::session(&context);
            let mut s = join::step(&session, sj, before, (&left, &right), run.batch).await?;
            for (part, schema, rows) in [
                (LEFT, join::side_schema(sj.join.left.schema()), &s.left),
                (RIGHT, join::side_schema(sj.join.right.schema()), &s.right),
            ] {
                version.put(part, 0, &schema, rows, None)?;
            }
            s.metrics.state_bytes = version.bytes();
            operator::record(&metrics, &s.metrics);
            let emitted = operator::renamed(&schema, &s.emitted)?;
            let emitted = emitted.record_output(&baseline);
            timer.done();
            run.done(
                version,
                Outcome {
                    watermark_micros: s.watermark_micros,
                    seen_rows: s.seen_rows,
                    inputs: s.inputs,
                    late: s.late,
                    metrics: s.metrics,
                },
            )?;
            Ok(emitted)
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
