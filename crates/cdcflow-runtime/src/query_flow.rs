//! Query flows: appends into streaming tables and recomputed materialized views.

use std::sync::Arc;

use cdcflow_plan::Flow;
use cdcflow_plan::planner::Planner;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::{displayable, execute_stream};
use futures::StreamExt;

use crate::context::RunContext;
use crate::delta::{self, Commit, Mode, Operation, Table, conform};
use crate::inputs::BatchInputs;
use crate::quarantine;
use crate::report::{FlowOutcome, FlowReport};
use crate::{RunError, layout};
use crate::{declared, expectations, generated, identity};
use cdcflow_plan::config::BadRecords;
use cdcflow_plan::functions::rejected::Rejected;

/// A query flow's batch in the making: its target, progress and registered input.
struct QueryBatch {
    dir: cdcflow_plan::location::Location,
    table: Table,
    app: String,
    checkpoint: crate::checkpoint::Checkpoint,
    progress: crate::checkpoint::Processed,
    planner: Planner,
    inputs: BatchInputs,
}

impl QueryBatch {
    /// Opens the target and reads the flow's progress; the input is registered by
    /// [`QueryBatch::read_inputs`].
    async fn open(rc: &RunContext, flow: &Flow) -> Result<Self, RunError> {
        let target = rc.pipeline.dataset(&flow.target).ok_or_else(|| {
            RunError::internal(format!(
                "flow `{}`: unknown target `{}`",
                flow.name, flow.target
            ))
        })?;
        let dir = layout::table_dir(&rc.storage, target)?;
        let table = Table::open(&dir).await?;
        let app = layout::app_id(&flow.name);
        let checkpoint = rc.checkpoint(flow)?;
        let progress = checkpoint.load(&table, &app).await?;
        let mut inputs = BatchInputs::new(progress.next_batch());
        inputs.target = Some(dir.clone());
        Ok(Self {
            dir,
            table,
            app,
            checkpoint,
            progress,
            planner: Planner::with_state(rc.ctx.state()),
            inputs,
        })
    }

    async fn read_inputs(
        &mut self,
        rc: &RunContext,
        flow: &Flow,
        report: &mut FlowReport,
    ) -> Result<(), RunError> {
        rc.reader()
            .register(
                &flow.inputs,
                &self.progress,
                &mut self.planner,
                &mut self.inputs,
            )
            .await?;
        report.rows_read = self.inputs.rows;
        report.files = self.inputs.files;
        report.tombstones += self.inputs.tombstones;
        report.partition_lag = self.inputs.partition_lag.clone();
        report.warnings.extend(self.inputs.landing_warnings());
        report.pending_files = self.inputs.incomplete.len() as u64;
        Ok(())
    }

    /// Writes the offsets, runs the query and commits its result.
    async fn commit(
        mut self,
        rc: &RunContext,
        flow: &Flow,
        mode: Mode,
        report: &mut FlowReport,
    ) -> Result<(), RunError> {
        let bad = std::mem::take(&mut self.inputs.quarantine);
        if !bad.is_empty() && rc.pipeline.config.bad_records == BadRecords::Fail {
            return Err(quarantine::malformed(&bad));
        }
        let batch = self.inputs.offsets.batch;
        let plan = flow.plan_with(&self.planner)?;
        let stateful = match mode {
            Mode::Append => crate::stateful::find(rc, flow, &plan)?,
            _ => None,
        };
        if stateful.is_some() {
            // Named before the intent is written, so that every record of the batch's
            // offsets names the state it goes with.
            self.inputs.offsets.state = Some(crate::stateful::version_name(batch));
        }
        self.checkpoint.write_intent(&self.inputs.offsets).await?;
        // What the query's functions set apart (`debezium(…, map('mode', 'QUARANTINE'))`):
        // kept with the landing records above, for an append only (a recompute would keep
        // them again at each refresh).
        let rejected = Rejected::default();
        let (schema, batches) = match stateful {
            Some(op) => {
                let at = (
                    self.progress.committed,
                    self.progress.state_version(),
                    batch,
                );
                let (plan, run) =
                    crate::stateful::plan(flow, plan, &op, &self.checkpoint, at, false).await?;
                let out = execute(&crate::stateful::session(rc), plan).await?;
                let done = crate::stateful::finish(&run).await?;
                if let Some(late) = done.late {
                    let n = late.num_rows();
                    let table =
                        crate::stateful::late::write(flow, &self.dir, &self.app, batch, late)
                            .await?;
                    report.warnings.push(format!(
                        "{n} row(s) arrived after the watermark had passed them (their window closed, or their event time at or below it) and were dropped; they are kept in `{table}`"
                    ));
                }
                report.warnings.extend(done.warning);
                report.state = Some(done.metrics);
                out
            }
            None if mode == Mode::Append => {
                execute(&with_rejected(&rc.ctx, &rejected), plan).await?
            }
            None => execute(&rc.ctx, plan).await?,
        };
        let mut bad = bad;
        bad.extend(rejected.take().into_iter().map(|r| {
            let source = quarantine::Source {
                shown: r.function.to_string(),
                bytes: r.function.as_bytes().to_vec(),
            };
            let record = crate::files::BadRecord {
                line: None,
                text: Some(r.text),
                error: r.error,
            };
            (source, record)
        }));
        if !bad.is_empty() {
            if rc.pipeline.config.bad_records == BadRecords::Fail {
                return Err(quarantine::malformed(&bad));
            }
            let n = bad.len();
            report.quarantined = n as u64;
            let first = quarantined_first(&bad);
            let table = quarantine::write(flow, &self.dir, &self.app, batch, bad).await?;
            report.warnings.push(format!(
                "{n} malformed record(s) quarantined in `{table}` (where each came from and why kept; query it with cdcflow query); the first: {first}"
            ));
        }
        // The target's rules, then the columns it makes and declares, in that order:
        // expectations see the query's rows, the table stores the declared ones.
        let (schema, batches) = match rc.pipeline.dataset(&flow.target) {
            Some(target) => {
                let state = rc.ctx.state();
                let (kept, results) =
                    expectations::enforce(target, &self.planner, &state, &schema, batches)?;
                report.expectations = results;
                let (schema, batches) =
                    identity::fill(target, &self.table, mode, schema, kept).await?;
                let (schema, batches) =
                    generated::fill(target, &self.planner, &state, schema, batches)?;
                declared::conform(target, schema, batches, &self.inputs.landing)?
            }
            None => (schema, batches),
        };
        report.rows_written = batches.iter().map(|b| b.num_rows() as u64).sum();
        // The table's columns before this write; a table with no rows (new, or emptied by
        // a full refresh) has no row to miss.
        let stored = self.table.arrow_schema();
        let has_rows = self.table.exists() && !self.table.is_empty()?;
        if let Some(refused) = added_with_default(
            stored.as_ref().filter(|_| has_rows),
            &schema,
            &self.inputs.source_defaults,
            &flow.target,
        ) {
            return Err(refused);
        }
        if let Some(change) = delta::added_columns(stored.as_ref(), &schema, &flow.target) {
            report.unplanned_columns = unplanned(rc, flow, stored.clone(), &schema);
            match report.unplanned_columns.is_empty() {
                true => report.warnings.push(change),
                false => report.warnings.push(format!(
                    "schema change: `{}` gained column(s) {} while the run went on: the flows that read it are planned again before they read these rows",
                    flow.target,
                    report.unplanned_columns.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
                )),
            }
        }
        let operation = match mode {
            Mode::Append => Operation::StreamingAppend {
                flow: flow.name.clone(),
                batch,
            },
            _ => Operation::Recompute {
                flow: flow.name.clone(),
                batch,
            },
        };
        let commit = commit_for(rc, flow, &self.app, batch)
            .with_offsets(&self.inputs.offsets)
            .with_landing_files(&self.inputs.landing)
            .doing(operation);
        // A table a full refresh emptied takes the columns of its first batch: a column
        // whose type changed upstream would otherwise keep failing the appends.
        let emptied = mode == Mode::Append && self.table.exists() && !has_rows;
        let write_mode = match emptied {
            true => Mode::Overwrite,
            false => mode,
        };
        delta::write(&self.dir, &schema, batches, write_mode, &commit)
            .await
            .map_err(
                |e| match delta::changed_type(stored.as_ref(), &schema, &flow.target) {
                    Some(changed) => changed,
                    None => e,
                },
            )?;
        self.checkpoint.seal(&self.inputs.offsets).await;
        report.outcome = FlowOutcome::Committed { batch };
        report.oldest_change_micros = self.inputs.oldest_arrival_micros;
        Ok(())
    }
}

/// Appends the rows the flow's query gives for the new input.
pub(crate) async fn append(
    rc: &RunContext,
    flow: &Flow,
    report: &mut FlowReport,
) -> Result<(), RunError> {
    // A source with more than one batch takes (a size limit) gets batches until it
    // has none; the report adds them up.
    let (mut read, mut written) = (0, 0);
    loop {
        let mut batch = QueryBatch::open(rc, flow).await?;
        if flow.once && batch.progress.committed.is_some() {
            report.outcome = FlowOutcome::UpToDate {
                reason: "ONCE flow already ran".into(),
            };
            return Ok(());
        }
        batch.read_inputs(rc, flow, report).await?;
        report.rows_read += read;
        if !batch.inputs.has_new && batch.table.exists() && !flow.once {
            return Ok(());
        }
        let more = batch.inputs.more;
        let acknowledgements = std::mem::take(&mut batch.inputs.acknowledgements);
        batch.commit(rc, flow, Mode::Append, report).await?;
        report.rows_written += written;
        acknowledge(acknowledgements, report).await;
        if !more {
            return Ok(());
        }
        (read, written) = (report.rows_read, report.rows_written);
    }
}

/// Tells external sources that the batch holding their reads is committed. A failure
/// is a warning, not the flow's: the commit records the position, and the next run
/// tells the source again.
pub(crate) async fn acknowledge(
    acknowledgements: Vec<Box<dyn crate::sources::Acknowledge>>,
    report: &mut FlowReport,
) {
    for a in acknowledgements {
        if let Err(e) = a.acknowledge().await {
            report.warnings.push(format!(
                "the source was not told that the batch is committed: {}; the next run tells it again",
                e.with_help_inline()
            ));
        }
    }
}

/// Recomputes a materialized view when its inputs changed since the last refresh.
pub(crate) async fn materialize(
    rc: &RunContext,
    flow: &Flow,
    report: &mut FlowReport,
) -> Result<(), RunError> {
    let mut batch = QueryBatch::open(rc, flow).await?;
    batch.read_inputs(rc, flow, report).await?;
    batch.inputs.seal_fingerprint(&flow.query_text());
    let unchanged = batch
        .progress
        .last
        .as_ref()
        .is_some_and(|l| l.fingerprint == batch.inputs.offsets.fingerprint);
    if unchanged && batch.table.exists() {
        report.outcome = FlowOutcome::UpToDate {
            reason: "inputs unchanged".into(),
        };
        return Ok(());
    }
    batch.commit(rc, flow, Mode::Overwrite, report).await
}

fn commit_for(rc: &RunContext, flow: &Flow, app: &str, batch: i64) -> Commit {
    let txns = vec![(app.to_string(), batch)];
    match rc.pipeline.dataset(&flow.target) {
        Some(dataset) => Commit::to_published(dataset, txns),
        None => Commit {
            txns,
            name: flow.target.clone(),
            ..Commit::default()
        },
    }
}

/// The physical plan the flow runs for its next batch and, after `analyze`, the
/// metrics of running it (rows, time, memory per operator). Nothing is committed, and no
/// checkpoint is written: a later run reads the same input.
pub(crate) async fn explain(
    rc: &RunContext,
    flow: &Flow,
    analyze: bool,
) -> Result<String, RunError> {
    let mut batch = QueryBatch::open(rc, flow).await?;
    let mut report = FlowReport::new(&flow.name, &flow.target, "explain");
    batch.read_inputs(rc, flow, &mut report).await?;
    let logical = flow.plan_with(&batch.planner)?;
    // A stateful operator is planned in its place, over the state as it is: the batch
    // runs for `analyze` and writes no state.
    let (logical, ctx) = match crate::stateful::find(rc, flow, &logical)? {
        Some(op) => {
            let at = (
                batch.progress.committed,
                batch.progress.state_version(),
                batch.inputs.offsets.batch,
            );
            let (plan, _run) =
                crate::stateful::plan(flow, logical, &op, &batch.checkpoint, at, true).await?;
            (plan, crate::stateful::session(rc))
        }
        None => (logical, rc.ctx.clone()),
    };
    let physical = ctx.state().create_physical_plan(&logical).await?;
    if !analyze {
        return Ok(displayable(physical.as_ref()).indent(true).to_string());
    }
    let mut rows = execute_stream(Arc::clone(&physical), ctx.task_ctx())?;
    while let Some(batch) = rows.next().await {
        batch?;
    }
    Ok(DisplayableExecutionPlan::with_metrics(physical.as_ref())
        .indent(true)
        .to_string())
}

/// A context like `ctx` whose executions report the values functions set apart into
/// `rejected`.
fn with_rejected(
    ctx: &datafusion::prelude::SessionContext,
    rejected: &Rejected,
) -> datafusion::prelude::SessionContext {
    // The builder's own copy of the configuration is changed, not replaced: replacing it
    // would turn the default catalog's creation back on, and `build` would register an
    // empty one into the catalog list this context shares with `ctx`.
    let mut builder =
        datafusion::execution::session_state::SessionStateBuilder::new_from_existing(ctx.state());
    if let Some(config) = builder.config().as_mut() {
        config.options_mut().extensions.insert(rejected.clone());
    }
    datafusion::prelude::SessionContext::new_with_state(builder.build())
}

/// Runs the flow's plan (bound to the batch's input); the result's columns are all
/// nullable, as stored.
async fn execute(
    ctx: &datafusion::prelude::SessionContext,
    plan: datafusion::logical_expr::LogicalPlan,
) -> Result<(SchemaRef, Vec<RecordBatch>), RunError> {
    let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
    let batches = ctx.execute_logical_plan(plan).await?.collect().await?;
    let stored: SchemaRef = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let batches = batches
        .iter()
        .map(|b| conform(b, &stored))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((stored, batches))
}

/// The columns `written` adds to the stored table (`stored`) that the pipeline's plan of
/// the flow's target lacks: a source whose columns grew after the pipeline was loaded.
/// A table the plan knows no schema of has none (its readers are planned at run time).
fn unplanned(
    rc: &RunContext,
    flow: &Flow,
    stored: Option<SchemaRef>,
    written: &SchemaRef,
) -> Vec<String> {
    let (Some(stored), Some(planned)) = (
        stored,
        rc.pipeline
            .dataset(&flow.target)
            .and_then(|d| d.schema.clone()),
    ) else {
        return vec![];
    };
    written
        .fields()
        .iter()
        .map(|f| f.name())
        .filter(|name| stored.field_with_name(name).is_err())
        .filter(|name| {
            planned
                .fields()
                .iter()
                .all(|p| !p.name().eq_ignore_ascii_case(name))
        })
        .cloned()
        .collect()
}

/// The error of a write that adds to the stored table (`stored`) a column the source
/// table has a default for (`defaults`): the source's rows not changed since the column
/// was added have the default, which their log never carried, so the table would keep
/// null for them for good. Only a new snapshot has their values.
fn added_with_default(
    stored: Option<&SchemaRef>,
    written: &SchemaRef,
    defaults: &std::collections::BTreeMap<String, String>,
    table: &str,
) -> Option<RunError> {
    let stored = stored?;
    let (name, default) = written.fields().iter().find_map(|f| {
        let added = stored.field_with_name(f.name()).is_err();
        defaults
            .get(f.name())
            .filter(|_| added)
            .map(|d| (f.name(), d))
    })?;
    Some(
        RunError::input(format!(
            "schema change: column `{name}` was added to the source table with a default ({default}): the rows already there have it on the server, but their changes never carried it, so `{table}` would keep null for them; nothing was committed"
        ))
        .with_help(format!(
            "run `cdcflow run --full-refresh {table} --cascade`: a new snapshot of the table has the column's values, and the tables that read it are rebuilt from it"
        )),
    )
}

/// The first of the records set apart, as the summary names it: where it came from (a
/// landing file and its line, or a source table) and why.
fn quarantined_first(bad: &[(quarantine::Source, crate::files::BadRecord)]) -> String {
    let Some((source, record)) = bad.first() else {
        return String::new();
    };
    let line = record
        .line
        .map(|l| format!(" line {l}"))
        .unwrap_or_default();
    format!("{}{line}: {}", source.shown, record.error)
}
