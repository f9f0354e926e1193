//! AUTO CDC as DataFusion execution plans. A batch runs the planner's plan of its flow
//! ([`AutoCdcNode::plan`]) with the batch's rows as the source: DataFusion plans and
//! optimizes the WHERE and the event projection, and [`AutoCdcPlanner`] lowers the node
//! into [`AutoCdcApplyExec`] over [`AutoCdcEventsExec`]:
//!
//! ```text
//! AutoCdcApplyExec: apply the events to the state and published table, commit both
//!   AutoCdcEventsExec: cast, sequence value, recording time; null keys fail the batch
//!     ProjectionExec: the target's columns, the sequence fields, the operation, origin
//!       FilterExec: WHERE (legacy APPLY CHANGES)
//!         SourceRowsExec: the batch's source rows, handed over once
//! ```
//!
//! A large first batch scans [`KeyGroupsExec`] instead, one partition per group of its
//! keys, and the two plans above take the partitions apart ([`Parts::KeyGroups`]).

/// The methods every AUTO CDC execution plan shares: one input (`self.input`), whose
/// partitions it takes as `self.parts` says, no expressions of its own, its metrics in
/// `self.metrics`.
macro_rules! one_input {
    () => {
        fn properties(&self) -> &std::sync::Arc<datafusion::physical_plan::PlanProperties> {
            &self.properties
        }

        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            vec![&self.input]
        }

        fn required_input_distribution(&self) -> Vec<datafusion::physical_plan::Distribution> {
            self.input_distribution_requirements().into_per_child()
        }

        fn input_distribution_requirements(
            &self,
        ) -> datafusion::physical_plan::InputDistributionRequirements {
            datafusion::physical_plan::InputDistributionRequirements::new(vec![
                self.parts.required(),
            ])
        }

        fn benefits_from_input_partitioning(&self) -> Vec<bool> {
            vec![false]
        }

        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
            ) -> datafusion::error::Result<
                datafusion::common::tree_node::TreeNodeRecursion,
            >,
        ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }

        fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
            Some(self.metrics.clone_inner())
        }
    };
}

/// The methods every scan of cdcflow's shares: no input, no expressions of its own, its
/// metrics in `self.metrics`, its properties in `self.properties`.
macro_rules! leaf {
    () => {
        fn properties(&self) -> &std::sync::Arc<datafusion::physical_plan::PlanProperties> {
            &self.properties
        }

        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            vec![]
        }

        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
            ) -> datafusion::error::Result<
                datafusion::common::tree_node::TreeNodeRecursion,
            >,
        ) -> datafusion::error::Result<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }

        fn with_new_children(
            self: std::sync::Arc<Self>,
            children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
        ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>
        {
            match children.is_empty() {
                true => Ok(self),
                false => Err(datafusion::error::DataFusionError::Internal(format!(
                    "{} takes no input",
                    self.name()
                ))),
            }
        }

        fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
            Some(self.metrics.clone_inner())
        }
    };
}

mod apply;
mod changes;
pub mod codec;
mod commit;
mod events;
mod groups;
mod route;
mod rows;

use std::sync::Arc;

use cdcflow_plan::autocdc::{AutoCdcNode, AutoCdcSpec, ORIGIN};
use datafusion::arrow::array::{DictionaryArray, RecordBatch, StringArray, UInt32Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use datafusion::common::DataFusionError;
use datafusion::datasource::provider_as_source;
use datafusion::execution::TaskContext;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, collect};
use datafusion::physical_plan::{Partitioning, PlanProperties};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

pub(crate) use apply::lost_published;
pub use apply::{Applied, ApplyTarget, AutoCdcApplyExec};
pub use changes::SliceSummary;
pub use commit::AutoCdcCommitExec;
pub use events::{AutoCdcEventsExec, EventChecks, oldest_commit_time};
pub use groups::{KeyGroupsExec, KeyGroupsTable};
pub use route::{AutoCdcRouteExec, ROUTE};
pub use rows::{SourceRowsExec, SourceRowsTable};

use crate::RunError;
use crate::cdc::engine::GroupedLoad;
use crate::cluster::Cluster;

/// How an AUTO CDC execution plan takes its input's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Parts {
    /// The batch whole, in one partition: it is counted and committed whole.
    #[default]
    One,
    /// A large first batch's key groups ([`KeyGroupsExec`]), `groups` partitions that
    /// share no key, of about `rows` source rows in all: each is made into events on
    /// its own, and the apply takes one after another.
    KeyGroups { groups: usize, rows: u64 },
    /// The batch's events in `slices` partitions by slice of their keys
    /// (`cdc/slice.rs`), dealt to `tasks` tasks (one, or one per worker), each with
    /// `slices / tasks` of them: each slice is applied on its own, and
    /// [`AutoCdcCommitExec`] commits what they wrote once.
    Slices { slices: usize, tasks: usize },
}

impl Parts {
    /// The distribution these parts need of the input.
    fn required(&self) -> datafusion::physical_plan::Distribution {
        use datafusion::physical_plan::Distribution;
        match self {
            Self::One => Distribution::SinglePartition,
            // The groups are the partitions as the scan made them.
            Self::KeyGroups { .. } | Self::Slices { .. } => Distribution::UnspecifiedDistribution,
        }
    }

    /// The key groups a plan's scan reads, if it is a [`KeyGroupsExec`].
    fn of_input(plan: &Arc<dyn ExecutionPlan>) -> Self {
        if let Some(scan) = plan.downcast_ref::<KeyGroupsExec>() {
            let load = scan.load();
            return Self::KeyGroups {
                groups: load.groups(),
                rows: load.rows,
            };
        }
        plan.children()
            .into_iter()
            .map(Self::of_input)
            .find(|p| *p != Self::One)
            .unwrap_or(Self::One)
    }

    /// Appended to a plan's line in `explain`.
    fn fmt_as(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Self::One => Ok(()),
            Self::KeyGroups { groups, .. } => write!(f, " key_groups={groups}"),
            Self::Slices { slices, tasks: 1 } => write!(f, " slices={slices}"),
            Self::Slices { slices, tasks } => write!(f, " slices={slices} tasks={tasks}"),
        }
    }

    /// The partitions of the plan's output: the groups stay apart.
    fn partitioning(&self) -> Partitioning {
        match self {
            Self::One => Partitioning::UnknownPartitioning(1),
            Self::KeyGroups { groups, .. } => Partitioning::UnknownPartitioning(*groups),
            Self::Slices { slices, tasks } => {
                Partitioning::UnknownPartitioning((*slices / (*tasks).max(1)).max(1))
            }
        }
    }
}

/// The one input among a plan's new `children` (`with_new_children`).
fn only_child(
    plan: &str,
    mut children: Vec<Arc<dyn ExecutionPlan>>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    match (children.pop(), children.is_empty()) {
        (Some(input), true) => Ok(input),
        _ => Err(DataFusionError::Internal(format!("{plan} takes one input"))),
    }
}

/// Fails unless `partition` is 0: `plan` has one partition.
fn only_partition(plan: &str, partition: usize) -> datafusion::error::Result<()> {
    match partition {
        0 => Ok(()),
        _ => Err(DataFusionError::Internal(format!(
            "{plan} has one partition, not {partition}"
        ))),
    }
}

/// The properties of a bounded plan with `schema` and `partitioning`.
fn plan_properties(
    schema: SchemaRef,
    partitioning: Partitioning,
    emission: EmissionType,
) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        partitioning,
        emission,
        Boundedness::Bounded,
    ))
}

/// Source rows, each batch with the name of what it was read from.
pub type Sourced = Vec<(String, RecordBatch)>;

/// Lowers an [`AutoCdcNode`] into [`AutoCdcApplyExec`] over [`AutoCdcEventsExec`] over
/// the node's physical input (the event projection); split into `slices` when more
/// than one ([`split`]).
#[derive(Debug)]
pub struct AutoCdcPlanner {
    checks: Arc<EventChecks>,
    target: Arc<ApplyTarget>,
    slices: usize,
    /// The slices run on workers, one task each.
    on_workers: bool,
}

#[async_trait::async_trait]
impl ExtensionPlanner for AutoCdcPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn datafusion::catalog::Session,
        _planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> datafusion::error::Result<Option<Arc<dyn ExecutionPlan>>> {
        if node.as_any().downcast_ref::<AutoCdcNode>().is_none() {
            return Ok(None);
        }
        let [input] = physical_inputs else {
            return Err(DataFusionError::Internal(
                "an AUTO CDC node has one input".into(),
            ));
        };
        let parts = Parts::of_input(input);
        let events = Arc::new(AutoCdcEventsExec::new(
            Arc::clone(input),
            Arc::clone(&self.checks),
            parts,
        ));
        Ok(Some(Arc::new(AutoCdcApplyExec::new(
            events,
            Arc::clone(&self.target),
            parts,
        ))))
    }
}

/// DataFusion's physical planner with [`AutoCdcPlanner`].
#[derive(Debug)]
struct AutoCdcQueryPlanner(Arc<AutoCdcPlanner>);

#[async_trait::async_trait]
impl QueryPlanner for AutoCdcQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let lowering: Arc<dyn ExtensionPlanner + Send + Sync> =
            Arc::<AutoCdcPlanner>::clone(&self.0);
        let plan = DefaultPhysicalPlanner::with_extension_planners(vec![lowering])
            .create_physical_plan(logical_plan, session)
            .await?;
        // After DataFusion's optimizers, which would take out a repartitioning that
        // no node of theirs asks for.
        match self.0.slices {
            0 | 1 => Ok(plan),
            slices => split(plan, slices, self.0.on_workers),
        }
    }
}

/// `plan` with its apply split into `slices` slices of the batch's keys:
///
/// ```text
/// AutoCdcCommitExec: the slices' changes committed once
///   CoalescePartitionsExec
///     AutoCdcApplyExec slices=S: slice s applies its keys' events, writes, returns changes
///       RepartitionExec: Hash(_cdc_route, S)
///         AutoCdcRouteExec: each event's route value, by its key's bucket
///           AutoCdcEventsExec …
/// ```
///
/// `on_workers`, each slice is a task on a worker: the exchange and the gathering are
/// datafusion-distributed's network boundaries (`cluster/`), and the commit stays in
/// this process.
fn split(
    plan: Arc<dyn ExecutionPlan>,
    slices: usize,
    on_workers: bool,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_plan::repartition::RepartitionExec;
    plan.transform_down(|node| {
        let Some(apply) = node.downcast_ref::<AutoCdcApplyExec>() else {
            return Ok(Transformed::no(node));
        };
        let [events] = &apply.children()[..] else {
            return Ok(Transformed::no(node));
        };
        if apply.parts() != Parts::One {
            return Ok(Transformed::no(node));
        }
        let target = Arc::clone(apply.target());
        let route = Arc::new(AutoCdcRouteExec::new(
            Arc::clone(events),
            target.rules.keys.clone(),
            route::routes(slices)?,
        ));
        let column = Column::new_with_schema(ROUTE, &route.schema())?;
        // On workers the exchange deals the partitions to the tasks: one each.
        let tasks = if on_workers { slices } else { 1 };
        let mut routed: Arc<dyn ExecutionPlan> = Arc::new(RepartitionExec::try_new(
            route,
            Partitioning::Hash(vec![Arc::new(column)], slices / tasks),
        )?);
        if on_workers {
            routed = crate::cluster::shuffle(routed)?;
        }
        let mut sliced: Arc<dyn ExecutionPlan> = Arc::new(AutoCdcApplyExec::new(
            routed,
            Arc::clone(&target),
            Parts::Slices { slices, tasks },
        ));
        if on_workers {
            sliced = crate::cluster::gather(sliced, tasks)?;
        }
        let gathered = Arc::new(CoalescePartitionsExec::new(sliced));
        let commit: Arc<dyn ExecutionPlan> =
            Arc::new(AutoCdcCommitExec::new(gathered, target, slices));
        Ok(Transformed::new(commit, true, TreeNodeRecursion::Jump))
    })
    .map(|t| t.data)
}

/// A session with the dialect's functions whose planner lowers AUTO CDC nodes with
/// `lowering`. DataFusion does not deal the batch's rows round-robin between partitions:
/// over key groups the groups would share keys, and over a batch's rows the events
/// gather in one partition anyway (the projection is cheap next to the apply, and each
/// extra partition ran on its own task, holding its own buffers).
fn session(lowering: Option<AutoCdcPlanner>) -> SessionState {
    let state = cdcflow_plan::functions::session_context().state();
    let mut config = state.config().clone();
    config
        .options_mut()
        .optimizer
        .enable_round_robin_repartition = false;
    let builder = SessionStateBuilder::new_from_existing(state).with_config(config);
    match lowering {
        Some(l) => builder
            .with_query_planner(Arc::new(AutoCdcQueryPlanner(Arc::new(l))))
            .build(),
        None => builder.build(),
    }
}

/// What a batch's plan scans.
pub enum BatchSource {
    /// The batch's source rows, read.
    Rows(Sourced),
    /// A large first batch, read a group of its keys at a time (`load.rs`).
    KeyGroups(GroupedLoad),
}

impl BatchSource {
    /// The source rows the batch reads.
    pub fn rows(&self) -> u64 {
        match self {
            Self::Rows(rows) => rows.iter().map(|(_, b)| b.num_rows() as u64).sum(),
            Self::KeyGroups(load) => load.rows,
        }
    }
}

/// A batch's physical plan and the task context of the session that planned it.
pub struct BatchPlan {
    pub plan: Arc<dyn ExecutionPlan>,
    pub task: Arc<TaskContext>,
}

impl BatchPlan {
    /// Runs the plan; its input is let go as the plan consumes it.
    pub async fn collect(self) -> Result<Vec<RecordBatch>, RunError> {
        Ok(collect(self.plan, self.task).await?)
    }
}

/// The physical plan of one batch of `spec`'s flow over `input` (of `source` schema):
/// the planner's plan over it, lowered to apply `target` and commit it.
pub async fn apply_plan(
    spec: &Arc<AutoCdcSpec>,
    source: &SchemaRef,
    input: BatchSource,
    target: ApplyTarget,
    cluster: Option<&Cluster>,
) -> Result<BatchPlan, RunError> {
    let rules = Arc::clone(&target.rules);
    let checks = Arc::new(EventChecks::of(spec, rules, target.now_micros));
    let parts = match &input {
        BatchSource::Rows(_) => Parts::One,
        BatchSource::KeyGroups(load) => Parts::KeyGroups {
            groups: load.groups(),
            rows: load.rows,
        },
    };
    let mut target = target;
    if let Some(cluster) = cluster {
        target.slices = cluster.slices();
    }
    let slices = target.slices_for(spec, parts).await?;
    if slices > 1 {
        target.pin();
    }
    let on_workers = slices > 1 && cluster.is_some();
    let lowering = AutoCdcPlanner {
        checks,
        target: Arc::new(target),
        slices,
        on_workers,
    };
    let state = match (on_workers, cluster) {
        (true, Some(cluster)) => crate::cluster::distribute(session(Some(lowering)), cluster)?,
        _ => session(Some(lowering)),
    };
    let scan: Arc<dyn datafusion::catalog::TableProvider> = match input {
        BatchSource::Rows(rows) => sourced(source, rows)?,
        BatchSource::KeyGroups(load) => Arc::new(KeyGroupsTable::new(load)),
    };
    let logical = AutoCdcNode::plan(Arc::clone(spec), provider_as_source(scan))?;
    Ok(BatchPlan {
        plan: state.create_physical_plan(&logical).await?,
        task: state.task_ctx(),
    })
}

/// Runs the inputs of a plan of [`apply_plan`], not the apply: the batch's events are
/// made (and their metrics counted), and nothing is written.
pub async fn make_events(plan: &BatchPlan) -> Result<(), RunError> {
    if let Some(events) = events_of(&plan.plan) {
        collect(events, Arc::clone(&plan.task)).await?;
    }
    Ok(())
}

/// The node of `plan` that makes its events.
fn events_of(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    if plan.downcast_ref::<AutoCdcEventsExec>().is_some() {
        return Some(Arc::clone(plan));
    }
    plan.children().into_iter().find_map(events_of)
}

/// Runs a plan of [`apply_plan`]: what the apply did.
pub async fn run_apply(plan: BatchPlan) -> Result<Applied, RunError> {
    Applied::from_batches(&plan.collect().await?)
}

/// The physical plan that turns `rows` (of `source` schema) into `spec`'s checked
/// events under `checks`: the node's input planned, under [`AutoCdcEventsExec`]. Run
/// it with [`BatchPlan::collect`]: the events come in parts as the source rows do
/// (columns that pass through unchanged share the source rows' buffers).
pub async fn events_plan(
    spec: &Arc<AutoCdcSpec>,
    checks: EventChecks,
    source: &SchemaRef,
    rows: Sourced,
) -> Result<BatchPlan, RunError> {
    let logical = AutoCdcNode::plan(Arc::clone(spec), provider_as_source(sourced(source, rows)?))?;
    let node = AutoCdcNode::of(&logical)
        .ok_or_else(|| RunError::internal("an AUTO CDC plan without its node"))?;
    let state = session(None);
    let mut input = state.create_physical_plan(&node.input).await?;
    if input.output_partitioning().partition_count() > 1 {
        input = Arc::new(CoalescePartitionsExec::new(input));
    }
    Ok(BatchPlan {
        plan: Arc::new(AutoCdcEventsExec::new(input, Arc::new(checks), Parts::One)),
        task: state.task_ctx(),
    })
}

/// The batch's rows as one table, each row with the name of what it was read from in
/// [`ORIGIN`]; its scan hands them over once ([`SourceRowsExec`]).
fn sourced(source: &SchemaRef, rows: Sourced) -> Result<Arc<SourceRowsTable>, RunError> {
    let schema = origin_schema(source);
    let mut batches = Vec::with_capacity(rows.len());
    for (origin, b) in rows {
        batches.push(with_origin(&schema, origin, &b)?);
    }
    Ok(Arc::new(SourceRowsTable::new(schema, batches)))
}

/// `batch` of a source's rows with the name of what it was read from in [`ORIGIN`] (a
/// dictionary: one name per part, four bytes a row), as `schema` ([`origin_schema`]).
fn with_origin(
    schema: &SchemaRef,
    origin: String,
    batch: &RecordBatch,
) -> Result<RecordBatch, RunError> {
    let keys = UInt32Array::from_value(0, batch.num_rows());
    let names = Arc::new(StringArray::from(vec![origin]));
    let origin: DictionaryArray<UInt32Type> = DictionaryArray::try_new(keys, names)?;
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(origin));
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// `source` with [`ORIGIN`].
fn origin_schema(source: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = source.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(
        ORIGIN,
        DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8)),
        false,
    ));
    Arc::new(Schema::new(fields))
}
