//! The MySQL source behind the runtime's source interface
//! ([`cdcflow_runtime::sources`]): a `read_mysql` input becomes a [`TableSource`] with
//! the connection of pipeline.yaml (secrets from the environment), and a checkpoint
//! position that is the binary log place read up to.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use cdcflow_plan::connections::ConnectionKind;
use cdcflow_plan::read_mysql::{COMMIT_TIMESTAMP, ReadMysql};
use cdcflow_plan::syncs::SourceTable;
use cdcflow_plan::{Input, Pipeline};
use cdcflow_runtime::RunError;
use cdcflow_runtime::sources::{
    ExternalSource, SourceFactory, SourceRead, SourceStatus, commit_time_range,
};
use datafusion::arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use serde_json::Value;

use std::collections::HashMap;
use std::sync::Arc;

use crate::columns::table_schema;
use crate::connection::MysqlError;
use crate::position::{Copy, Position};
use crate::shared_log::{Reader, SharedLog};
use crate::source::TableSource;

/// Told how a table's initial copy goes (a terminal's progress line).
pub type CopyProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Opens `read_mysql` inputs.
#[derive(Default, Clone)]
pub struct MysqlSources {
    /// Told after each chunk of a table's initial copy.
    pub progress: Option<CopyProgressSink>,
    /// The binary log of each connection, read once for all its tables, by connection.
    logs: Arc<std::sync::Mutex<HashMap<String, Arc<SharedLog>>>>,
}

impl MysqlSources {
    /// Sources that tell `progress` after each chunk of a table's initial copy.
    pub fn with_progress(progress: CopyProgressSink) -> Self {
        Self {
            progress: Some(progress),
            ..Self::default()
        }
    }
}

impl std::fmt::Debug for MysqlSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MysqlSources")
    }
}

impl SourceFactory for MysqlSources {
    fn open(
        &self,
        pipeline: &Pipeline,
        input: &Input,
    ) -> Option<Result<Box<dyn ExternalSource>, RunError>> {
        let Input::Mysql(rm) = input else {
            return None;
        };
        Some(open(pipeline, rm).map(|mut s| {
            s.progress.clone_from(&self.progress);
            if let Ok(mut logs) = self.logs.lock() {
                let log = logs
                    .entry(rm.connection.clone())
                    .or_insert_with(|| Arc::new(SharedLog::new(readers(pipeline, &rm.connection))));
                s.source.log = Some(Arc::clone(log));
            }
            Box::new(s) as Box<dyn ExternalSource>
        }))
    }

    fn sync_tables<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        sync: &'a cdcflow_plan::Sync,
    ) -> Option<BoxFuture<'a, Result<Vec<SourceTable>, RunError>>> {
        if sync.kind != ConnectionKind::Mysql {
            return None;
        }
        Some(Box::pin(async move {
            let declared = cdcflow_postgres::runtime::declared(pipeline, &sync.connection)?;
            let connection = crate::connection::resolve(&sync.connection, declared)?;
            let function = format!("sync `{}`", sync.name);
            let error = |e: MysqlError| e.into_run_error(&function, &sync.connection);
            let mut conn = connection.connect().await.map_err(error)?;
            let tables = crate::tables::list(&mut conn, sync.schemas.as_deref()).await;
            let _ = conn.disconnect().await;
            tables.map_err(error)
        }))
    }
}

/// Every table the pipeline reads through `connection`, with the flow whose checkpoint
/// keeps its place (one binary log reader serves them all).
fn readers(pipeline: &Pipeline, connection: &str) -> Vec<Reader> {
    let mut out = vec![];
    for flow in &pipeline.flows {
        let Some(target) = pipeline.dataset(&flow.target) else {
            continue;
        };
        for input in &flow.inputs {
            if let Input::Mysql(rm) = input
                && rm.connection == connection
                && let Ok(source) = open(pipeline, rm)
            {
                out.push(Reader {
                    source: source.source,
                    storage: pipeline.storage(),
                    flow: flow.name.clone(),
                    target: target.clone(),
                    key: rm.key(),
                });
            }
        }
    }
    out
}

fn open(pipeline: &Pipeline, rm: &ReadMysql) -> Result<MysqlSource, RunError> {
    let declared = cdcflow_postgres::runtime::declared(pipeline, &rm.connection)?;
    let connection = crate::connection::resolve(&rm.connection, declared)?;
    let text_columns = rm
        .declared_columns
        .iter()
        .flat_map(|s| s.fields().iter())
        .filter(|f| f.data_type() == &datafusion::arrow::datatypes::DataType::Utf8)
        .map(|f| f.name().clone())
        .collect();
    Ok(MysqlSource {
        source: TableSource {
            connection,
            table: rm.source.clone(),
            max_changes: rm.max_changes_per_batch,
            text_columns,
            log: None,
        },
        key: rm.key(),
        connection_name: rm.connection.clone(),
        progress: None,
    })
}

struct MysqlSource {
    source: TableSource,
    key: String,
    connection_name: String,
    progress: Option<CopyProgressSink>,
}

/// A lag over this many seconds is a warning in `cdcflow status`.
const LAG_WARNING_SECONDS: f64 = 900.0;

impl MysqlSource {
    fn error(&self, e: MysqlError) -> RunError {
        e.into_run_error("read_mysql", &self.connection_name)
    }

    async fn read(&self, after: Option<&Value>) -> Result<SourceRead, RunError> {
        let committed = after.map(Position::parse).transpose()?;
        let read = self
            .source
            .read(committed.as_ref())
            .await
            .map_err(|e| self.error(e))?;
        if let (Some(tell), Copy::After { copied, .. }) = (&self.progress, &read.position.copy) {
            let of = read
                .estimate
                .filter(|e| e >= copied)
                .map(|e| format!(" of about {e}"))
                .unwrap_or_default();
            tell(&format!("copying {}: {copied}{of} rows", self.source.table));
        }
        let rows = read.rows.rows;
        // A read that stopped at its size limit has applied up to its last
        // transaction; one that read all has applied up to when it began; while the
        // table is being copied, it is applied up to no time.
        let applied_until = match (read.chunk, read.more) {
            (true, _) => None,
            (false, true) => commit_time_range(&rows, COMMIT_TIMESTAMP).1,
            (false, false) => Some(read.read_at_micros),
        };
        let position = Position {
            applied_until_micros: applied_until,
            ..read.position
        };
        Ok(SourceRead {
            schema: rows.schema(),
            oldest_change_micros: commit_time_range(&rows, COMMIT_TIMESTAMP).0,
            rows: vec![rows],
            position: position.to_json(),
            must_commit: read.must_commit,
            more: read.more,
            tombstones: 0,
            lag: vec![],
            acknowledge: None,
            carried: None,
            rejected: read.rows.rejected,
            warnings: vec![],
            defaults: read.defaults,
        })
    }

    async fn status(&self, after: Option<&Value>) -> Result<SourceStatus, RunError> {
        let mut status = SourceStatus {
            source: self.key.clone(),
            ..SourceStatus::default()
        };
        let Some(committed) = after.map(Position::parse).transpose()? else {
            status.warning = Some("not started: the first run takes the snapshot".into());
            return Ok(status);
        };
        let (behind, now) = self
            .source
            .behind(&committed.at)
            .await
            .map_err(|e| self.error(e))?;
        status.behind_bytes = behind.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        status.lag_seconds = committed
            .applied_until_micros
            .map(|at| (now - at).max(0) as f64 / 1e6);
        status.warning = match behind {
            None => Some(format!(
                "the binary log file {} the flow goes on from is gone from the server: the next run fails; `cdcflow run --full-refresh <table>` takes a new snapshot",
                committed.at.file
            )),
            Some(_) if status.lag_seconds.is_some_and(|l| l > LAG_WARNING_SECONDS) => {
                Some(format!(
                    "the table's changes are applied only up to {:.0} s ago (over {LAG_WARNING_SECONDS:.0} s): run the pipeline, or run it more often",
                    status.lag_seconds.unwrap_or_default()
                ))
            }
            Some(_) if matches!(committed.copy, Copy::After { .. }) => {
                Some("the initial copy goes on: the next run copies more".into())
            }
            Some(_) => None,
        };
        Ok(status)
    }
}

impl ExternalSource for MysqlSource {
    fn checkpoint_key(&self) -> String {
        self.key.clone()
    }

    fn columns(&self) -> BoxFuture<'_, Result<SchemaRef, RunError>> {
        Box::pin(async move {
            let columns = self.source.columns().await.map_err(|e| self.error(e))?;
            Ok(table_schema(&columns))
        })
    }

    fn read<'a>(&'a self, after: Option<&'a Value>) -> BoxFuture<'a, Result<SourceRead, RunError>> {
        Box::pin(MysqlSource::read(self, after))
    }

    fn status<'a>(
        &'a self,
        after: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<SourceStatus, RunError>> {
        Box::pin(MysqlSource::status(self, after))
    }
}
