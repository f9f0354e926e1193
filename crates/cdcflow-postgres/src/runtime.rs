//! The PostgreSQL source behind the runtime's source interface
//! ([`cdcflow_runtime::sources`]): a `read_postgres` input becomes a [`TableSource`]
//! with the connection of pipeline.yaml (secrets from the environment), a slot and a
//! publication named after the pipeline and the flow, and a checkpoint position that is
//! the LSN read up to.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use cdcflow_plan::connections::{Connection, Target};
use cdcflow_plan::read_postgres::ReadPostgres;
use cdcflow_plan::read_postgres::{CHANGE_SEQ, CHANGE_TYPE, COMMIT_LSN};
use cdcflow_plan::{Input, Pipeline};
use cdcflow_runtime::RunError;
use cdcflow_runtime::sources::{
    Acknowledge, Carried, ExternalSource, SourceFactory, SourceRead, SourceStatus,
};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef, TimestampMicrosecondType};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::connection::PgConnection;
use crate::error::PgError;
use crate::source::{Changes, TableSource, lsn_text};

/// Opens `read_postgres` inputs.
#[derive(Debug, Default, Clone, Copy)]
pub struct PostgresSources;

impl SourceFactory for PostgresSources {
    fn open(
        &self,
        pipeline: &Pipeline,
        input: &Input,
    ) -> Option<Result<Box<dyn ExternalSource>, RunError>> {
        let Input::Postgres(rp) = input else {
            return None;
        };
        Some(open(pipeline, rp).map(|s| Box::new(s) as Box<dyn ExternalSource>))
    }
}

/// The runtime's error for a source error, with its help.
fn run_error(e: PgError) -> RunError {
    let help = e.help().map(String::from);
    let error = RunError::input(format!("PostgreSQL source: {e}"));
    drop(e);
    match help {
        Some(h) => error.with_help(h),
        None => error,
    }
}

fn open(pipeline: &Pipeline, rp: &ReadPostgres) -> Result<PgSource, RunError> {
    let connection = pipeline
        .config
        .connections
        .get(&rp.connection)
        .ok_or_else(|| {
            RunError::input(format!(
                "unknown connection `{}` (pipeline.yaml, connections:)",
                rp.connection
            ))
        })?;
    let connection = resolve(&rp.connection, connection)?;
    let name = object_name(&pipeline.config.name, &rp.table);
    Ok(PgSource {
        source: TableSource {
            connection,
            table: rp.source.clone(),
            slot: name.clone(),
            publication: name,
            max_changes: usize::try_from(rp.max_changes_per_batch).unwrap_or(usize::MAX),
        },
        key: rp.key(),
    })
}

/// The connection `name` with its secret from the environment.
pub fn resolve(name: &str, c: &Connection) -> Result<PgConnection, RunError> {
    let env = |var: &str| {
        std::env::var(var).map_err(|_| {
            RunError::input(format!(
                "connection `{name}`: the environment variable `{var}` is not set"
            ))
            .with_help(format!(
                "export {var}=… before running (pipeline.yaml names it; the secret is never in the files)"
            ))
        })
    };
    match &c.target {
        Target::DsnEnv(var) => PgConnection::from_dsn(&env(var)?).map_err(run_error),
        Target::Parts {
            host,
            port,
            database,
            user,
            password_env,
        } => Ok(PgConnection {
            host: host.clone(),
            port: *port,
            database: database.clone(),
            user: user.clone(),
            password: password_env.as_deref().map(env).transpose()?,
        }),
    }
}

/// A slot and publication name for `input` of `pipeline`: lower-case letters, digits
/// and `_`, at most 63 bytes (PostgreSQL's limit), unique per pipeline and flow input.
pub fn object_name(pipeline: &str, input: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9') => c,
                _ => '_',
            })
            .collect()
    };
    let input = input.trim_start_matches('_');
    let full = format!("cdcflow_{}_{}", clean(pipeline), clean(input));
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
    key: String,
}

/// The checkpoint's form of a position.
fn position_json(lsn: u64) -> Value {
    json!({ "lsn": lsn_text(lsn) })
}

fn position_of(value: &Value) -> Result<u64, RunError> {
    value
        .get("lsn")
        .and_then(Value::as_str)
        .and_then(|t| pgwire_replication::Lsn::parse(t).ok())
        .map(pgwire_replication::Lsn::as_u64)
        .ok_or_else(|| {
            RunError::input(format!(
                "the checkpoint's PostgreSQL position `{value}` is not an LSN"
            ))
            .with_help("run `cdcflow run --full-refresh <table>` to take a new snapshot")
        })
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
            let client = self.source.connection.connect().await.map_err(run_error)?;
            let columns = self.source.columns(&client).await.map_err(run_error)?;
            let fields: Vec<Field> = columns
                .iter()
                .map(|c| Field::new(&c.name, c.arrow_type(), !c.not_null))
                .collect();
            Ok(Arc::new(Schema::new(fields)))
        })
    }

    fn read<'a>(&'a self, after: Option<&'a Value>) -> BoxFuture<'a, Result<SourceRead, RunError>> {
        Box::pin(async move {
            let after = after.map(position_of).transpose()?;
            let mut changes = self.source.read(after).await.map_err(run_error)?;
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
            Ok(SourceRead {
                schema,
                rows: vec![rows],
                position: position_json(changes.position),
                must_commit: changes.snapshot,
                more: changes.more,
                oldest_change_micros: oldest,
                acknowledge: Some(Box::new(PgAcknowledge {
                    source: self.source.clone(),
                    changes,
                })),
                carried,
            })
        })
    }
}

/// Retained WAL over this is a warning in `cdcflow status`.
const RETAINED_WARNING_BYTES: i64 = 1 << 30;

impl PgSource {
    async fn status(&self, after: Option<&Value>) -> Result<SourceStatus, RunError> {
        let mut status = SourceStatus {
            source: self.key.clone(),
            ..SourceStatus::default()
        };
        let after = after.map(position_of).transpose()?;
        let client = self.source.connection.connect().await.map_err(run_error)?;
        let row = client
            .query_opt(
                "SELECT (pg_current_wal_lsn() - restart_lsn)::bigint, coalesce(wal_status, ''), pg_current_wal_lsn()::text \
                 FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.source.slot],
            )
            .await
            .map_err(|e| run_error(e.into()))?;
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
        status.retained_bytes = retained;
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
            _ => None,
        };
        Ok(status)
    }
}

fn oldest_commit(rows: &RecordBatch) -> Option<i64> {
    let at = rows
        .column_by_name(cdcflow_plan::read_postgres::COMMIT_TIMESTAMP)?
        .as_primitive_opt::<TimestampMicrosecondType>()?;
    (0..at.len())
        .filter(|i| at.is_valid(*i))
        .map(|i| at.value(i))
        .min()
}

struct PgAcknowledge {
    source: TableSource,
    changes: Changes,
}

impl Acknowledge for PgAcknowledge {
    fn acknowledge(self: Box<Self>) -> BoxFuture<'static, Result<(), RunError>> {
        Box::pin(async move {
            self.source
                .acknowledge(self.changes)
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
        assert_eq!(
            object_name("CRM Sync", "__postgres_customers_1"),
            "cdcflow_crm_sync_postgres_customers_1"
        );
        let long = object_name(&"p".repeat(80), "__postgres_f_1");
        assert_eq!(long.len(), 63);
        assert_ne!(long, object_name(&"p".repeat(81), "__postgres_f_1"));
    }

    #[test]
    fn positions_round_trip() {
        let v = position_json(0x16_B374_D848);
        assert_eq!(v, json!({"lsn": "16/B374D848"}));
        assert_eq!(position_of(&v).unwrap(), 0x16_B374_D848);
        assert!(position_of(&json!({"lsn": 3})).is_err());
    }
}
