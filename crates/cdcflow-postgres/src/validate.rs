//! What `cdcflow validate` checks on the server when it answers: a table `run` would
//! refuse because capturing it would break the application (no replica identity) is
//! an error at its `read_postgres` call, found in CI before any run touches the
//! publication. A server that does not answer in a few seconds (or a secret not set)
//! is no problem of the files: validate stays offline then, as it always was.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use cdcflow_plan::{Diagnostic, Input, Pipeline};

use crate::runtime::{declared, object_name, resolve};
use crate::source::TableSource;

/// How long validate waits for a server before it checks without it.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// The diagnostics of the pipeline's PostgreSQL tables found on their servers; places
/// are relative to the pipeline folder, as the planner's are.
pub async fn server_diagnostics(pipeline: &Pipeline) -> Vec<Diagnostic> {
    let mut out = vec![];
    for flow in &pipeline.flows {
        for input in &flow.inputs {
            let Input::Postgres(rp) = input else {
                continue;
            };
            let Ok(connection) =
                declared(pipeline, &rp.connection).and_then(|c| resolve(&rp.connection, c))
            else {
                continue;
            };
            let name = object_name(&pipeline.config.name, &rp.connection);
            let source = TableSource {
                connection,
                table: rp.source.clone(),
                slot: name.clone(),
                publication: name,
                max_changes: 1,
                text_columns: Default::default(),
                parking: Default::default(),
                notices: Default::default(),
            };
            let checked = tokio::time::timeout(ANSWER_WITHIN, async {
                let client = source.connection.connect().await.ok()?;
                let found = source.find(&client).await.ok()?;
                source.check_replica_identity(&found).err()
            })
            .await;
            let (Ok(Some(refused)), Some(file)) = (checked, pipeline.files.get(flow.file)) else {
                continue;
            };
            let mut d = Diagnostic::error("cdcflow::replica_identity", refused.to_string())
                .at(file.locate(rp.span, "this table"));
            if let Some(help) = refused.help() {
                d = d.help(help);
            }
            out.push(d);
        }
    }
    out
}
