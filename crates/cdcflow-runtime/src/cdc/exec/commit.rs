//! `AutoCdcCommitExec`: the one commit of a batch applied in slices. It gathers every
//! slice's changes (`changes.rs`), refuses the batch unless each slice finished once,
//! unites the deletions of each file across slices into one deletion vector per file,
//! keeps the newest marker of each kind, and commits the published table, then the
//! state, with the batch's transaction, as the unsplit apply does. It returns the one
//! row of [`applied_schema`], so a run cannot tell the two plans apart.

use std::fmt;
use std::sync::Arc;

use cdcflow_plan::autocdc::applied_schema;
use datafusion::arrow::array::RecordBatch;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::TryStreamExt;

use super::apply::ApplyTarget;
use super::changes::gather;
use super::events::external;
use super::{Parts, plan_properties};

/// The execution plan of a batch's commit over its slices' changes (one partition).
#[derive(Debug)]
pub struct AutoCdcCommitExec {
    input: Arc<dyn ExecutionPlan>,
    target: Arc<ApplyTarget>,
    slices: usize,
    parts: Parts,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl AutoCdcCommitExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, target: Arc<ApplyTarget>, slices: usize) -> Self {
        Self {
            input,
            target,
            slices,
            parts: Parts::One,
            properties: plan_properties(
                applied_schema(),
                Partitioning::UnknownPartitioning(1),
                EmissionType::Final,
            ),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn target(&self) -> &Arc<ApplyTarget> {
        &self.target
    }

    pub fn slices(&self) -> usize {
        self.slices
    }
}

impl DisplayAs for AutoCdcCommitExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "AutoCdcCommitExec: target={} slices={} state={} published={}",
            self.target.name, self.slices, self.target.state_at, self.target.public_at
        )
    }
}

impl ExecutionPlan for AutoCdcCommitExec {
    one_input!();

    fn name(&self) -> &'static str {
        "AutoCdcCommitExec"
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = super::only_child(self.name(), children)?;
        Ok(Arc::new(Self::new(
            input,
            Arc::clone(&self.target),
            self.slices,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        super::only_partition(self.name(), partition)?;
        let (input, target, slices) = (
            Arc::clone(&self.input),
            Arc::clone(&self.target),
            self.slices,
        );
        let commit_time = MetricBuilder::new(&self.metrics).subset_time("commit_time", 0);
        let one = futures::stream::once(async move {
            let rows: Vec<RecordBatch> = input.execute(0, context)?.try_collect().await?;
            let _timer = commit_time.timer();
            let gathered = gather(&rows, slices).map_err(external)?;
            let applied = target.commit_slices(gathered).await.map_err(external)?;
            applied.to_batch().map_err(external)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            applied_schema(),
            one,
        )))
    }
}
