//! `StatefulAggregateExec`: one batch of an aggregation over a watermarked stream
//! ([`super::aggregate`]) as an execution plan. Its input is the aggregation's input
//! rows with keys, event time and arguments evaluated; a second input, when the query
//! filters on the event time, gives the greatest event time without those filters.
//! Its output is the groups the batch closes, in the aggregation's columns.

use std::fmt;
use std::sync::Arc;

use cdcflow_plan::stream_aggregate::{StatefulOp, StreamAggregate};
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

use super::aggregate::{self, Before};
use super::operator;
use super::run::{Outcome, StateRun};
use crate::RunError;

#[derive(Debug)]
pub(crate) struct StatefulAggregateExec {
    op: Arc<StatefulOp>,
    run: Arc<StateRun>,
    schema: SchemaRef,
    rows: Arc<dyn ExecutionPlan>,
    greatest: Option<Arc<dyn ExecutionPlan>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl StatefulAggregateExec {
    pub fn new(
        op: Arc<StatefulOp>,
        run: Arc<StateRun>,
        schema: SchemaRef,
        rows: Arc<dyn ExecutionPlan>,
        greatest: Option<Arc<dyn ExecutionPlan>>,
    ) -> Self {
        Self {
            op,
            run,
            properties: operator::properties(Arc::clone(&schema)),
            schema,
            rows,
            greatest,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    fn aggregate(&self) -> Result<&StreamAggregate> {
        match self.op.as_ref() {
            StatefulOp::Aggregate(sa) => Ok(sa),
            StatefulOp::Join(_) => Err(DataFusionError::Internal(
                "StatefulAggregateExec over a join".into(),
            )),
        }
    }
}

impl DisplayAs for StatefulAggregateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "StatefulAggregateExec: mode=append, {}, {}",
            super::describe_op(&self.op),
            super::describe_state(self.run.before.as_ref())
        )
    }
}

impl ExecutionPlan for StatefulAggregateExec {
    fn name(&self) -> &'static str {
        "StatefulAggregateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        let mut children = vec![&self.rows];
        children.extend(&self.greatest);
        children
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition; self.children().len()]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.children().len()]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() || children.len() > 2 {
            return Err(DataFusionError::Internal(
                "StatefulAggregateExec takes one or two inputs".into(),
            ));
        }
        let greatest = (children.len() == 2).then(|| children.remove(1));
        Ok(Arc::new(Self::new(
            Arc::clone(&self.op),
            Arc::clone(&self.run),
            Arc::clone(&self.schema),
            children.remove(0),
            greatest,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        operator::only_partition(self.name(), partition)?;
        self.aggregate()?;
        let sa = Arc::clone(&self.op);
        let run = Arc::clone(&self.run);
        let schema = Arc::clone(&self.schema);
        let rows_plan = Arc::clone(&self.rows);
        let greatest_plan = self.greatest.clone();
        let metrics = self.metrics.clone();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let out = Arc::clone(&schema);
        Ok(operator::once(out, async move {
            let StatefulOp::Aggregate(sa) = sa.as_ref() else {
                return Err(RunError::internal("StatefulAggregateExec over a join"));
            };
            let rows = operator::read(rows_plan, Arc::clone(&context)).await?;
            let greatest = match greatest_plan {
                Some(p) => {
                    aggregate::greatest_read(&operator::read(p, Arc::clone(&context)).await?, "m")
                }
                None => aggregate::greatest_read(&rows, "et"),
            };
            let timer = baseline.elapsed_compute().timer();
            let mut version = run.take_version()?;
            let before = Before {
                watermark_micros: run.watermark_micros(),
                seen_rows: run.seen_rows(),
            };
            let session = operator::session(&context);
            let s = aggregate::step(&session, sa, before, &mut version, &rows, greatest).await?;
            drop(rows);
            operator::record(&metrics, &s.metrics);
            let closed = operator::renamed(&schema, &s.closed)?;
            let closed = closed.record_output(&baseline);
            timer.done();
            run.done(
                version,
                Outcome {
                    watermark_micros: s.watermark_micros,
                    seen_rows: s.seen_rows,
                    inputs: Default::default(),
                    late: s.late,
                    metrics: s.metrics,
                },
            )?;
            Ok(closed)
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
