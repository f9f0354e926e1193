//! `cdcflow explain --physical [--analyze]`: the physical plan a flow runs for its next
//! batch, over the input a run would read now, and with `--analyze` the metrics of
//! running it. Read-only: nothing is committed and no checkpoint is written.

use cdcflow_plan::{Flow, FlowKind, Pipeline};

use crate::cluster::Cluster;
use crate::context::RunContext;
use crate::{RunError, cdc, query_flow};

/// The physical plan of `flow` (of `pipeline`) as text, its batch split over
/// `cluster`'s workers when given; with `analyze`, run over its next batch's input,
/// with each operator's metrics.
pub async fn physical_plan(
    pipeline: &Pipeline,
    flow: &Flow,
    analyze: bool,
    cluster: Option<Cluster>,
) -> Result<String, RunError> {
    // Server sources are not read: reading them starts a slot or a consumer.
    let mut rc = RunContext::new(pipeline, chrono::Utc::now().timestamp_micros(), None)?;
    rc.cluster = cluster.map(std::sync::Arc::new);
    match &flow.kind {
        _ if pipeline.reads_a_server(flow) => {
            Err(RunError::input(format!(
                "flow `{}` reads a server source (PostgreSQL, Kafka, read_query): `explain --physical` reads only files and tables, since reading a server starts a replication slot or a consumer",
                flow.name
            ))
            .with_help("`cdcflow explain` without --physical shows its logical plan"))
        }
        FlowKind::Query { .. } => query_flow::explain(&rc, flow, analyze).await,
        FlowKind::AutoCdc(spec) if spec.snapshot.is_some() => Ok(cdc::snapshot::explain(spec)),
        FlowKind::AutoCdc(spec) => cdc::flow::explain(&rc, flow, spec, analyze).await,
    }
}
