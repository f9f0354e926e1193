//! `cdcflow explain --physical [--analyze]`: the physical plan a flow runs for its next
//! batch, over the input a run would read now, and with `--analyze` the metrics of
//! running it. Read-only: nothing is committed and no checkpoint is written.

use cdcflow_plan::{Flow, FlowKind, Input, Pipeline};

use crate::context::RunContext;
use crate::{RunError, cdc, query_flow};

/// The physical plan of `flow` (of `pipeline`) as text; with `analyze`, run over its
/// next batch's input, with each operator's metrics.
pub async fn physical_plan(
    pipeline: &Pipeline,
    flow: &Flow,
    analyze: bool,
) -> Result<String, RunError> {
    // Server sources are not read: reading them starts a slot or a consumer.
    let rc = RunContext::new(pipeline, chrono::Utc::now().timestamp_micros(), None);
    match &flow.kind {
        FlowKind::Query { .. } if flow.inputs.iter().any(Input::reads_a_server) => {
            Err(RunError::input(format!(
                "flow `{}` reads a server source (PostgreSQL, Kafka, read_query): `explain --physical` reads only files and tables, since reading a server starts a replication slot or a consumer",
                flow.name
            ))
            .with_help("`cdcflow explain` without --physical shows its logical plan"))
        }
        FlowKind::Query { .. } => query_flow::explain(&rc, flow, analyze).await,
        FlowKind::AutoCdc(spec) => {
            let source = pipeline
                .dataset(&spec.source)
                .and_then(|d| d.schema.clone())
                .ok_or_else(|| {
                    RunError::input(format!(
                        "flow `{}`: the columns of `{}` are not known yet",
                        flow.name, spec.source
                    ))
                })?;
            let properties = pipeline
                .dataset(&flow.target)
                .map(|d| d.properties.clone())
                .unwrap_or_default();
            let rules = cdc::rules_for(spec, &source, &properties)?;
            let events = cdc::events::event_plan(spec, &rules, &source).await?;
            let mut text = format!(
                "AutoCdcApplyExec: target={} scd_type={}{}\n",
                spec.target,
                spec.scd_type,
                match analyze {
                    true => " (applies and commits the batch, so explain does not run it: --analyze runs query flows only)",
                    false => "",
                }
            );
            for line in datafusion::physical_plan::displayable(events.as_ref())
                .indent(true)
                .to_string()
                .lines()
            {
                text.push_str(&format!("  {line}\n"));
            }
            Ok(text)
        }
    }
}
