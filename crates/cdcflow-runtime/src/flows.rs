//! Query flows: appends into streaming tables and recomputed materialized views.

use std::sync::Arc;

use cdcflow_plan::Flow;
use cdcflow_plan::planner::Planner;
use cdcflow_sql::sqlparser::ast::Query;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};

use crate::delta::{self, Commit, Mode, Table, conform};
use crate::inputs::BatchInputs;
use crate::report::{FlowOutcome, FlowReport};
use crate::runner::RunContext;
use crate::{RunError, layout};

/// Appends the rows the flow's query gives for the new input.
pub(crate) async fn append(
    rc: &RunContext<'_>,
    flow: &Flow,
    query: &Query,
    report: &mut FlowReport,
) -> Result<(), RunError> {
    let dir = layout::table_dir(rc.storage, &flow.target);
    let table = Table::open(&dir).await?;
    let app = layout::app_id(&flow.name);
    let checkpoint = rc.checkpoint(flow);
    let progress = checkpoint.load(table.txn_version(&app).await?)?;
    if flow.once && progress.committed.is_some() {
        report.outcome = FlowOutcome::UpToDate {
            reason: "ONCE flow already ran".into(),
        };
        return Ok(());
    }
    let mut planner = Planner::with_state(rc.ctx.state());
    let mut inputs = BatchInputs::new(progress.next_batch());
    rc.reader()
        .register(&flow.inputs, &progress, &mut planner, &mut inputs)
        .await?;
    report.rows_read = inputs.rows;
    report.files = inputs.files;
    if !inputs.has_new && table.exists() && !flow.once {
        return Ok(());
    }
    checkpoint.write_intent(&inputs.offsets)?;
    let (schema, batches) = execute(rc, &planner, query).await?;
    report.rows_written = batches.iter().map(|b| b.num_rows() as u64).sum();
    let commit = commit_for(rc, flow, &app, inputs.offsets.batch);
    delta::write(&dir, &schema, batches, Mode::Append, &commit).await?;
    report.outcome = FlowOutcome::Committed {
        batch: inputs.offsets.batch,
    };
    Ok(())
}

/// Recomputes a materialized view when its inputs changed since the last refresh.
pub(crate) async fn materialize(
    rc: &RunContext<'_>,
    flow: &Flow,
    query: &Query,
    report: &mut FlowReport,
) -> Result<(), RunError> {
    let dir = layout::table_dir(rc.storage, &flow.target);
    let table = Table::open(&dir).await?;
    let app = layout::app_id(&flow.name);
    let checkpoint = rc.checkpoint(flow);
    let progress = checkpoint.load(table.txn_version(&app).await?)?;
    let mut planner = Planner::with_state(rc.ctx.state());
    let mut inputs = BatchInputs::new(progress.next_batch());
    rc.reader()
        .register(&flow.inputs, &progress, &mut planner, &mut inputs)
        .await?;
    inputs.seal_fingerprint();
    report.rows_read = inputs.rows;
    report.files = inputs.files;
    let unchanged = progress
        .last
        .as_ref()
        .is_some_and(|l| l.fingerprint == inputs.offsets.fingerprint);
    if unchanged && table.exists() {
        report.outcome = FlowOutcome::UpToDate {
            reason: "inputs unchanged".into(),
        };
        return Ok(());
    }
    checkpoint.write_intent(&inputs.offsets)?;
    let (schema, batches) = execute(rc, &planner, query).await?;
    report.rows_written = batches.iter().map(|b| b.num_rows() as u64).sum();
    let commit = commit_for(rc, flow, &app, inputs.offsets.batch);
    delta::write(&dir, &schema, batches, Mode::Overwrite, &commit).await?;
    report.outcome = FlowOutcome::Committed {
        batch: inputs.offsets.batch,
    };
    Ok(())
}

fn commit_for(rc: &RunContext<'_>, flow: &Flow, app: &str, batch: i64) -> Commit {
    let dataset = rc.pipeline.dataset(&flow.target);
    Commit {
        txns: vec![(app.to_string(), batch)],
        configuration: dataset.map(|d| d.properties.clone()).unwrap_or_default(),
        name: flow.target.clone(),
        description: dataset.and_then(|d| d.def.comment.clone()),
    }
}

/// Plans and runs `query`; the result's columns are all nullable, as stored.
async fn execute(
    rc: &RunContext<'_>,
    planner: &Planner,
    query: &Query,
) -> Result<(SchemaRef, Vec<RecordBatch>), RunError> {
    let plan = planner.plan_query(query)?;
    let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
    let batches = rc.ctx.execute_logical_plan(plan).await?.collect().await?;
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
