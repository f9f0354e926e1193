//! `AutoCdcApplyExec`: a batch's events applied to the target's state and published
//! table (by the cheapest way the tables allow, `staging.rs`, else in memory), both
//! tables committed, and one row out that says what the apply did
//! ([`cdcflow_plan::autocdc::applied_schema`]), as a DML statement returns its count.
//! A large first batch comes as key groups (`groups.rs`), taken one after another.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};

use cdcflow_plan::autocdc::{AutoCdcSpec, applied_schema};
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

use super::changes::{Gathered, SliceSummary, TableChanges, changes_schema, this_worker, to_rows};
use super::events::{external, oldest_commit_time};
use super::{Parts, plan_properties};
use crate::RunError;
use crate::cdc::engine::{self, Load, PARTITION_ROWS, Staging, Streamed, Targets, merged};
use crate::cdc::kernel::{self, Rules, Visible};
use crate::cdc::rules::ApplyMetrics;
use crate::cdc::slice::{Slice, buckets, splittable};
use crate::delta::{self, Commit, Mode, Staged, Table, merge};

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
    /// execution, after which they are opened from their folders. A batch applied in
    /// slices shares them instead: every slice and the commit see the same versions.
    pub opened: Mutex<Option<(Table, Table)>>,
    /// Into how many slices of its keys a batch may be split (`cdc/slice.rs`); 1 keeps
    /// every batch whole. Whether a batch is split is decided at planning
    /// ([`ApplyTarget::slices_for`]).
    pub slices: usize,
    /// The (state, published) versions a split batch was planned on: wherever its
    /// slices and commit run, they open the tables at these ([`ApplyTarget::pin`]).
    pub versions: Option<(i64, i64)>,
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
            slices: 1,
            versions: None,
        }
    }

    /// Pins the versions of the tables as opened for planning ([`ApplyTarget::versions`]).
    pub fn pin(&mut self) {
        let versions = match self.opened.lock() {
            Ok(opened) => opened
                .as_ref()
                .and_then(|(state, public)| Some((state.version()?, public.version()?))),
            Err(_) => None,
        };
        self.versions = versions;
    }

    /// Into how many slices a batch of `spec`'s flow is split: [`ApplyTarget::slices`]
    /// when the batch can be, else 1. It can when both tables take merge-on-write (they
    /// exist, keep their columns and take deletion vectors), the flow has no APPLY AS
    /// TRUNCATE (a TRUNCATE concerns every key) and no computed column, and the batch is
    /// not a large first batch read in key groups. Known before anything is written.
    pub async fn slices_for(&self, spec: &AutoCdcSpec, parts: Parts) -> Result<usize, RunError> {
        if self.slices <= 1 || parts != Parts::One || !splittable(spec, &self.rules) {
            return Ok(1);
        }
        let (state, public) = self.shared_tables().await?;
        let mergeable = merged::mergeable(&self.rules, &self.targets(&state, &public));
        Ok(if mergeable { self.slices } else { 1 })
    }

    /// The tables as the first slice (or the planning) opened them, shared by every
    /// slice of the batch and its commit.
    async fn shared_tables(&self) -> Result<(Table, Table), RunError> {
        if let Ok(opened) = self.opened.lock()
            && let Some((state, public)) = opened.as_ref()
        {
            return Ok((state.clone(), public.clone()));
        }
        let tables = match self.versions {
            Some((state, public)) => (
                Table::open_at(&self.state_at, state).await?,
                Table::open_at(&self.public_at, public).await?,
            ),
            None => (
                Table::open(&self.state_at).await?,
                Table::open(&self.public_at).await?,
            ),
        };
        if let Ok(mut opened) = self.opened.lock() {
            match opened.as_ref() {
                Some((state, public)) => return Ok((state.clone(), public.clone())),
                None => *opened = Some(tables.clone()),
            }
        }
        Ok(tables)
    }

    /// Applies `events`, those of `slice` of the batch's keys, by merge-on-write
    /// against the shared tables, writing files but committing nothing: what it
    /// changed, as rows for the batch's commit (`changes.rs`).
    async fn apply_slice(
        &self,
        slice: Slice,
        events: Vec<RecordBatch>,
    ) -> Result<RecordBatch, RunError> {
        crate::failpoint::hit(&format!("apply-task-start:{}", self.name));
        let started = std::time::Instant::now();
        let (state, public) = self.shared_tables().await?;
        let targets = self.targets(&state, &public);
        let rules = self.rules.as_ref();
        let oldest_change = oldest_commit_time(&events);
        let events = engine::concat_parts(&rules.event_schema(), events)?;
        check_routed(rules, &events, slice)?;
        let Some(prepared) = merged::prepare(rules, &targets, &events, self.now_micros)? else {
            return Err(RunError::internal(format!(
                "slice {} of a batch of `{}` cannot be applied by merge-on-write",
                slice.index, self.name
            )));
        };
        let changes = prepared.apply_slice(&targets, events, slice).await?;
        crate::failpoint::hit(&format!("apply-task:{}", self.name));
        let summary = SliceSummary {
            slice: slice.index,
            worker: this_worker(),
            metrics: changes.metrics,
            files_read: changes.files_read,
            oldest_change,
            millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        to_rows(slice, changes, &summary)
    }

    /// Commits the `gathered` changes of every slice of a batch: each table's
    /// deletions by file united into one deletion vector per file, the newest marker
    /// of each kind written, the published table committed, then the state.
    pub(super) async fn commit_slices(&self, gathered: Gathered) -> Result<Applied, RunError> {
        let (state, public) = self.shared_tables().await?;
        let targets = self.targets(&state, &public);
        let rules = self.rules.as_ref();
        let (state_schema, public_schema) = (rules.state_schema(), rules.public_schema());
        let mut metrics = ApplyMetrics::default();
        let mut oldest_change: Option<i64> = None;
        for s in &gathered.summaries {
            metrics.add(&s.metrics);
            if let Some(o) = s.oldest_change {
                oldest_change = Some(oldest_change.map_or(o, |c| c.min(o)));
            }
        }
        let mut state_changes = gathered.state;
        let markers = engine::newest_markers(&state_schema, &gathered.markers)?;
        state_changes
            .added
            .extend(merge::write_files(&state, &state_schema, markers, &self.state_commit).await?);
        let (public_staged, public_rows) =
            stage_gathered(&public, &public_schema, gathered.public).await?;
        let (state_staged, _) = stage_gathered(&state, &state_schema, state_changes).await?;
        let done = Streamed {
            public: public_staged,
            state: state_staged,
            metrics,
            public_rows: usize::try_from(public_rows).unwrap_or(usize::MAX),
            mode: Mode::Merge,
        };
        let applied = Applied {
            metrics,
            rows_written: public_rows,
            oldest_change,
            note: None,
            slices: gathered.summaries,
        };
        done.commit(&targets).await?;
        Ok(applied)
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
            slices: vec![],
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
            slices: vec![],
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
    /// A batch applied in slices: each slice's task.
    pub slices: Vec<SliceSummary>,
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
        let slices = match self.slices.is_empty() {
            true => None,
            false => Some(
                serde_json::to_string(&self.slices)
                    .map_err(|e| RunError::internal(format!("a batch's slices: {e}")))?,
            ),
        };
        columns.push(Arc::new(StringArray::from(vec![slices])));
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
                let slices = b.column(13).as_string::<i32>();
                if !slices.is_null(row) {
                    let tasks: Vec<SliceSummary> = serde_json::from_str(slices.value(row))
                        .map_err(|e| RunError::internal(format!("a batch's slices: {e}")))?;
                    out.slices.extend(tasks);
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

/// Stages one table's changes from every slice: the deleted positions mapped to the
/// table's files (all of which the slices read at this version) and the added files;
/// with the table's rows once committed.
async fn stage_gathered(
    table: &Table,
    schema: &SchemaRef,
    changes: TableChanges,
) -> Result<(Staged, u64), RunError> {
    table.fetch_vectors().await?;
    let files = table.files()?;
    let index: HashMap<&str, usize> = files
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.log_path().map(|p| (p, i)))
        .collect();
    let mut deleted = BTreeMap::new();
    for (path, positions) in changes.deleted {
        let Some(&i) = index.get(path.as_str()) else {
            return Err(RunError::internal(format!(
                "{}: a slice deleted rows of `{path}`, not a file of the version it read",
                table.dir.display()
            )));
        };
        deleted.insert(i, positions.into_iter().collect::<Vec<u64>>());
    }
    let rows = merge::rows_after(&files, &deleted, &changes.added)?;
    let staged = merge::stage_written(table, &files, deleted, schema, changes.added).await?;
    Ok((staged, rows))
}

/// Fails unless every one of `events` has a key of `slice`: an event routed to another
/// slice's apply would be decided without its key's stored rows.
fn check_routed(rules: &Rules, events: &RecordBatch, slice: Slice) -> Result<(), RunError> {
    let keys: Vec<_> = rules
        .keys
        .iter()
        .map(|&k| Arc::clone(events.column(k)))
        .collect();
    let strays = buckets(&keys)?
        .into_iter()
        .filter(|&b| !slice.owns(b))
        .count();
    match strays {
        0 => Ok(()),
        n => Err(RunError::internal(format!(
            "{n} event(s) were routed to slice {} of {} whose keys are another slice's",
            slice.index, slice.count
        ))),
    }
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
                match parts {
                    Parts::Slices { .. } => changes_schema(),
                    _ => applied_schema(),
                },
                match parts {
                    Parts::Slices { .. } => parts.partitioning(),
                    _ => Partitioning::UnknownPartitioning(1),
                },
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

impl AutoCdcApplyExec {
    /// Applies `slice` of the batch's keys: its events are partition `slice.index` of
    /// the input, with their route column last (`route.rs`), dropped here.
    fn execute_slice(
        &self,
        slice: Slice,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if slice.index >= slice.count {
            return Err(DataFusionError::Internal(format!(
                "AutoCdcApplyExec has {} slices, not {}",
                slice.count, slice.index
            )));
        }
        let target = Arc::clone(&self.target);
        let input = Arc::clone(&self.input);
        let apply_time = MetricBuilder::new(&self.metrics).subset_time("apply_time", partition);
        let one = futures::stream::once(async move {
            let routed: Vec<RecordBatch> = input.execute(partition, context)?.try_collect().await?;
            let _timer = apply_time.timer();
            let events = routed
                .iter()
                .map(|b| {
                    let without_route: Vec<usize> = (0..b.num_columns() - 1).collect();
                    b.project(&without_route)
                        .and_then(|p| p.with_schema(target.rules.event_schema()))
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            target.apply_slice(slice, events).await.map_err(external)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            changes_schema(),
            one,
        )))
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
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = super::only_child(self.name(), children)?;
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
        if let Parts::Slices { slices, tasks } = self.parts {
            // Each task holds `slices / tasks` of them, in order.
            let (task, _) = crate::cluster::task_of(&context);
            let index = task * (slices / tasks.max(1)) + partition;
            return self.execute_slice(
                Slice {
                    index,
                    count: slices,
                },
                partition,
                context,
            );
        }
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
                Parts::Slices { .. } => Err(RunError::internal("a slice applied whole")),
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
