//! `AutoCdcApplyExec`: a batch's events applied to the target's state and published
//! table (by the cheapest way the tables allow, `staging.rs`, else in memory), both
//! tables committed, and one row out that says what the apply did
//! ([`cdcflow_plan::autocdc::applied_schema`]), as a DML statement returns its count.
//! A large first batch comes as key groups (`groups.rs`), taken one after another.

use std::fmt;
use std::sync::{Arc, Mutex};

use cdcflow_plan::autocdc::applied_schema;
use cdcflow_plan::location::Location;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, Time};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use futures::TryStreamExt;

use super::events::{external, oldest_commit_time};
use super::{Parts, plan_properties};
use crate::RunError;
use crate::cdc::engine::{self, Load, PARTITION_ROWS, Staging, Streamed, Targets};
use crate::cdc::kernel::{self, Rules, Visible};
use crate::cdc::rules::ApplyMetrics;
use crate::delta::{self, Commit, Table};

/// Where a batch is applied: the rules, the target's two tables and what their commits
/// record. All of it is data (`codec.rs` sends it); the tables a run already opened
/// come along so they are not opened twice.
#[derive(Debug)]
pub struct ApplyTarget {
    pub rules: Arc<Rules>,
    /// The target dataset, for messages.
    pub name: String,
    pub state_at: Location,
    pub public_at: Location,
    pub state_commit: Commit,
    pub public_commit: Commit,
    pub now_micros: i64,
    /// The state and the published table, as the run opened them; taken by the first
    /// execution, after which they are opened from their folders.
    pub opened: Mutex<Option<(Table, Table)>>,
}

impl ApplyTarget {
    /// The target `name` of `rules`, its (state, published) tables as a run opened them,
    /// and their commits.
    pub fn of_opened(
        rules: Rules,
        name: &str,
        (state, public): (Table, Table),
        (state_commit, public_commit): (Commit, Commit),
        now_micros: i64,
    ) -> Self {
        Self {
            rules: Arc::new(rules),
            name: name.to_string(),
            state_at: state.at.clone(),
            public_at: public.at.clone(),
            state_commit,
            public_commit,
            now_micros,
            opened: Mutex::new(Some((state, public))),
        }
    }

    async fn tables(&self) -> Result<(Table, Table), RunError> {
        let opened = match self.opened.lock() {
            Ok(mut o) => o.take(),
            Err(_) => None,
        };
        match opened {
            Some(tables) => Ok(tables),
            None => Ok((
                Table::open(&self.state_at).await?,
                Table::open(&self.public_at).await?,
            )),
        }
    }

    /// Where the commits of `state` and `public` go.
    fn targets<'t>(&'t self, state: &'t Table, public: &'t Table) -> Targets<'t> {
        Targets {
            state,
            state_commit: &self.state_commit,
            public,
            public_commit: &self.public_commit,
        }
    }

    /// Applies `events`, commits both tables, and says what it did.
    async fn apply(&self, events: Vec<RecordBatch>) -> Result<Applied, RunError> {
        let (state, public) = self.tables().await?;
        self.apply_to(&self.targets(&state, &public), events).await
    }

    /// Applies a first batch's `groups` key groups, the partitions of `input` (about
    /// `rows` source rows in all), one group after another into the same files
    /// (`partitioned.rs`), and commits both tables.
    async fn apply_groups(
        &self,
        input: &Arc<dyn ExecutionPlan>,
        context: Arc<TaskContext>,
        groups: usize,
        rows: u64,
    ) -> Result<Applied, RunError> {
        let (state, public) = self.tables().await?;
        let targets = self.targets(&state, &public);
        let rules = self.rules.as_ref();
        let rows = usize::try_from(rows).unwrap_or(usize::MAX);
        let Some(mut load) = Load::new(rules, &targets, rows).await? else {
            // Tables only deltalake's write operation writes: all groups at once.
            let mut events = Vec::new();
            for group in 0..groups {
                events.extend(group_events(input, &context, group).await?);
            }
            return self.apply_to(&targets, events).await;
        };
        let mut oldest_change: Option<i64> = None;
        for group in 0..groups {
            let events = group_events(input, &context, group).await?;
            if let Some(o) = oldest_commit_time(&events) {
                oldest_change = Some(oldest_change.map_or(o, |c| c.min(o)));
            }
            load.add(&events, self.now_micros, PARTITION_ROWS).await?;
        }
        let done = load.finish().await?;
        let applied = Applied {
            metrics: done.metrics,
            rows_written: done.public_rows as u64,
            oldest_change,
            note: None,
        };
        done.commit(&targets).await?;
        Ok(applied)
    }

    /// Applies `events` to `targets`, commits both, and says what it did.
    async fn apply_to(
        &self,
        targets: &Targets<'_>,
        events: Vec<RecordBatch>,
    ) -> Result<Applied, RunError> {
        let oldest_change = oldest_commit_time(&events);
        let (done, note) = stage(self, targets, events).await?;
        let applied = Applied {
            metrics: done.metrics,
            rows_written: done.public_rows as u64,
            oldest_change,
            note,
        };
        done.commit(targets).await?;
        Ok(applied)
    }
}

/// The events of key group `group`, partition `group` of `input`.
async fn group_events(
    input: &Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
    group: usize,
) -> Result<Vec<RecordBatch>, RunError> {
    let events = input.execute(group, Arc::clone(context))?;
    Ok(events.try_collect().await?)
}

/// What applying a batch did: the row [`AutoCdcApplyExec`] returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    pub metrics: ApplyMetrics,
    /// Rows of the new published table written by the batch.
    pub rows_written: u64,
    /// The earliest source commit time among the events ([`oldest_commit_time`]).
    pub oldest_change: Option<i64>,
    /// A warning for the user (the columns the batch added to the published table).
    pub note: Option<String>,
}

impl Applied {
    fn counts(&self) -> [u64; 11] {
        let m = &self.metrics;
        [
            m.events,
            m.upserted,
            m.deleted,
            m.late,
            m.late_applied,
            m.late_dropped,
            m.duplicates,
            m.late_after_gc,
            m.truncated,
            m.tombstones_collected,
            self.rows_written,
        ]
    }

    /// As the one row of [`applied_schema`].
    pub fn to_batch(&self) -> Result<RecordBatch, RunError> {
        let mut columns: Vec<ArrayRef> = self
            .counts()
            .iter()
            .map(|&n| Arc::new(UInt64Array::from(vec![n])) as ArrayRef)
            .collect();
        columns.push(Arc::new(Int64Array::from(vec![self.oldest_change])));
        columns.push(Arc::new(StringArray::from(vec![self.note.clone()])));
        Ok(RecordBatch::try_new(applied_schema(), columns)?)
    }

    /// Read back from the rows of [`applied_schema`] (one, or one per part).
    pub fn from_batches(batches: &[RecordBatch]) -> Result<Self, RunError> {
        use datafusion::arrow::array::{Array, AsArray};
        use datafusion::arrow::datatypes::{Int64Type, UInt64Type};
        let mut out = Self::default();
        for b in batches {
            if b.num_columns() != applied_schema().fields().len() {
                return Err(RunError::internal("an AUTO CDC result of another shape"));
            }
            for row in 0..b.num_rows() {
                let n = |c: usize| b.column(c).as_primitive::<UInt64Type>().value(row);
                let part = ApplyMetrics {
                    events: n(0),
                    upserted: n(1),
                    deleted: n(2),
                    late: n(3),
                    late_applied: n(4),
                    late_dropped: n(5),
                    duplicates: n(6),
                    late_after_gc: n(7),
                    truncated: n(8),
                    tombstones_collected: n(9),
                };
                out.metrics.add(&part);
                out.rows_written += n(10);
                let oldest = b.column(11).as_primitive::<Int64Type>();
                if !oldest.is_null(row) {
                    let v = oldest.value(row);
                    out.oldest_change = Some(out.oldest_change.map_or(v, |o| o.min(v)));
                }
                let note = b.column(12).as_string::<i32>();
                if !note.is_null(row) {
                    out.note = Some(note.value(row).to_string());
                }
            }
        }
        Ok(out)
    }
}

/// The batch applied and both tables' files staged, by the cheapest way the tables
/// allow (`staging.rs`), else in memory; with the warning the in-memory way has.
async fn stage(
    target: &ApplyTarget,
    targets: &Targets<'_>,
    events: Vec<RecordBatch>,
) -> Result<(Streamed, Option<String>), RunError> {
    let rules = target.rules.as_ref();
    let now = target.now_micros;
    let events = match engine::stage(rules, targets, events, now).await? {
        Staging::Staged(done) => return Ok((*done, None)),
        Staging::InMemory(events) => events,
    };
    let (state, public) = (targets.state, targets.public);
    let stored = state.read_batches(&rules.state_schema()).await?;
    let published = public.read_batches(&rules.public_schema()).await?;
    let visible = match state.exists() && !public.exists() {
        true if rules.narrow_state() => return Err(lost_published(&target.name)),
        true => Visible::Recompute,
        false => Visible::Rows(published),
    };
    let applied: kernel::Applied = crate::cdc::apply(rules, stored, visible, &events, now)?;
    let note = delta::added_columns(
        public.arrow_schema().as_ref(),
        &rules.public_schema(),
        &target.name,
    );
    Ok((Streamed::staged(applied, rules, targets).await?, note))
}

/// The failure when the published table is gone and the state cannot rebuild it.
pub(crate) fn lost_published(target: &str) -> RunError {
    RunError::input(format!(
        "the published table `{target}` is missing or behind its AUTO CDC state, which keeps no values to rebuild it from"
    ))
    .with_help(format!(
        "run `cdcflow run --full-refresh {target}` to rebuild it from its sources"
    ))
}

/// The execution plan of [`ApplyTarget`] over a batch's events.
#[derive(Debug)]
pub struct AutoCdcApplyExec {
    input: Arc<dyn ExecutionPlan>,
    target: Arc<ApplyTarget>,
    parts: Parts,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl AutoCdcApplyExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, target: Arc<ApplyTarget>, parts: Parts) -> Self {
        Self {
            input,
            target,
            parts,
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

    pub fn parts(&self) -> Parts {
        self.parts
    }
}

impl DisplayAs for AutoCdcApplyExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let rules = &self.target.rules;
        write!(
            f,
            "AutoCdcApplyExec: target={} scd_type={} state={} published={}",
            self.target.name,
            if rules.scd2 { 2 } else { 1 },
            self.target.state_at,
            self.target.public_at
        )?;
        self.parts.fmt_as(f)
    }
}

impl ExecutionPlan for AutoCdcApplyExec {
    one_input!();

    fn name(&self) -> &'static str {
        "AutoCdcApplyExec"
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children
            .pop()
            .ok_or_else(|| DataFusionError::Internal("AutoCdcApplyExec takes one input".into()))?;
        Ok(Arc::new(Self::new(
            input,
            Arc::clone(&self.target),
            self.parts,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        super::only_partition(self.name(), partition)?;
        let target = Arc::clone(&self.target);
        let counters = Counters::new(&self.metrics);
        let (input, parts) = (Arc::clone(&self.input), self.parts);
        let given = input.output_partitioning().partition_count();
        if let Parts::KeyGroups { groups, .. } = parts
            && given != groups
        {
            // Rows dealt between the groups would break them: keys would be shared.
            return Err(DataFusionError::Internal(format!(
                "AutoCdcApplyExec expected {groups} key groups, its input has {given} partitions"
            )));
        }
        let one = futures::stream::once(async move {
            let applied = match parts {
                Parts::One => {
                    let events: Vec<RecordBatch> = input.execute(0, context)?.try_collect().await?;
                    let _timer = counters.apply_time.timer();
                    target.apply(events).await
                }
                Parts::KeyGroups { groups, rows } => {
                    // The groups' events are made as they are applied: timed together.
                    let _timer = counters.apply_time.timer();
                    target.apply_groups(&input, context, groups, rows).await
                }
            }
            .map_err(external)?;
            counters.record(&applied);
            applied.to_batch().map_err(external)
        });
        let schema: SchemaRef = applied_schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, one)))
    }
}

/// The apply's counts and time as the plan's metrics (`cdcflow explain --analyze` shows
/// those of the last run's batch).
struct Counters {
    /// Wall time of applying and committing both tables.
    apply_time: Time,
    upserted: Count,
    deleted: Count,
    late: Count,
    duplicates: Count,
    rows_written: Count,
}

impl Counters {
    fn new(metrics: &ExecutionPlanMetricsSet) -> Self {
        let count = |name: &'static str| MetricBuilder::new(metrics).counter(name, 0);
        Self {
            apply_time: MetricBuilder::new(metrics).subset_time("apply_time", 0),
            upserted: count("upserted"),
            deleted: count("deleted"),
            late: count("late"),
            duplicates: count("duplicates"),
            rows_written: count("rows_written"),
        }
    }

    fn record(&self, applied: &Applied) {
        let m = &applied.metrics;
        let n = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        self.upserted.add(n(m.upserted));
        self.deleted.add(n(m.deleted));
        self.late.add(n(m.late));
        self.duplicates.add(n(m.duplicates));
        self.rows_written.add(n(applied.rows_written));
    }
}
