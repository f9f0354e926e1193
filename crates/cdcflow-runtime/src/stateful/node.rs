//! The stateful operator in a flow's logical plan: the aggregation or join over
//! watermarked streams is replaced by a [`StatefulNode`] whose inputs are the rows the
//! operator reads (its input's rows with their keys and event time evaluated), and
//! [`StatefulPlanner`] lowers it into [`StatefulExec`], as AUTO CDC's node is lowered
//! into its execution plans:
//!
//! ```text
//! ProjectionExec: the query's columns over the rows the operator appends
//!   StatefulAggregateExec: the batch merged into the state; the groups closed
//!     ProjectionExec: keys, event time, arguments
//!       …the input's scan and filters
//! ```
//!
//! The node carries the batch's [`StateRun`].

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use cdcflow_plan::stream_aggregate::StatefulOp;
use datafusion::common::DFSchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::DataFusionError;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

use super::aggregate;
use super::operator::StatefulExec;
use super::run::StateRun;
use super::{dedup, join};
use crate::RunError;

/// The stateful operator `op` in a flow's plan, over the rows it reads (`inputs`).
#[derive(Debug)]
pub(crate) struct StatefulNode {
    pub op: Arc<StatefulOp>,
    pub run: Arc<StateRun>,
    pub inputs: Vec<LogicalPlan>,
    /// The replaced aggregation's or join's output.
    pub schema: DFSchemaRef,
}

impl StatefulNode {
    fn replaced(&self) -> &LogicalPlan {
        self.op.node()
    }
}

impl PartialEq for StatefulNode {
    fn eq(&self, other: &Self) -> bool {
        self.replaced() == other.replaced()
            && self.inputs == other.inputs
            && Arc::ptr_eq(&self.run, &other.run)
    }
}

impl Eq for StatefulNode {}

impl PartialOrd for StatefulNode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        (self == other).then_some(std::cmp::Ordering::Equal)
    }
}

impl Hash for StatefulNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.replaced().hash(state);
        self.inputs.hash(state);
    }
}

impl UserDefinedLogicalNodeCore for StatefulNode {
    fn name(&self) -> &str {
        match self.op.as_ref() {
            StatefulOp::Aggregate(_) => "StatefulAggregate",
            StatefulOp::Join(_) => "StreamingJoin",
            StatefulOp::Dedup(_) => "StreamingDeduplicate",
        }
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        self.inputs.iter().collect()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    /// None of its own: the projections below it hold the keys and event times.
    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            UserDefinedLogicalNodeCore::name(self),
            super::describe_op(&self.op)
        )
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        Ok(Self {
            op: Arc::clone(&self.op),
            run: Arc::clone(&self.run),
            inputs,
            schema: Arc::clone(&self.schema),
        })
    }
}

/// `plan` with `op`'s aggregation or join replaced by its [`StatefulNode`], whose batch
/// is `run`.
pub(crate) fn with_node(
    plan: LogicalPlan,
    op: &StatefulOp,
    run: &Arc<StateRun>,
) -> Result<LogicalPlan, RunError> {
    let replaced = op.node();
    let inputs = match op {
        StatefulOp::Aggregate(sa) => {
            let mut inputs = vec![aggregate::rows_plan(sa)?];
            inputs.extend(aggregate::greatest_plan(sa)?);
            inputs
        }
        StatefulOp::Join(sj) => vec![
            join::side_rows_plan(&sj.join.left, &sj.left)?,
            join::side_rows_plan(&sj.join.right, &sj.right)?,
        ],
        StatefulOp::Dedup(sd) => {
            let mut inputs = vec![dedup::rows_plan(sd)?];
            inputs.extend(dedup::greatest_plan(sd)?);
            inputs
        }
    };
    let node = LogicalPlan::Extension(Extension {
        node: Arc::new(StatefulNode {
            op: Arc::new(op.clone()),
            run: Arc::clone(run),
            inputs,
            schema: Arc::clone(replaced.schema()),
        }),
    });
    let out = plan.transform_up(|n| match &n == replaced {
        true => Ok(Transformed::yes(node.clone())),
        false => Ok(Transformed::no(n)),
    })?;
    if !out.transformed {
        return Err(RunError::internal(
            "the stateful operator was not found in its flow's plan",
        ));
    }
    Ok(out.data)
}

/// Lowers a [`StatefulNode`] into its execution plan over its physical inputs.
#[derive(Debug)]
pub(crate) struct StatefulPlanner;

#[async_trait::async_trait]
impl ExtensionPlanner for StatefulPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn datafusion::catalog::Session,
        _planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> datafusion::error::Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<StatefulNode>() else {
            return Ok(None);
        };
        let schema = Arc::new(node.schema.as_arrow().clone());
        let expected = match node.op.as_ref() {
            StatefulOp::Aggregate(_) | StatefulOp::Dedup(_) => 1..=2,
            StatefulOp::Join(_) => 2..=2,
        };
        if !expected.contains(&physical_inputs.len()) {
            return Err(DataFusionError::Internal(format!(
                "{} planned over {} input(s)",
                UserDefinedLogicalNodeCore::name(node),
                physical_inputs.len()
            )));
        }
        let plan: Arc<dyn ExecutionPlan> = Arc::new(StatefulExec::new(
            Arc::clone(&node.op),
            Arc::clone(&node.run),
            schema,
            physical_inputs.to_vec(),
        ));
        Ok(Some(plan))
    }
}

/// DataFusion's physical planner with [`StatefulPlanner`].
#[derive(Debug)]
pub(crate) struct StatefulQueryPlanner;

#[async_trait::async_trait]
impl QueryPlanner for StatefulQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(StatefulPlanner)])
            .create_physical_plan(logical_plan, session)
            .await
    }
}
