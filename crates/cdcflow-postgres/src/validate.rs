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

/// The code of the warning that a source's server could not be used for the checks.
pub const UNCHECKED: &str = "cdcflow::server_unchecked";

/// What the server said of a table.
enum Checked {
    Fine,
    /// The server could not be reached, or refused the login.
    Unreached(String),
    Refused(crate::error::PgError),
}

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
                clients: Default::default(),
                notices: Default::default(),
                shared: None,
            };
            let checked = tokio::time::timeout(ANSWER_WITHIN, async {
                let client = match source.connection.connect().await {
                    Ok(client) => client,
                    Err(e) => return Checked::Unreached(e.to_string()),
                };
                let Ok(found) = source.find(&client).await else {
                    return Checked::Fine;
                };
                match source.check_replica_identity(&found) {
                    Err(refused) => Checked::Refused(refused),
                    Ok(()) => Checked::Fine,
                }
            })
            .await
            .unwrap_or_else(|_| {
                Checked::Unreached(format!("no answer within {} s", ANSWER_WITHIN.as_secs()))
            });
            let Some(file) = pipeline.files.get(flow.file) else {
                continue;
            };
            let at = file.locate(rp.span, "this table");
            match checked {
                Checked::Fine => {}
                Checked::Unreached(why) => out.push(
                    Diagnostic::warning(
                        UNCHECKED,
                        format!(
                            "PostgreSQL connection `{}` could not be used: {why}; `{}` was not checked on the server (its columns, replica identity and publication are checked by the run)",
                            rp.connection, rp.source
                        ),
                    )
                    .at(at)
                    .help("check the connection's host, port, user and password (pipeline.yaml, connections:)"),
                ),
                Checked::Refused(refused) => {
                    let mut d = Diagnostic::error("cdcflow::replica_identity", refused.to_string())
                        .at(at);
                    if let Some(help) = refused.help() {
                        d = d.help(help);
                    }
                    out.push(d);
                }
            }
        }
    }
    out
}
