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
use datafusion::error::{DataFusionError, Result};
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
use crate::RunError;

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

/// A slice of a batch failed (its apply, or the worker it ran on): nothing of the
/// batch was committed, and the next run applies it again from the same events.
fn slices_failed(target: &str, e: &DataFusionError) -> RunError {
    RunError::input(format!(
        "a slice of the batch of `{target}` failed, so nothing of the batch was committed: {e}"
    ))
    .with_help("run again: the batch is applied again from the same events; a worker that is gone must be left out of --workers")
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
            let rows: Vec<RecordBatch> = match input.execute(0, context)?.try_collect().await {
                Ok(rows) => rows,
                Err(e) => return Err(external(slices_failed(&target.name, &e))),
            };
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
