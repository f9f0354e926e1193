//! The PostgreSQL source behind the runtime's source interface
//! ([`cdcflow_runtime::sources`]): a `read_postgres` input becomes a [`TableSource`]
//! with the connection of pipeline.yaml (secrets from the environment), one slot and
//! one publication per pipeline and connection (shared by all the tables the pipeline
//! reads through it), and a checkpoint position that is the LSN read up to. Each table
//! commits its position in its own flow's checkpoint; the shared slot is acknowledged
//! only up to the lowest position all of them have committed.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use cdcflow_plan::connections::{Connection, PemSource, SslMode, Target};
use cdcflow_plan::read_postgres::ReadPostgres;
use cdcflow_plan::read_postgres::{CHANGE_SEQ, CHANGE_TYPE, COMMIT_LSN};
use cdcflow_plan::{Input, Pipeline};
use cdcflow_runtime::sources::{
    Acknowledge, Carried, ExternalSource, SourceFactory, SourceRead, SourceStatus,
};
use cdcflow_runtime::{ErrorCode, RunError};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef, TimestampMicrosecondType};
use futures::future::BoxFuture;
use serde_json::Value;

use crate::client_cert::{ClientCert, Pem};
use crate::connection::PgConnection;
use crate::error::PgError;
use crate::position;
use crate::source::{Changes, ReadFrom, TableSource};
use crate::tls::Tls;

/// Told how a table's initial copy goes (a terminal's progress line).
pub type CopyProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Opens `read_postgres` inputs.
#[derive(Default, Clone)]
pub struct PostgresSources {
    /// Told after each chunk of a table's initial copy.
    pub progress: Option<CopyProgressSink>,
}

impl std::fmt::Debug for PostgresSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostgresSources")
    }
}

impl SourceFactory for PostgresSources {
    fn open(
        &self,
        pipeline: &Pipeline,
        input: &Input,
    ) -> Option<Result<Box<dyn ExternalSource>, RunError>> {
        let Input::Postgres(rp) = input else {
            return None;
        };
        Some(open(pipeline, rp).map(|mut s| {
            s.progress.clone_from(&self.progress);
            Box::new(s) as Box<dyn ExternalSource>
        }))
    }
}

/// The runtime's error for a source error, with its help.
fn run_error(e: PgError) -> RunError {
    named_error("PostgreSQL source", e)
}

/// As [`run_error`], saying which of pipeline.yaml's connections failed.
fn connection_error(connection: &str, e: PgError) -> RunError {
    named_error(&format!("PostgreSQL connection `{connection}`"), e)
}

fn named_error(what: &str, e: PgError) -> RunError {
    let help = e.help().map(String::from);
    let error = RunError::user(ErrorCode::Source, format!("{what}: {e}"));
    drop(e);
    match help {
        Some(h) => error.with_help(h),
        None => error,
    }
}

/// Connection `name` of pipeline.yaml.
pub fn declared<'a>(pipeline: &'a Pipeline, name: &str) -> Result<&'a Connection, RunError> {
    pipeline.config.connections.get(name).ok_or_else(|| {
        RunError::input(format!(
            "unknown connection `{name}` (pipeline.yaml, connections:)"
        ))
    })
}

fn open(pipeline: &Pipeline, rp: &ReadPostgres) -> Result<PgSource, RunError> {
    let connection = resolve(&rp.connection, declared(pipeline, &rp.connection)?)?;
    let name = object_name(&pipeline.config.name, &rp.connection);
    Ok(PgSource {
        source: TableSource {
            connection,
            table: rp.source.clone(),
            slot: name.clone(),
            publication: name,
            max_changes: usize::try_from(rp.max_changes_per_batch).unwrap_or(usize::MAX),
            text_columns: declared_strings(rp),
        },
        key: rp.key(),
        connection_name: rp.connection.clone(),
        readers: Arc::new(readers(pipeline, &rp.connection)),
        progress: None,
    })
}

/// The columns `schema =>` declares STRING: they keep PostgreSQL's text.
fn declared_strings(rp: &ReadPostgres) -> Vec<String> {
    rp.declared_columns
        .iter()
        .flat_map(|s| s.fields().iter())
        .filter(|f| f.data_type() == &datafusion::arrow::datatypes::DataType::Utf8)
        .map(|f| f.name().clone())
        .collect()
}

/// Every input of the pipeline that reads through connection `connection` (so through
/// its slot), with the flow whose checkpoint keeps its position.
fn readers(pipeline: &Pipeline, connection: &str) -> SlotReaders {
    let inputs = pipeline
        .flows
        .iter()
        .filter_map(|flow| Some((flow, pipeline.dataset(&flow.target)?)))
        .flat_map(|(flow, target)| {
            flow.inputs.iter().filter_map(move |input| match input {
                Input::Postgres(rp) if rp.connection == connection => {
                    Some((flow.name.clone(), target.clone(), rp.key()))
                }
                _ => None,
            })
        })
        .collect();
    SlotReaders {
        storage: pipeline.storage_dir(),
        inputs,
    }
}

/// The inputs that share one slot, and where their positions are committed.
struct SlotReaders {
    storage: std::path::PathBuf,
    /// (flow, its target, the input's checkpoint key).
    inputs: Vec<(String, cdcflow_plan::Dataset, String)>,
}

impl SlotReaders {
    /// The lowest position any of them has committed (inputs that have committed
    /// nothing yet take their own snapshot later, at a point past every position).
    async fn lowest_committed(&self) -> Result<Option<u64>, RunError> {
        let mut lowest: Option<u64> = None;
        for (flow, target, key) in &self.inputs {
            let committed =
                cdcflow_runtime::checkpoint::committed_position(&self.storage, flow, target, key)
                    .await?;
            if let Some(position) = committed.as_ref().map(position::lsn_of).transpose()? {
                lowest = Some(lowest.map_or(position, |l| l.min(position)));
            }
        }
        Ok(lowest)
    }
}

/// The secret of connection `name` in environment variable `var`.
pub fn env_secret(name: &str, var: &str) -> Result<String, RunError> {
    std::env::var(var).map_err(|_| {
        RunError::input(format!(
            "connection `{name}`: the environment variable `{var}` is not set"
        ))
        .with_help(format!(
            "export {var}=… before running (pipeline.yaml names it; the secret is never in the files)"
        ))
    })
}

/// The connection `name` with its secret from the environment.
pub fn resolve(name: &str, c: &Connection) -> Result<PgConnection, RunError> {
    let env = |var: &str| env_secret(name, var);
    let mut connection = match &c.target {
        Target::DsnEnv(var) => {
            PgConnection::from_dsn(&env(var)?).map_err(|e| connection_error(name, e))?
        }
        Target::Parts {
            host,
            port,
            database,
            user,
            password_env,
        } => PgConnection {
            host: host.clone(),
            port: *port,
            database: database.clone(),
            user: user.clone(),
            password: password_env.as_deref().map(env).transpose()?,
            tls: Tls::default(),
        },
    };
    let tls = tls(name, c, connection.tls.mode)?;
    connection.tls = tls;
    Ok(connection)
}

/// The TLS settings of connection `name` (`default` when it names no `sslmode`), the
/// client key's PEM text read from the environment.
pub fn tls(name: &str, c: &Connection, default: SslMode) -> Result<Tls, RunError> {
    Ok(Tls {
        mode: c.sslmode.unwrap_or(default),
        root_cert: c.sslrootcert.as_ref().map(std::path::PathBuf::from),
        client_cert: c
            .client_cert
            .as_ref()
            .map(|cert| client_cert(name, cert))
            .transpose()?,
    })
}

/// The client certificate and key of connection `name`, PEM text read from the
/// environment.
pub fn client_cert(
    name: &str,
    cert: &cdcflow_plan::connections::ClientCert,
) -> Result<ClientCert, RunError> {
    let pem = |source: &PemSource| match source {
        PemSource::File(path) => Ok(Pem::File(path.into())),
        PemSource::Env(var) => Pem::from_text(var, env_secret(name, var)?)
            .map_err(|e| RunError::input(format!("connection `{name}`: {e}"))),
    };
    Ok(ClientCert {
        cert: pem(&cert.cert)?,
        key: pem(&cert.key)?,
    })
}

/// A slot and publication name for `connection` of `pipeline`: lower-case letters,
/// digits and `_`, at most 63 bytes (PostgreSQL's limit), unique per pipeline and
/// connection.
pub fn object_name(pipeline: &str, connection: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9') => c,
                _ => '_',
            })
            .collect()
    };
    let full = format!("cdcflow_{}_{}", clean(pipeline), clean(connection));
    if full.len() <= 63 {
        return full;
    }
    // Too long: a prefix and a hash of the whole name.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}_{hash:016x}", &full[..46])
}

struct PgSource {
    source: TableSource,
    /// The connection's name in pipeline.yaml.
    connection_name: String,
    key: String,
    readers: Arc<SlotReaders>,
    progress: Option<CopyProgressSink>,
}

impl ExternalSource for PgSource {
    fn status<'a>(
        &'a self,
        after: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<SourceStatus, RunError>> {
        Box::pin(PgSource::status(self, after))
    }

    fn checkpoint_key(&self) -> String {
        self.key.clone()
    }

    fn columns(&self) -> BoxFuture<'_, Result<SchemaRef, RunError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let columns = self
                .source
                .columns(&client)
                .await
                .map_err(|e| self.error(e))?;
            let fields: Vec<Field> = columns
                .iter()
                .map(|c| Field::new(&c.name, c.arrow_type(), !c.not_null))
                .collect();
            Ok(Arc::new(Schema::new(fields)))
        })
    }

    fn read<'a>(&'a self, after: Option<&'a Value>) -> BoxFuture<'a, Result<SourceRead, RunError>> {
        Box::pin(async move {
            let from = after.map(position::parse).transpose()?.unwrap_or_default();
            let mut changes = self
                .source
                .read_from(&from.from)
                .await
                .map_err(|e| self.error(e))?;
            let schema = changes.rows.schema();
            let rows = std::mem::replace(
                &mut changes.rows,
                RecordBatch::new_empty(Arc::clone(&schema)),
            );
            let oldest = oldest_commit(&rows);
            let carried = (!changes.unresolved.is_empty()).then(|| Carried {
                keys: changes.keys.clone(),
                order: vec![COMMIT_LSN.into(), CHANGE_SEQ.into()],
                skip: Some((CHANGE_TYPE.into(), vec!["delete".into(), "truncate".into()])),
                cells: std::mem::take(&mut changes.unresolved),
            });
            // A read that stopped at its size limit has applied up to its last
            // transaction; one that read all has applied up to when it began; while
            // the table is being copied, it is applied up to no time.
            let applied_until = match (changes.copy.copied(), changes.more) {
                (Some(_), _) => None,
                (None, true) => newest_commit(&rows),
                (None, false) => Some(changes.read_at_micros),
            };
            let must_commit = changes.snapshot
                || (rows.num_rows() == 0
                    && changes.within.is_none()
                    && position::idle_commit(&from, changes.position, changes.read_at_micros));
            if let (Some(tell), Some(copied)) = (&self.progress, changes.copy.copied()) {
                let of = changes
                    .estimate
                    .filter(|e| *e >= copied)
                    .map(|e| format!(" of about {e}"))
                    .unwrap_or_default();
                tell(&format!("copying {}: {copied}{of} rows", self.source.table));
            }
            let rejected = std::mem::take(&mut changes.rejected);
            let next = position::Position {
                from: ReadFrom {
                    lsn: Some(changes.position),
                    within: changes.within,
                    copy: changes.copy.clone(),
                },
                applied_until_micros: applied_until,
            };
            Ok(SourceRead {
                schema,
                rows: vec![rows],
                position: next.to_json(),
                must_commit,
                more: changes.more,
                oldest_change_micros: oldest,
                tombstones: 0,
                lag: vec![],
                acknowledge: Some(Box::new(PgAcknowledge {
                    source: self.source.clone(),
                    changes,
                    readers: Arc::clone(&self.readers),
                })),
                carried,
                rejected,
            })
        })
    }
}

/// Retained WAL over this is a warning in `cdcflow status`.
const RETAINED_WARNING_BYTES: i64 = 1 << 30;
/// A lag over this many seconds is a warning in `cdcflow status`.
const LAG_WARNING_SECONDS: f64 = 900.0;

impl PgSource {
    fn error(&self, e: PgError) -> RunError {
        connection_error(&self.connection_name, e)
    }

    async fn client(&self) -> Result<tokio_postgres::Client, RunError> {
        self.source
            .connection
            .connect()
            .await
            .map_err(|e| self.error(e))
    }

    async fn status(&self, after: Option<&Value>) -> Result<SourceStatus, RunError> {
        let mut status = SourceStatus {
            source: self.key.clone(),
            ..SourceStatus::default()
        };
        let committed = after.map(position::parse).transpose()?;
        let after = committed.as_ref().and_then(|c| c.from.lsn);
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT (pg_current_wal_lsn() - s.restart_lsn)::bigint, coalesce(s.wal_status, ''), pg_current_wal_lsn()::text, \
                 (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, extract(epoch FROM r.replay_lag)::float8 \
                 FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid \
                 WHERE s.slot_name = $1",
                &[&self.source.slot],
            )
            .await
            .map_err(|e| self.error(e.into()))?;
        let Some(row) = row else {
            status.warning = Some(match after {
                None => "not started: the first run creates the slot and takes the snapshot".into(),
                Some(_) => format!(
                    "replication slot `{}` is gone: the next run fails; `cdcflow run --full-refresh <table>` takes a new snapshot",
                    self.source.slot
                ),
            });
            return Ok(status);
        };
        let retained: Option<i64> = row.get(0);
        let wal_status: String = row.get(1);
        let current: String = row.get(2);
        let now_micros: i64 = row.get(3);
        status.server_lag_seconds = row.get(4);
        status.retained_bytes = retained;
        status.lag_seconds = committed
            .and_then(|c| c.applied_until_micros)
            .map(|at| (now_micros - at).max(0) as f64 / 1e6);
        if let (Some(after), Ok(current)) = (after, pgwire_replication::Lsn::parse(&current)) {
            status.behind_bytes =
                Some(i64::try_from(current.as_u64().saturating_sub(after)).unwrap_or(i64::MAX));
        }
        status.warning = match wal_status.as_str() {
            "lost" => Some(format!(
                "replication slot `{}` was invalidated by the server: changes were lost; `cdcflow run --full-refresh <table>` takes a new snapshot",
                self.source.slot
            )),
            "unreserved" => Some(format!(
                "replication slot `{}` is past max_slot_wal_keep_size: the server may invalidate it at its next checkpoint; run the pipeline now",
                self.source.slot
            )),
            _ if retained.is_some_and(|r| r > RETAINED_WARNING_BYTES) => Some(
                "the slot keeps over 1 GiB of WAL on the server: run the pipeline (a stopped pipeline holds WAL), or drop the slot if the pipeline is retired".into(),
            ),
            _ if status.lag_seconds.is_some_and(|l| l > LAG_WARNING_SECONDS) => Some(format!(
                "the table's changes are applied only up to {:.0} s ago (over {LAG_WARNING_SECONDS:.0} s): run the pipeline, or run it more often",
                status.lag_seconds.unwrap_or_default()
            )),
            _ => None,
        };
        Ok(status)
    }
}

/// The rows' commit times, µs since the epoch.
fn commit_times(rows: &RecordBatch) -> impl Iterator<Item = i64> + '_ {
    let at = rows
        .column_by_name(cdcflow_plan::read_postgres::COMMIT_TIMESTAMP)
        .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>());
    at.into_iter().flat_map(|at| {
        (0..at.len())
            .filter(|i| at.is_valid(*i))
            .map(|i| at.value(i))
    })
}

fn oldest_commit(rows: &RecordBatch) -> Option<i64> {
    commit_times(rows).min()
}

fn newest_commit(rows: &RecordBatch) -> Option<i64> {
    commit_times(rows).max()
}

struct PgAcknowledge {
    source: TableSource,
    changes: Changes,
    readers: Arc<SlotReaders>,
}

impl Acknowledge for PgAcknowledge {
    fn acknowledge(self: Box<Self>) -> BoxFuture<'static, Result<(), RunError>> {
        Box::pin(async move {
            // Run after this read's commit, so its own position is among them.
            let floor = self.readers.lowest_committed().await?;
            self.source
                .acknowledge_to(self.changes, floor)
                .await
                .map_err(run_error)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_fit_postgres() {
        assert_eq!(object_name("CRM Sync", "crm"), "cdcflow_crm_sync_crm");
        let long = object_name(&"p".repeat(80), "crm");
        assert_eq!(long.len(), 63);
        assert_ne!(long, object_name(&"p".repeat(81), "crm"));
    }
}
