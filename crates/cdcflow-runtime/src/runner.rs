//! One run of a pipeline: flows in dependency order, each committing its own batch, and
//! flows that do not depend on each other at the same time (`schedule.rs`); a failed
//! flow stops the flows downstream of it and no others.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use cdcflow_plan::DatasetKind;
use cdcflow_plan::location::Location;
use cdcflow_plan::{Flow, FlowKind, Input, Pipeline};
use datafusion::arrow::datatypes::SchemaRef;

use crate::cascade::{self, reset_allowed};
use crate::checkpoint::Checkpoint;
use crate::cluster::Cluster;
use crate::context::RunContext;
use crate::delta::{self, Commit, Mode, Operation, Table};
use crate::pipeline_lock::PipelineLock;
use crate::report::{FlowOutcome, FlowReport, RunReport};
use crate::sources::Sources;
use crate::storage::Storage;
use crate::{RunError, cdc, layout, query_flow, schedule};

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Only these flows (all when empty).
    pub flows: Vec<String>,
    /// Recompute these tables from their sources first; `Some(vec![])` means all.
    pub full_refresh: Option<Vec<String>>,
    /// Full refresh even when landing files read before are gone or changed (their
    /// rows, and the history built from them, are lost).
    pub force: bool,
    /// With `full_refresh`: refresh too the tables that read a refreshed table as a
    /// stream (they would fail otherwise), and their readers after them.
    pub cascade: bool,
    /// The wall clock, µs since the epoch (tests pin it); now when `None`.
    pub now_micros: Option<i64>,
    /// Told the name of each flow as it starts (progress display).
    pub progress: Option<Progress>,
    /// Opens the sources outside the pipeline's storage (`read_postgres`).
    pub sources: Option<Sources>,
    /// Apply the AUTO CDC batches that can be split on these workers
    /// (docs/scale-out.md); none: on this machine.
    pub cluster: Option<Cluster>,
}

/// A callback told the name of each flow as it starts.
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

/// Runs `pipeline` once, holding its run lock.
pub async fn run(pipeline: &Pipeline, options: &RunOptions) -> Result<RunReport, RunError> {
    let lock = PipelineLock::acquire(pipeline).await?;
    let report = run_locked(pipeline, options).await.map(|mut report| {
        report.notes.splice(0..0, lock.note());
        report
    });
    if let Some(sources) = &options.sources {
        sources.0.finish().await;
    }
    if let Err(e) = lock.release().await {
        // What the run committed stands; the next run takes a lease that is not
        // released once it runs out.
        tracing::warn!(error = %e, "the run lock was not released");
    }
    report
}

/// Runs `pipeline` once; the caller holds the run lock.
pub(crate) async fn run_locked(
    pipeline: &Pipeline,
    options: &RunOptions,
) -> Result<RunReport, RunError> {
    let storage = pipeline.storage();
    let records = Storage::of(pipeline)?;
    for name in &options.flows {
        if pipeline.flow(name).is_none() {
            let known: Vec<&str> = pipeline.flows.iter().map(|f| f.name.as_str()).collect();
            return Err(RunError::input(format!("no flow named `{name}`"))
                .with_help(format!("flows of this pipeline: {}", known.join(", "))));
        }
    }
    let started = chrono::Utc::now().timestamp_micros();
    let mut report = RunReport {
        run_id: format!("{started:x}-{}", std::process::id()),
        ..RunReport::default()
    };
    if let Some(tables) = &options.full_refresh {
        let cascaded;
        let tables = match options.cascade {
            true => {
                cascaded = cascade::with_broken_readers(pipeline, tables);
                &cascaded
            }
            false => tables,
        };
        report.notes = set_damaged_commits_aside(pipeline, &storage, tables).await?;
        if !options.force {
            refuse_lossy_refresh(pipeline, &storage, &records, tables).await?;
        }
        report
            .notes
            .extend(full_refresh(pipeline, &storage, &records, tables).await?);
        if let Some(requested) = &options.full_refresh
            && tables.len() > requested.len()
        {
            report.notes.push(format!(
                "--cascade: also refreshed {}, which read a refreshed table as a stream",
                names(&tables[requested.len()..])
            ));
        }
    }
    let now_micros = options
        .now_micros
        .unwrap_or_else(|| chrono::Utc::now().timestamp_micros());
    if let Some(cluster) = &options.cluster {
        crate::cluster::check(cluster).await?;
    }
    let mut context = RunContext::new(pipeline, now_micros, options.sources.clone())?;
    context.cluster = options.cluster.clone().map(Arc::new);
    let shared = Arc::new(context);
    let run: Vec<usize> = pipeline
        .order
        .iter()
        .copied()
        .filter(|&f| {
            let flow = &pipeline.flows[f];
            pipeline
                .dataset(&flow.target)
                .is_some_and(|t| t.kind != DatasetKind::View)
                && (options.flows.is_empty()
                    || options
                        .flows
                        .iter()
                        .any(|n| n.eq_ignore_ascii_case(&flow.name)))
        })
        .collect();
    let waits = schedule::waits(pipeline, &run);
    let limit = schedule::parallel_flows();
    // Targets not updated by this run, and why: their readers are skipped.
    let mut blocked: BTreeMap<String, &'static str> = BTreeMap::new();
    let mut reports: Vec<Option<FlowReport>> = run.iter().map(|_| None).collect();
    let mut launched = vec![false; run.len()];
    let mut running = tokio::task::JoinSet::new();
    loop {
        // Start, in the pipeline's order, every flow whose waits are over, as long as
        // there is room; a flow skipped for its inputs is over at once, which may end
        // another's waits.
        let mut scan = true;
        while scan {
            scan = false;
            for i in 0..run.len() {
                if launched[i] || !waits[i].iter().all(|&j| reports[j].is_some()) {
                    continue;
                }
                let flow = &pipeline.flows[run[i]];
                let upstream = blocked_input(pipeline, &flow.inputs, &blocked, &mut Vec::new());
                if let Some(reason) = upstream {
                    let kind = kind_of(flow, dataset_kind(pipeline, flow));
                    let mut r = FlowReport::new(&flow.name, &flow.target, kind);
                    r.outcome = FlowOutcome::Skipped { reason };
                    let now = chrono::Utc::now().timestamp_micros();
                    (r.started_micros, r.ended_micros) = (now, now);
                    launched[i] = true;
                    reports[i] = Some(finished(r, &mut blocked));
                    scan = true;
                    continue;
                }
                if running.len() >= limit {
                    continue;
                }
                if let Some(Progress(tell)) = &options.progress {
                    tell(&flow.name);
                }
                launched[i] = true;
                let (shared, f) = (Arc::clone(&shared), run[i]);
                running.spawn(async move { (i, shared.run_flow(f).await) });
            }
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (i, r) = joined
            .map_err(|e| RunError::internal(format!("a flow's task ended abnormally: {e}")))?;
        // What one flow kept for reuse would add to the next flow's peak.
        crate::allocator::release_freed_memory();
        reports[i] = Some(finished(r, &mut blocked));
    }
    report.flows.extend(reports.into_iter().flatten());
    // Server objects no flow reads any more, once the whole pipeline ran (a run of
    // some flows says nothing of the others' needs).
    if options.flows.is_empty()
        && let Some(sources) = &options.sources
    {
        match sources.0.retire(pipeline).await {
            Ok(notes) => report.notes.extend(notes),
            Err(e) => report.notes.push(format!(
                "server objects no flow reads any more were not looked for: {}",
                e.with_help_inline()
            )),
        }
    }
    crate::compact::after_run(pipeline, &storage, &mut report).await;
    crate::vacuum::vacuum_changed_state(pipeline, &storage, &mut report).await;
    let ended = chrono::Utc::now().timestamp_micros();
    if let Err(e) =
        crate::event_log::append(&storage, &pipeline.config.name, &report, started, ended).await
    {
        report
            .notes
            .push(format!("the event log could not be written: {e}"));
    }
    Ok(report)
}

impl RunContext {
    /// Runs flow `f` (an index into the pipeline's flows), timed.
    async fn run_flow(&self, f: usize) -> FlowReport {
        let flow = &self.pipeline.flows[f];
        let (started, started_at) = (Instant::now(), chrono::Utc::now().timestamp_micros());
        let mut r = run_flow(self, flow, dataset_kind(&self.pipeline, flow)).await;
        r.millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        r.started_micros = started_at;
        r.ended_micros = chrono::Utc::now().timestamp_micros();
        if matches!(r.outcome, FlowOutcome::Committed { .. })
            && let Some(oldest) = r.oldest_change_micros
        {
            r.lag_ms = Some((r.ended_micros - oldest) / 1000);
        }
        r
    }
}

/// Why a flow reading `inputs` cannot run now: the first table among them, or among
/// what the views among them read, that this run blocked (`blocked`, by lower-case
/// name). `seen` holds the views already looked through.
fn blocked_input(
    pipeline: &Pipeline,
    inputs: &[Input],
    blocked: &BTreeMap<String, &'static str>,
    seen: &mut Vec<String>,
) -> Option<String> {
    inputs.iter().find_map(|input| {
        let Input::Dataset { name, .. } = input else {
            return None;
        };
        let key = name.to_lowercase();
        if let Some(why) = blocked.get(&key) {
            return Some(format!("input `{name}` {why}"));
        }
        let view = pipeline
            .dataset(name)
            .is_some_and(|d| d.kind == DatasetKind::View);
        if !view || seen.contains(&key) {
            return None;
        }
        seen.push(key);
        pipeline
            .flows
            .iter()
            .filter(|f| f.target.eq_ignore_ascii_case(name))
            .find_map(|f| blocked_input(pipeline, &f.inputs, blocked, seen))
    })
}

/// The kind of the dataset `flow` writes (the run takes only flows whose target is
/// known).
fn dataset_kind(pipeline: &Pipeline, flow: &Flow) -> DatasetKind {
    pipeline
        .dataset(&flow.target)
        .map_or(DatasetKind::StreamingTable, |d| d.kind)
}

/// A flow's report once it is over: its target is blocked for its readers when it
/// did not commit, and its outcome is logged.
fn finished(r: FlowReport, blocked: &mut BTreeMap<String, &'static str>) -> FlowReport {
    match r.outcome {
        FlowOutcome::Failed { .. } => {
            blocked.insert(r.target.to_lowercase(), "failed");
        }
        FlowOutcome::Skipped { .. } => {
            blocked.insert(r.target.to_lowercase(), "was not updated");
        }
        // Its readers were planned without the columns it gained: applied now, their
        // rows would lose those values for good. They wait for the pipeline to be
        // planned again (`RunReport::needs_planning`).
        FlowOutcome::Committed { .. } if !r.unplanned_columns.is_empty() => {
            blocked.insert(
                r.target.to_lowercase(),
                "gained columns the pipeline was not planned with: read once it is planned again",
            );
        }
        _ => {}
    }
    // Typed fields (no `?Debug` text): log collectors query them.
    tracing::info!(
        flow = %r.flow,
        table = %r.target,
        outcome = r.outcome.status(),
        batch = r.outcome.batch(),
        reason = r.outcome.reason(),
        rows_read = r.rows_read,
        rows_written = r.rows_written,
        files = r.files,
        lag_ms = r.lag_ms,
        millis = r.millis,
        "flow finished"
    );
    r
}

fn kind_of(flow: &Flow, target: DatasetKind) -> &'static str {
    match (&flow.kind, target) {
        (FlowKind::AutoCdc(_), _) => "auto cdc",
        (_, DatasetKind::MaterializedView) => "materialized view",
        _ => "append",
    }
}

async fn run_flow(rc: &RunContext, flow: &Flow, target: DatasetKind) -> FlowReport {
    let mut report = FlowReport::new(&flow.name, &flow.target, kind_of(flow, target));
    if flow.plan.is_none() {
        // Only an unknown input schema leaves a valid pipeline's flow unplanned: no
        // `schema =>` and no landing files to infer one from yet, or landing files that
        // disagree on a column's type or none of which can be read, which is an error.
        let unusable = flow.inputs.iter().find_map(|i| match i {
            Input::Files(rf) => rf.schema().err(),
            Input::Dataset { .. }
            | Input::Delta(_)
            | Input::Postgres(_)
            | Input::Mysql(_)
            | Input::Query(_)
            | Input::Kafka(_) => None,
        });
        if let Some(error) = unusable {
            report.error_code = Some(crate::ErrorCode::File.as_str());
            report.outcome = FlowOutcome::Failed {
                error: format!("{error}; nothing was committed"),
                help: Some(error.help().into()),
            };
            return report;
        }
        report.outcome = FlowOutcome::Skipped {
            reason: "waiting for input: its schema is not known yet (no schema declared and no readable landing file; `cdcflow validate` says more)".into(),
        };
        return report;
    }
    let result = match (&flow.kind, target) {
        (FlowKind::AutoCdc(spec), _) if spec.snapshot.is_some() => {
            cdc::snapshot::run(rc, flow, spec, &mut report).await
        }
        (FlowKind::AutoCdc(spec), _) => cdc::flow::run(rc, flow, spec, &mut report).await,
        (FlowKind::Query { .. }, DatasetKind::MaterializedView) => {
            query_flow::materialize(rc, flow, &mut report).await
        }
        (FlowKind::Query { .. }, _) => query_flow::append(rc, flow, &mut report).await,
    };
    if let Err(e) = result {
        let e = e.context(|| format!("running flow `{}`", flow.name));
        report.error_code = Some(e.code().as_str());
        report.outcome = FlowOutcome::Failed {
            error: e.to_string(),
            help: e.help().map(str::to_string),
        };
    }
    report
}

/// Whether `name` is among the tables a full refresh names (all when none is named).
/// `a`, `b` and `c` as "`a`, `b`, `c`".
fn names(tables: &[String]) -> String {
    let quoted: Vec<String> = tables.iter().map(|t| format!("`{t}`")).collect();
    quoted.join(", ")
}

fn selected(tables: &[String], name: &str) -> bool {
    tables.is_empty() || tables.iter().any(|t| t.eq_ignore_ascii_case(name))
}

/// Refuses a full refresh that would recompute a table from landing files some of which
/// are gone or changed since they were read (as the checkpoints recorded them): its
/// rows, and any history built on them downstream, would be lost or rebuilt from other
/// data.
async fn refuse_lossy_refresh(
    pipeline: &Pipeline,
    storage: &Location,
    records: &Storage,
    tables: &[String],
) -> Result<(), RunError> {
    let mut lost: Vec<String> = Vec::new();
    for d in pipeline
        .datasets
        .iter()
        .filter(|d| selected(tables, &d.name) && reset_allowed(d))
    {
        let table = Table::open(&layout::table_dir(storage, d)?).await?;
        for flow in pipeline.flows_into(&d.name) {
            let progress = Checkpoint::in_storage(records, &flow.name)?
                .peek(&table, &layout::app_id(&flow.name))
                .await?;
            for input in &flow.inputs {
                let Input::Files(rf) = input else { continue };
                for read in progress
                    .files
                    .get(&rf.table)
                    .into_iter()
                    .flatten()
                    .map(|(_, r)| r)
                {
                    // An entry of an earlier version knows only the name: gone or not.
                    let path = read.name.path_in(rf);
                    let change = match read.stamp {
                        Some(_) => read.change(&path),
                        None => std::fs::metadata(&path)
                            .is_err()
                            .then(|| "gone".to_string()),
                    };
                    if let Some(how) = change {
                        lost.push(format!(
                            "{} ({how}; read into `{}`)",
                            read.name.shown_under(rf),
                            d.name
                        ));
                    }
                }
            }
        }
    }
    if lost.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = lost.iter().take(3).map(String::as_str).collect();
    let more = if lost.len() > 3 {
        format!(" and {} more", lost.len() - 3)
    } else {
        String::new()
    };
    Err(RunError::input(format!(
        "--full-refresh would lose data: {} landing file(s) read before are gone or changed: {}{more}; nothing was changed",
        lost.len(),
        shown.join(", ")
    ))
    .with_help("put the files back as they were read, or add --force to recompute from the files as they are now (rows and SCD type 2 history built from what is missing are lost)"))
}

/// Moves the damaged newest commit of each table a full refresh rebuilds (and of its
/// AUTO CDC state) out of its log, so the table opens at the version before it and
/// can be reset. Tables that open are left alone.
async fn set_damaged_commits_aside(
    pipeline: &Pipeline,
    storage: &Location,
    tables: &[String],
) -> Result<Vec<String>, RunError> {
    let mut notes = Vec::new();
    for d in pipeline
        .datasets
        .iter()
        .filter(|d| d.kind != DatasetKind::View && selected(tables, &d.name) && reset_allowed(d))
    {
        for dir in [
            layout::table_dir(storage, d)?,
            layout::state_dir(storage, &d.name)?,
        ] {
            // A damaged commit is found by reading the log's files from a folder; a
            // bucket's tables are left as they are.
            let Some(dir) = dir.local() else { continue };
            if Table::open_dir(dir).await.is_ok() {
                continue;
            }
            if let Some(moved) = delta::set_damaged_commit_aside(dir)? {
                notes.push(format!(
                    "`{}`: its damaged newest commit was moved to {} before the table was rebuilt",
                    d.name,
                    moved.display()
                ));
            }
        }
    }
    Ok(notes)
}

/// Empties the selected tables (and AUTO CDC state) in a commit that resets their
/// flows' transaction ids, then forgets the flows' checkpoints, so the next batch
/// recomputes everything. The order matters: a crash in between leaves checkpoints
/// ahead of the tables, and those are discarded on load.
/// Tables protected by `pipelines.reset.allowed = false` are left alone, with a note.
async fn full_refresh(
    pipeline: &Pipeline,
    storage: &Location,
    records: &Storage,
    tables: &[String],
) -> Result<Vec<String>, RunError> {
    let mut notes = Vec::new();
    for name in tables {
        if pipeline.dataset(name).is_none() {
            return Err(RunError::input(format!(
                "--full-refresh: no table named `{name}`"
            )));
        }
    }
    for d in &pipeline.datasets {
        if d.kind == DatasetKind::View || !selected(tables, &d.name) {
            continue;
        }
        if !reset_allowed(d) {
            notes.push(format!(
                "`{}` was not reset: TBLPROPERTIES (pipelines.reset.allowed = false); its flows go on from where they were",
                d.name
            ));
            continue;
        }
        let flows: Vec<&Flow> = pipeline.flows_into(&d.name).collect();
        let txns: Vec<(String, i64)> = flows
            .iter()
            .map(|f| (layout::app_id(&f.name), -1))
            .collect();
        // The published table takes its definition's partitioning afresh; the state
        // keeps its own.
        for (dir, partitions) in [
            (
                layout::table_dir(storage, d)?,
                Some(d.partition_columns.clone()),
            ),
            (layout::state_dir(storage, &d.name)?, None),
        ] {
            let table = Table::open(&dir).await?;
            let Some(t) = &table.table else { continue };
            let stored = t
                .snapshot()
                .map_err(|e| RunError::delta(&table.dir, e))?
                .snapshot()
                .arrow_schema();
            let schema = with_partition_columns(stored, partitions.as_deref(), d.schema.as_ref());
            let commit = Commit {
                txns: txns.clone(),
                name: d.name.clone(),
                operation: Operation::FullRefresh {
                    flows: flows.iter().map(|f| f.name.clone()).collect(),
                },
                partition_columns: partitions,
                ..Commit::default()
            };
            delta::write(&dir, &schema, vec![], Mode::Overwrite, &commit).await?;
        }
        for f in flows {
            Checkpoint::in_storage(records, &f.name)?.remove().await?;
        }
    }
    Ok(notes)
}

/// The stored schema of a table being refreshed, with the new partition columns it lacks
/// (from the definition's schema): the empty version a full refresh commits must hold
/// the columns it is partitioned by.
fn with_partition_columns(
    stored: SchemaRef,
    partitions: Option<&[String]>,
    declared: Option<&SchemaRef>,
) -> SchemaRef {
    let (Some(partitions), Some(declared)) = (partitions, declared) else {
        return stored;
    };
    let missing: Vec<_> = partitions
        .iter()
        .filter(|c| stored.field_with_name(c).is_err())
        .filter_map(|c| declared.field_with_name(c).ok().cloned())
        .collect();
    if missing.is_empty() {
        return stored;
    }
    let mut fields: Vec<_> = stored.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(missing);
    Arc::new(datafusion::arrow::datatypes::Schema::new(fields))
}
