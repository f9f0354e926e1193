//! What `cdcflow validate` checks on a MySQL server when it answers: a table `run` would
//! refuse (missing, not InnoDB, without a primary key, a column of a type the log and a
//! `SELECT` disagree on) or a server whose binary log cannot be read as `read_mysql`
//! needs it is an error at the `read_mysql` call, found in CI before any run. A server
//! that does not answer in a few seconds (or a secret not set) is no problem of the
//! files: validate stays offline then.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use cdcflow_plan::{Diagnostic, Input, Pipeline};

use crate::columns;
use crate::connection::{MysqlError, resolve};
use crate::server;

/// How long validate waits for a server before it checks without it.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// The diagnostics of the pipeline's MySQL tables found on their servers; places are
/// relative to the pipeline folder, as the planner's are.
pub async fn server_diagnostics(pipeline: &Pipeline) -> Vec<Diagnostic> {
    let mut out = vec![];
    for flow in &pipeline.flows {
        for input in &flow.inputs {
            let Input::Mysql(rm) = input else {
                continue;
            };
            let Ok(connection) = cdcflow_postgres::runtime::declared(pipeline, &rm.connection)
                .and_then(|c| resolve(&rm.connection, c))
            else {
                continue;
            };
            let checked = tokio::time::timeout(ANSWER_WITHIN, async {
                let mut conn = match connection.connect().await {
                    Ok(conn) => conn,
                    Err(e) => return Err(e.message),
                };
                let refused: Option<MysqlError> = match server::check_ready(&mut conn).await {
                    Err(e) if !e.unreachable => Some(e),
                    Err(_) => None,
                    Ok(_) => columns::read(&mut conn, &rm.source)
                        .await
                        .err()
                        .filter(|e| !e.unreachable),
                };
                let _ = conn.disconnect().await;
                Ok(refused)
            })
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", ANSWER_WITHIN.as_secs())));
            let Some(file) = pipeline.files.get(flow.file) else {
                continue;
            };
            let at = file.locate(rm.span, "this table");
            match checked {
                Ok(None) => {}
                Ok(Some(refused)) => out.push(
                    Diagnostic::error("cdcflow::read_mysql", refused.message)
                        .at(at)
                        .help(refused.help),
                ),
                Err(why) => out.push(
                    Diagnostic::warning(
                        cdcflow_postgres::validate::UNCHECKED,
                        format!(
                            "MySQL connection `{}` could not be used: {why}; `{}` was not checked on the server (its columns, key and binary log are checked by the run)",
                            rm.connection, rm.source
                        ),
                    )
                    .at(at)
                    .help("check the connection's host, port, user and password (pipeline.yaml, connections:)"),
                ),
            }
        }
    }
    out
}
