//! Sources outside the pipeline's storage (a database's log, later a broker's topic),
//! behind one interface. Each kind lives in a crate of its own (`cdcflow-postgres`), so
//! its driver is compiled only into the binary that runs pipelines; the CLI hands the
//! run a [`Sources`] that opens every kind it was built with.
//!
//! A batch of a flow that reads such a source goes as a landing-file batch does
//! (checkpoint.rs): the source reads what is available after the position the flow's
//! last committed batch recorded ([`ExternalSource::read`]); the batch's offsets record
//! the position the read reached, before the commit and in it; only once the commit is
//! durable is the source told ([`Acknowledge`]), so that it may forget what came before
//! (a replication slot frees its WAL, a consumer group commits its offsets). A crash
//! before the commit reads the same input again; a crash between the commit and the
//! acknowledgement resumes from the committed position, and the source skips what it
//! had already given.

use std::sync::Arc;

use cdcflow_plan::{Input, Pipeline};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::RunError;

/// What one read of a source found.
pub struct SourceRead {
    /// The rows' schema (also when there are none).
    pub schema: SchemaRef,
    pub rows: Vec<RecordBatch>,
    /// What the batch's checkpoint records; the next read starts after it.
    pub position: Value,
    /// The batch must be committed even without rows (a first snapshot of an empty
    /// table fixes the position later reads start from).
    pub must_commit: bool,
    /// The read stopped at its size limit: the flow commits this batch and reads again.
    pub more: bool,
    /// The earliest source commit time among the rows, µs since the epoch (lag).
    pub oldest_change_micros: Option<i64>,
    /// Rows that are a broker's tombstones (records without a value: Kafka's compaction
    /// markers after a delete), counted so that the run says how many a query such as
    /// the Debezium recipe's leaves out.
    pub tombstones: u64,
    /// Per partition of a broker's topic, how far the source is ahead of `position`
    /// when the read ended (`read_kafka`; empty for other sources).
    pub lag: Vec<PartitionLag>,
    /// Run once the commit that records `position` is durable.
    pub acknowledge: Option<Box<dyn Acknowledge>>,
    /// Values the source left out that are those of the key's latest row stored
    /// before (PostgreSQL's unchanged TOASTed values).
    pub carried: Option<Carried>,
    /// Rows the source read but cannot represent (a value their column's type has
    /// none of: PostgreSQL's `infinity` in a DATE): not in `rows`, but kept in the
    /// flow's quarantine table with the reason, as a malformed landing record is.
    pub rejected: Vec<RejectedRow>,
    /// What the user should hear about this read that did not fail it (a subscribed
    /// topic that does not exist, records skipped past a gap): in the flow's report,
    /// so the run's summary and the event log say it.
    pub warnings: Vec<String>,
    /// The source table's columns that have a default, with it (as the server prints
    /// it). A column added with a default gives the rows already there a value their
    /// log never carries: a table that gains such a column fails rather than keep null
    /// for them.
    pub defaults: Vec<(String, String)>,
}

/// A row a source set apart.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectedRow {
    /// The row as the source gave it (a JSON object of its values).
    pub record: String,
    /// Why it was set apart.
    pub error: String,
}

/// Cells of a read's rows (all in `rows[0]`) that take the value of the same key's
/// latest row in the flow's target table ([`crate::carried`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Carried {
    /// The columns that name a row across changes.
    pub keys: Vec<String>,
    /// The columns that order a key's rows, oldest first.
    pub order: Vec<String>,
    /// Stored rows whose column (first) holds one of these values are not a row's
    /// values (deletes carry only the key).
    pub skip: Option<(String, Vec<String>)>,
    /// The cells.
    pub cells: Vec<CarriedCell>,
}

/// A value a change left out.
#[derive(Debug, Clone, PartialEq)]
pub struct CarriedCell {
    /// The row in `rows[0]`.
    pub row: usize,
    pub column: String,
    /// The key (`Carried::keys`' values as text) whose latest row holds the value,
    /// when it is not the row's own: an update that changed the key.
    pub key: Option<Vec<String>>,
}

/// Told that the batch holding a read is durably committed.
pub trait Acknowledge: Send {
    fn acknowledge(self: Box<Self>) -> BoxFuture<'static, Result<(), RunError>>;
}

/// One input of one flow, read from outside the pipeline's storage.
pub trait ExternalSource: Send + Sync {
    /// The key the flow's checkpoint keeps this source's position under.
    fn checkpoint_key(&self) -> String;

    /// The input's columns, asked before planning when the pipeline does not declare
    /// them.
    fn columns(&self) -> BoxFuture<'_, Result<SchemaRef, RunError>>;

    /// What is available now after `after` (`None`: nothing was read yet).
    fn read<'a>(&'a self, after: Option<&'a Value>) -> BoxFuture<'a, Result<SourceRead, RunError>>;

    /// How far the source is ahead of `after`, the position the flow committed, and
    /// what the source keeps for the pipeline meanwhile (`cdcflow status`).
    fn status<'a>(
        &'a self,
        after: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<SourceStatus, RunError>>;
}

/// What `cdcflow status` shows of a source outside the storage.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SourceStatus {
    /// The source, as its checkpoint key names it.
    pub source: String,
    /// Bytes the source keeps for the pipeline (a replication slot's retained WAL).
    pub retained_bytes: Option<i64>,
    /// Bytes of the source's log after what the flow has committed.
    pub behind_bytes: Option<i64>,
    /// Seconds from the source time up to which every change is committed to now (the
    /// source's clock): what a reader of the table does not see yet.
    pub lag_seconds: Option<f64>,
    /// The lag the source itself reports, while the pipeline reads it (PostgreSQL's
    /// `replay_lag` of the slot's walsender).
    pub server_lag_seconds: Option<f64>,
    /// Something to act on: a log kept past the warning threshold, a slot that is gone
    /// or about to be.
    pub warning: Option<String>,
    /// Per partition of a topic, how far the flow is behind (`read_kafka`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionLag>,
}

/// How far a flow is behind one partition of a broker's topic.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PartitionLag {
    /// `topic-partition`, as Kafka tools write it.
    pub partition: String,
    /// Records after the flow's committed offset.
    pub behind_messages: i64,
    /// From the timestamp of the oldest record not committed yet to now; `None` when
    /// nothing is behind.
    pub behind_seconds: Option<f64>,
}

/// Opens the source behind an input.
pub trait SourceFactory: Send + Sync {
    /// `None` when this factory does not serve the input's kind.
    fn open(
        &self,
        pipeline: &Pipeline,
        input: &Input,
    ) -> Option<Result<Box<dyn ExternalSource>, RunError>>;

    /// The tables of a sync's server in the schemas the sync names (every schema when
    /// `None`), with their primary keys; `None` when this factory does not serve the
    /// kind of the sync's connection.
    fn sync_tables<'a>(
        &'a self,
        _pipeline: &'a Pipeline,
        _sync: &'a cdcflow_plan::Sync,
    ) -> Option<BoxFuture<'a, Result<Vec<cdcflow_plan::syncs::SourceTable>, RunError>>> {
        None
    }

    /// After a run of the whole pipeline: removes what this kind keeps on servers for the
    /// pipeline and no flow reads any more (a replication slot holds WAL while it
    /// exists); what was done, for the run's summary.
    fn retire<'a>(
        &'a self,
        _pipeline: &'a Pipeline,
    ) -> BoxFuture<'a, Result<Vec<String>, RunError>> {
        Box::pin(async { Ok(vec![]) })
    }

    /// What this kind keeps on the pipeline's servers that no pipeline folder claims
    /// (`cdcflow status`).
    fn strays<'a>(&'a self, _pipeline: &'a Pipeline) -> BoxFuture<'a, Vec<StrayCursor>> {
        Box::pin(async { vec![] })
    }

    /// After the last batch of a run (the end of `cdcflow run`, or of `run
    /// --continuous`): ends what this kind kept open from one batch to the next (a
    /// replication session), once the server has what it was told is committed.
    fn finish(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A cursor a source kind keeps on a server (a PostgreSQL replication slot) that no
/// pipeline folder claims: it keeps the server's log for nobody.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StrayCursor {
    /// Its name on the server.
    #[serde(rename = "stray_slot")]
    pub name: String,
    /// `host:port/database`.
    pub server: String,
    /// The log it keeps on the server.
    pub retained_bytes: Option<i64>,
    /// A session reads it now.
    pub active: bool,
    /// The folder that last claimed it (which no longer holds that pipeline storage).
    pub last_claimed_by: Option<String>,
}

/// Several kinds of source: the first factory that serves an input opens it.
pub struct AnyOf(pub Vec<Arc<dyn SourceFactory>>);

impl SourceFactory for AnyOf {
    fn open(
        &self,
        pipeline: &Pipeline,
        input: &Input,
    ) -> Option<Result<Box<dyn ExternalSource>, RunError>> {
        self.0.iter().find_map(|f| f.open(pipeline, input))
    }

    fn sync_tables<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        sync: &'a cdcflow_plan::Sync,
    ) -> Option<BoxFuture<'a, Result<Vec<cdcflow_plan::syncs::SourceTable>, RunError>>> {
        self.0.iter().find_map(|f| f.sync_tables(pipeline, sync))
    }

    fn retire<'a>(
        &'a self,
        pipeline: &'a Pipeline,
    ) -> BoxFuture<'a, Result<Vec<String>, RunError>> {
        Box::pin(async move {
            let mut notes = vec![];
            for f in &self.0 {
                notes.extend(f.retire(pipeline).await?);
            }
            Ok(notes)
        })
    }

    fn strays<'a>(&'a self, pipeline: &'a Pipeline) -> BoxFuture<'a, Vec<StrayCursor>> {
        Box::pin(async move {
            let mut out = vec![];
            for f in &self.0 {
                out.extend(f.strays(pipeline).await);
            }
            out
        })
    }

    fn finish(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for f in &self.0 {
                f.finish().await;
            }
        })
    }
}

/// The source kinds a run can open.
#[derive(Clone)]
pub struct Sources(pub Arc<dyn SourceFactory>);

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sources")
    }
}

impl Sources {
    /// The source behind `input`; an error naming the kind when this build has none.
    pub fn open(
        &self,
        pipeline: &Pipeline,
        input: &Input,
    ) -> Result<Box<dyn ExternalSource>, RunError> {
        self.0
            .open(pipeline, input)
            .unwrap_or_else(|| Err(missing_kind(input)))
    }
}

/// The error for an input whose kind no source of this build reads.
pub fn missing_kind(input: &Input) -> RunError {
    let what = match input {
        Input::Postgres(_) => "read_postgres",
        Input::Mysql(_) => "read_mysql",
        Input::Query(_) => "read_query",
        Input::Kafka(_) => "read_kafka",
        Input::Files(_) | Input::Dataset { .. } | Input::Delta(_) => "this input",
    };
    RunError::input(format!(
        "this run cannot open {what}: no source for it was given"
    ))
    .with_help("run the pipeline with the cdcflow binary, which has every source kind")
}

/// The columns of every external source whose columns the pipeline does not declare,
/// asked of the sources, by their planner key; the pipeline is then loaded again with
/// them ([`cdcflow_plan::load_with_columns`]) so that its flows are planned.
pub async fn undeclared_columns(
    pipeline: &Pipeline,
    sources: &Sources,
) -> Result<std::collections::BTreeMap<String, SchemaRef>, RunError> {
    let mut found = std::collections::BTreeMap::new();
    for flow in &pipeline.flows {
        for input in &flow.inputs {
            let (declared, key) = match input {
                Input::Postgres(rp) => (rp.declared_columns.is_some(), rp.key()),
                Input::Mysql(rm) => (rm.declared_columns.is_some(), rm.key()),
                Input::Query(rq) => (rq.declared_columns.is_some(), rq.key()),
                _ => continue,
            };
            if declared || found.contains_key(&key) {
                continue;
            }
            let columns = sources.open(pipeline, input)?.columns().await?;
            found.insert(key, columns);
        }
    }
    Ok(found)
}

/// The oldest and the newest value of a read's commit time column (`column`, a
/// timestamp in µs), nulls left out: the read's lag, and what a read that stopped at its
/// size limit has applied up to.
pub fn commit_time_range(rows: &RecordBatch, column: &str) -> (Option<i64>, Option<i64>) {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::TimestampMicrosecondType;
    let Some(at) = rows
        .column_by_name(column)
        .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>())
    else {
        return (None, None);
    };
    let times = || {
        (0..at.len())
            .filter(|i| at.is_valid(*i))
            .map(|i| at.value(i))
    };
    (times().min(), times().max())
}
