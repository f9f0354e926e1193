//! One batch of an AUTO CDC flow: read what the source appended, turn it into events,
//! apply them to the target's state, and commit the published table, then the state.
//!
//! Both commits carry the flow's transaction id and batch number, and the state's is the
//! one the checkpoint trusts. A crash between the two commits leaves the published table
//! one batch ahead: the batch is applied again to the older state, which gives the same
//! rows (see `touched.rs`). A published table behind its state (left
//! by a version that committed both at once) is derived from the state again where the
//! state keeps values.

use std::sync::Arc;

use cdcflow_plan::DatasetKind;
use cdcflow_plan::autocdc::AutoCdcSpec;
use cdcflow_plan::planner::Planner;
use cdcflow_plan::stored_shape::{self, Shape};
use cdcflow_plan::table_properties::DELETION_VECTORS;
use cdcflow_plan::{Dataset, Flow, Input, Pipeline};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use super::engine::GroupedLoad;
use super::exec::{self, BatchSource};
use super::kernel::{Rules, Visible};
use super::rules_for;
use crate::checkpoint::{Offsets, Processed};
use crate::context::RunContext;
use crate::delta::{self, Commit, Mode, Operation, Table};
use crate::inputs::BatchInputs;
use crate::report::{FlowOutcome, FlowReport};
use crate::{RunError, layout};

fn dataset<'p>(pipeline: &'p Pipeline, name: &str) -> Result<&'p Dataset, RunError> {
    pipeline
        .dataset(name)
        .ok_or_else(|| RunError::input(format!("unknown dataset `{name}`")))
}

pub(crate) async fn run(
    rc: &RunContext,
    flow: &Flow,
    spec: &Arc<AutoCdcSpec>,
    report: &mut FlowReport,
) -> Result<(), RunError> {
    let Prepared {
        target,
        source,
        source_schema,
        rules,
    } = prepare(rc, flow, spec)?;
    let state_dir = layout::state_dir(&rc.storage, &target.name)?;
    let public_dir = layout::table_dir(&rc.storage, target)?;
    let state = Table::open(&state_dir).await?;
    let app = layout::app_id(&flow.name);
    let committed = state.txn_version(&app).await?;
    let mut public = Table::open(&public_dir).await?;
    if sync_published(rc, target, &rules, &state, &public).await? {
        public = Table::open(&public_dir).await?;
    }
    let published_ahead = public.txn_version(&app).await? > committed;

    let checkpoint = rc.checkpoint(flow)?;
    let progress = checkpoint.load(&state, &app).await?;
    if flow.once && committed.is_some() {
        report.outcome = FlowOutcome::UpToDate {
            reason: "ONCE flow already ran".into(),
        };
        return Ok(());
    }
    let shape = Shape::of(spec);
    if committed.is_some() {
        check_shape(&shape, checkpoint.shape().await?, &target.name)?;
    }
    let batch = progress.next_batch();
    // A large first batch is read a group of keys at a time, unless workers apply it:
    // its rows then go through the one task that makes the events.
    let on_workers = rc.cluster.as_ref().is_some_and(|c| c.slices() > 1);
    let first_load = !state.exists() && !public.exists() && !on_workers;
    let (read, offsets, has_new) = read_source(
        rc,
        spec,
        source,
        &source_schema,
        &progress,
        first_load,
        report,
    )
    .await?;
    report.rows_read = read.rows();
    if !has_new && published_ahead {
        return Err(RunError::input(format!(
            "flow `{}`: batch {batch} reached `{}` but not its state, and its input is gone",
            flow.name, target.name
        ))
        .with_help(format!(
            "the run was interrupted between the two commits and the source files were removed since; run `cdcflow run --full-refresh {}`",
            target.name
        )));
    }
    if !has_new && committed.is_some() && public.exists() {
        return Ok(());
    }
    let applied = apply_batch(
        rc,
        flow,
        spec,
        Batch {
            target,
            rules,
            source_schema: &source_schema,
            tables: (state, public),
            checkpoint: &checkpoint,
            shape: &shape,
            number: batch,
            offsets,
            read,
        },
    )
    .await?;
    report.oldest_change_micros = applied.oldest_change;
    report_applied(&applied, report);
    report.warnings.extend(applied.note);
    report.outcome = FlowOutcome::Committed { batch };
    Ok(())
}

/// One batch of an AUTO CDC flow, read and ready to apply.
pub(super) struct Batch<'a> {
    pub target: &'a Dataset,
    pub rules: Rules,
    pub source_schema: &'a SchemaRef,
    /// The target's (state, published) tables as the run opened them.
    pub tables: (Table, Table),
    pub checkpoint: &'a crate::checkpoint::Checkpoint,
    /// The flow's shape, recorded beside its checkpoint.
    pub shape: &'a Shape,
    pub number: i64,
    pub offsets: Offsets,
    pub read: BatchSource,
}

/// Applies `batch` and commits it: its offsets written down first, then the published
/// table and the state, each commit carrying the flow's transaction id and the batch.
pub(super) async fn apply_batch(
    rc: &RunContext,
    flow: &Flow,
    spec: &Arc<AutoCdcSpec>,
    batch: Batch<'_>,
) -> Result<exec::Applied, RunError> {
    let Batch {
        target,
        rules,
        source_schema,
        tables,
        checkpoint,
        shape,
        number,
        offsets,
        read,
    } = batch;
    checkpoint.write_intent(&offsets).await?;
    checkpoint.record_shape(shape).await?;
    let operation = Operation::AutoCdc {
        flow: spec.flow.clone(),
        batch: number,
        scd_type: spec.scd_type,
        keys: spec.keys.clone(),
    };
    let app = layout::app_id(&flow.name);
    let (public_commit, state_commit) = commits(target, vec![(app, number)], &offsets);
    let (public_commit, state_commit) = (
        public_commit.doing(operation.clone()),
        state_commit.doing(operation),
    );
    // Split over workers, a first batch needs tables to merge into.
    let tables = match rc.cluster.as_deref() {
        Some(cluster) if cluster.slices() > 1 && matches!(read, BatchSource::Rows(_)) => {
            super::first_split::created_empty(spec, &rules, tables, (&state_commit, &public_commit))
                .await?
        }
        _ => tables,
    };
    // The planner's plan of the flow over the batch's input, lowered to apply it.
    let target = exec::ApplyTarget::of_opened(
        rules,
        &target.name,
        tables,
        (state_commit, public_commit),
        rc.now_micros,
    );
    let plan = exec::apply_plan(spec, source_schema, read, target, rc.cluster.as_deref()).await?;
    let executed = Arc::clone(&plan.plan);
    let applied = exec::run_apply(plan).await?;
    checkpoint.seal(&offsets).await;
    record_executed(checkpoint, number, &executed).await;
    Ok(applied)
}

/// A flow's target, source and the rules it is applied by.
pub(super) struct Prepared<'p> {
    pub target: &'p Dataset,
    pub source: &'p Dataset,
    /// The rows the flow's events are made of (a snapshot flow's: its change events).
    pub source_schema: SchemaRef,
    pub rules: Rules,
}

pub(super) fn prepare<'p>(
    rc: &'p RunContext,
    flow: &Flow,
    spec: &AutoCdcSpec,
) -> Result<Prepared<'p>, RunError> {
    let target = dataset(&rc.pipeline, &flow.target)?;
    let source = dataset(&rc.pipeline, &spec.source)?;
    let mut source_schema = source.schema.clone().ok_or_else(|| {
        RunError::input(format!(
            "flow `{}`: the schema of `{}` is not known",
            flow.name, source.name
        ))
    })?;
    if let Some(snapshot) = &spec.snapshot {
        source_schema =
            cdcflow_plan::snapshot::event_schema(&source_schema, &spec.keys, &snapshot.version);
    }
    let mut rules = rules_for(spec, &source_schema, &target.properties)?;
    if target.def.columns.iter().any(|c| c.generated.is_some()) {
        let planner = Planner::with_state(rc.ctx.state());
        rules.generated = crate::generated::for_auto_cdc(
            target,
            &planner,
            &rc.ctx.state(),
            &rules.computed_from(),
        )?;
    }
    Ok(Prepared {
        target,
        source,
        source_schema,
        rules,
    })
}

/// The physical plan of the flow's next batch over the input a run would read now, as
/// a run executes it; with `analyze`, the metrics of making its events. The apply,
/// which commits, is not run: nothing is written.
pub(crate) async fn explain(
    rc: &RunContext,
    flow: &Flow,
    spec: &Arc<AutoCdcSpec>,
    analyze: bool,
) -> Result<String, RunError> {
    let Prepared {
        target,
        source,
        source_schema,
        rules,
    } = prepare(rc, flow, spec)?;
    let state = Table::open(&layout::state_dir(&rc.storage, &target.name)?).await?;
    let public = Table::open(&layout::table_dir(&rc.storage, target)?).await?;
    let app = layout::app_id(&flow.name);
    let progress = rc.checkpoint(flow)?.load(&state, &app).await?;
    let mut report = FlowReport::new(&flow.name, &flow.target, "explain");
    let first_load = !state.exists() && !public.exists();
    let (read, offsets, _) = read_source(
        rc,
        spec,
        source,
        &source_schema,
        &progress,
        first_load,
        &mut report,
    )
    .await?;
    let (public_commit, state_commit) =
        commits(target, vec![(app, progress.next_batch())], &offsets);
    let apply = exec::ApplyTarget::of_opened(
        rules,
        &target.name,
        (state, public),
        (state_commit, public_commit),
        rc.now_micros,
    );
    let plan = exec::apply_plan(spec, &source_schema, read, apply, rc.cluster.as_deref()).await?;
    if !analyze {
        let shown = crate::cluster::display(plan.plan.as_ref(), false);
        return Ok(match rc.cluster.as_deref() {
            Some(cluster) => format!("{shown}{}\n", crate::cluster::placement(cluster)),
            None => shown,
        });
    }
    exec::make_events(&plan).await?;
    let next = format!(
        "(AutoCdcApplyExec was not run: it applies and commits the batch; the metrics are of making its events)\n{}",
        datafusion::physical_plan::display::DisplayableExecutionPlan::with_metrics(
            plan.plan.as_ref()
        )
        .indent(true)
    );
    let last = rc.checkpoint(flow)?.last_plan().await;
    Ok(match last {
        Some(last) => format!("{next}\n{last}"),
        None => next,
    })
}

/// Keeps the plan batch `batch` executed, with every operator's metrics (the apply's
/// counts among them), for `cdcflow explain --analyze`. The batch is committed already:
/// a failure here is only logged.
async fn record_executed(
    checkpoint: &crate::checkpoint::Checkpoint,
    batch: i64,
    executed: &Arc<dyn datafusion::physical_plan::ExecutionPlan>,
) {
    let text = format!(
        "(batch {batch}, as the last run executed it)\n{}",
        crate::cluster::display(executed.as_ref(), true)
    );
    checkpoint.record_plan(&text).await;
}

/// What the batch did, in the flow's report.
fn report_applied(applied: &exec::Applied, report: &mut FlowReport) {
    let (metrics, rows_written) = (&applied.metrics, applied.rows_written);
    report.slices = applied.slices.clone();
    if metrics.late_after_gc > 0 {
        report.warnings.push(format!(
            "{} upsert(s) older than a collected tombstone were dropped: they may resurrect deleted rows (raise {} to keep tombstones longer)",
            metrics.late_after_gc,
            super::TOMBSTONE_RETENTION
        ));
    }
    report.cdc = Some(*metrics);
    report.rows_written = rows_written;
}

/// The commits of a batch to the published table and to the state, both carrying the
/// batch's offsets.
fn commits(target: &Dataset, txns: Vec<(String, i64)>, offsets: &Offsets) -> (Commit, Commit) {
    let state_commit = Commit {
        txns: txns.clone(),
        // The state is cdcflow's alone: always merge-on-write.
        configuration: [(DELETION_VECTORS.to_string(), "true".to_string())].into(),
        name: format!("{}__state", target.name),
        description: Some(format!(
            "cdcflow internal AUTO CDC state of `{}`; query the table instead",
            target.name
        )),
        ..Commit::default()
    };
    (
        published_commit(target, txns).with_offsets(offsets),
        state_commit.with_offsets(offsets),
    )
}

/// A commit to the published table of an AUTO CDC target. Its table takes deletion
/// vectors unless its TBLPROPERTIES say otherwise, as Databricks' new tables do
/// (docs/runtime.md lists the readers that apply them).
fn published_commit(target: &Dataset, txns: Vec<(String, i64)>) -> Commit {
    let mut commit = Commit::to_published(target, txns);
    if !commit
        .configuration
        .keys()
        .any(|k| k.eq_ignore_ascii_case(DELETION_VECTORS))
    {
        commit
            .configuration
            .insert(DELETION_VECTORS.to_string(), "true".to_string());
    }
    commit
}

/// Derives the published table from the state again when it is behind the state (a
/// version that committed both at once was stopped between them); true when it did.
async fn sync_published(
    rc: &RunContext,
    target: &Dataset,
    rules: &Rules,
    state: &Table,
    public: &Table,
) -> Result<bool, RunError> {
    if !state.exists() {
        return Ok(false);
    }
    let mut txns = Vec::new();
    let mut behind = false;
    for f in rc.pipeline.flows_into(&target.name) {
        let app = layout::app_id(&f.name);
        let s = state.txn_version(&app).await?;
        behind |= public.txn_version(&app).await? < s;
        if let Some(v) = s {
            txns.push((app, v));
        }
    }
    if !behind {
        return Ok(false);
    }
    if rules.narrow_state() {
        return Err(exec::lost_published(&target.name));
    }
    tracing::warn!(table = %target.name, "published table behind its state; deriving it again");
    let stored = state.read_batches(&rules.state_schema()).await?;
    let empty = RecordBatch::new_empty(rules.event_schema());
    let applied = super::apply(rules, stored, Visible::Recompute, &empty, rc.now_micros)?;
    let flows = rc
        .pipeline
        .flows_into(&target.name)
        .map(|f| f.name.clone())
        .collect();
    let commit = published_commit(target, txns).doing(Operation::Rederive { flows });
    delta::write(
        &public.at,
        &rules.public_schema(),
        applied.public,
        Mode::Overwrite,
        &commit,
    )
    .await?;
    Ok(true)
}

/// The source rows of this batch, the offsets that name them, and whether the source
/// had anything new (a view over a stream can have new input and give no rows: the
/// batch still commits, so that its offsets move on). What the user should hear about
/// landing files a view reads goes to `report`.
async fn read_source(
    rc: &RunContext,
    spec: &AutoCdcSpec,
    source: &Dataset,
    schema: &SchemaRef,
    progress: &Processed,
    first_load: bool,
    report: &mut FlowReport,
) -> Result<(BatchSource, Offsets, bool), RunError> {
    let batch = progress.next_batch();
    let mut offsets = Offsets {
        batch,
        ..Offsets::default()
    };
    match source.kind {
        DatasetKind::StreamingTable if spec.streaming => {
            let (files, version) = rc
                .reader()
                .appended_files(source, progress.source_version(&source.name))
                .await?;
            if let Some(v) = version {
                offsets.sources.insert(source.name.clone(), v);
            }
            let grouped = match first_load {
                true => GroupedLoad::plan(spec, &files, schema)?,
                false => None,
            };
            let read = match grouped {
                Some(load) => BatchSource::KeyGroups(load),
                None => BatchSource::Rows(delta::read_named(&files, schema)?),
            };
            let has_new = read.rows() > 0;
            Ok((read, offsets, has_new))
        }
        DatasetKind::View => {
            // Read as a stream, the view runs over what its streaming inputs appended
            // since this flow's last batch; read whole, over all of them (applying an
            // event twice changes nothing).
            let mut planner = Planner::with_state(rc.ctx.state());
            let mut inputs = BatchInputs::new(batch);
            let input = [Input::Dataset {
                name: source.name.clone(),
                streaming: spec.streaming,
            }];
            rc.reader()
                .register(&input, progress, &mut planner, &mut inputs)
                .await?;
            // Landing records the view's `read_files` could not read have no quarantine
            // here (it belongs to a streaming table): the batch fails naming them rather
            // than losing them.
            if !inputs.quarantine.is_empty() {
                return Err(crate::quarantine::malformed(&inputs.quarantine).with_help(
                    "fix the file and land the fixed copy as a new file; to keep malformed records apart instead, read the landing files into a streaming table (bronze) and the view from it: a streaming table quarantines them",
                ));
            }
            let df = rc.ctx.read_table(planner_table(&planner, &source.name)?)?;
            let rows = df.collect().await?;
            let has_new = match spec.streaming {
                true => inputs.has_new,
                false => rows.iter().any(|b| b.num_rows() > 0),
            };
            report.warnings.extend(inputs.landing_warnings());
            report.tombstones = inputs.tombstones;
            report.partition_lag = std::mem::take(&mut inputs.partition_lag);
            let origin = format!("view {}", source.name);
            Ok((
                BatchSource::Rows(rows.into_iter().map(|b| (origin.clone(), b)).collect()),
                inputs.offsets,
                has_new,
            ))
        }
        _ => {
            let table = Table::open(&layout::table_dir(&rc.storage, source)?).await?;
            let all = table.read_all(schema).await?;
            let has_new = all.num_rows() > 0;
            Ok((
                BatchSource::Rows(vec![(source.name.clone(), all)]),
                offsets,
                has_new,
            ))
        }
    }
}

fn planner_table(
    planner: &Planner,
    name: &str,
) -> Result<Arc<dyn datafusion::catalog::TableProvider>, RunError> {
    let source = planner
        .table(name)
        .ok_or_else(|| RunError::internal(format!("view `{name}` could not be registered")))?;
    Ok(datafusion::datasource::source_as_provider(&source)?)
}

/// Fails when the flow's keys, sequencing or SCD type differ from those the target
/// was built with (`validate` warns of it first).
pub(super) fn check_shape(
    shape: &Shape,
    built: Option<Shape>,
    target: &str,
) -> Result<(), RunError> {
    let Some(built) = built else {
        return Ok(());
    };
    let changes = shape.changes_from(&built);
    if changes.is_empty() {
        return Ok(());
    }
    Err(RunError::input(format!(
        "{}; nothing was applied",
        stored_shape::message(target, &changes)
    ))
    .with_help(stored_shape::help(target)))
}
