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
    Acknowledge, Carried, ExternalSource, SourceFactory, SourceRead, SourceStatus, StrayCursor,
    commit_time_range,
};
use cdcflow_runtime::{ErrorCode, RunError};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use futures::future::BoxFuture;
use serde_json::Value;

use crate::client_cert::{ClientCert, Pem};
use crate::connection::PgConnection;
use crate::error::{PgError, Refresh};
use crate::position;
use crate::shared_slot::{LaneKey, Member, SharedSlot};
use crate::slots;
use crate::source::{Changes, ReadFrom, TableSource};
use crate::tls::Tls;
use cdcflow_runtime::storage::Storage;
use cdcflow_runtime::storage_id::{self, StorageId};

/// Told how a table's initial copy goes (a terminal's progress line).
pub type CopyProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Opens `read_postgres` inputs.
#[derive(Default, Clone)]
pub struct PostgresSources {
    /// Told after each chunk of a table's initial copy.
    pub progress: Option<CopyProgressSink>,
    /// The run's replication sessions kept between the reads of a table.
    pub parking: crate::parking::Parking,
    /// Told what a read waits for while it waits (a snapshot behind a long
    /// transaction).
    pub notices: crate::notices::Notices,
    /// The positions the run has seen each input commit, for the slot's floor.
    pub committed: CommittedSeen,
    /// The run's SQL connections, one per server and login.
    pub clients: crate::shared_client::SharedClients,
    /// Each connection's slot, streamed once for all its tables, by connection.
    pub shared: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<SharedSlot>>>>,
}

/// The position each input (its flow and checkpoint key) was last seen to have
/// committed in this run. A position only moves on within a run, so a value seen is
/// never past the input's own: a floor taken from them never acknowledges what an
/// input still needs.
pub type CommittedSeen = Arc<std::sync::Mutex<std::collections::HashMap<(String, String), u64>>>;

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
            s.source.parking = self.parking.clone();
            s.source.notices = self.notices.clone();
            s.source.clients = self.clients.clone();
            if let Ok(mut shared) = self.shared.lock() {
                let slot = shared.entry(rp.connection.clone()).or_insert_with(|| {
                    Arc::new(SharedSlot::new(members(pipeline, &rp.connection)))
                });
                s.source.shared = Some(Arc::clone(slot));
            }
            if let Some(readers) = Arc::get_mut(&mut s.readers) {
                readers.seen = Arc::clone(&self.committed);
            }
            Box::new(s) as Box<dyn ExternalSource>
        }))
    }

    fn sync_tables<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        sync: &'a cdcflow_plan::Sync,
    ) -> Option<BoxFuture<'a, Result<Vec<cdcflow_plan::syncs::SourceTable>, RunError>>> {
        if sync.kind != cdcflow_plan::connections::ConnectionKind::Postgres {
            return None;
        }
        Some(Box::pin(async move {
            let connection = resolve(&sync.connection, declared(pipeline, &sync.connection)?)?;
            let client = connection
                .connect()
                .await
                .map_err(|e| connection_error(&sync.connection, e))?;
            crate::tables::list(&client, sync.schemas.as_deref())
                .await
                .map_err(|e| connection_error(&sync.connection, e))
        }))
    }

    fn retire<'a>(
        &'a self,
        pipeline: &'a Pipeline,
    ) -> BoxFuture<'a, Result<Vec<String>, RunError>> {
        Box::pin(async move {
            if slots::own_recorded(&Storage::of(pipeline)?)
                .await?
                .is_empty()
            {
                return Ok(vec![]);
            }
            slots::retire(pipeline, &slots_in_use(pipeline).await?).await
        })
    }

    fn strays<'a>(&'a self, pipeline: &'a Pipeline) -> BoxFuture<'a, Vec<StrayCursor>> {
        Box::pin(async move {
            let mut own: Vec<String> = slots_in_use(pipeline)
                .await
                .unwrap_or_default()
                .into_values()
                .flatten()
                .collect();
            if let Ok(storage) = Storage::of(pipeline) {
                own.extend(
                    slots::own_recorded(&storage)
                        .await
                        .unwrap_or_default()
                        .into_iter()
                        .map(|r| r.slot),
                );
            }
            slots::strays(pipeline, &own).await
        })
    }

    fn finish(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.parking.finish())
    }
}

/// The slot each connection some flow reads is read through now, by the connection's
/// name: the one its tables' committed positions name (`None` before any committed).
pub async fn slots_in_use(
    pipeline: &Pipeline,
) -> Result<std::collections::BTreeMap<String, Option<String>>, RunError> {
    let mut out = std::collections::BTreeMap::new();
    for connection in slots::read_connections(pipeline) {
        let legacy = object_name(&pipeline.config.name, &connection);
        let slot = readers(pipeline, &connection)
            .recorded_slot(&legacy)
            .await?;
        out.insert(connection, slot);
    }
    Ok(out)
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
    let code = match e.unreachable() {
        true => ErrorCode::SourceUnreachable,
        false => ErrorCode::Source,
    };
    let error = RunError::user(code, format!("{what}: {e}"));
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
    let names = SlotNames::new(pipeline, &rp.connection)?;
    Ok(PgSource {
        source: TableSource {
            connection,
            table: rp.source.clone(),
            // Named per read (`PgSource::named`): the name depends on the checkpoints.
            slot: names.legacy.clone(),
            publication: names.legacy.clone(),
            max_changes: max_changes(rp),
            text_columns: declared_strings(rp),
            parking: Default::default(),
            clients: Default::default(),
            notices: Default::default(),
            shared: None,
        },
        names,
        key: rp.key(),
        connection_name: rp.connection.clone(),
        readers: Arc::new(readers(pipeline, &rp.connection)),
        progress: None,
    })
}

/// The most changes a read of `rp` takes.
fn max_changes(rp: &ReadPostgres) -> usize {
    usize::try_from(rp.max_changes_per_batch).unwrap_or(usize::MAX)
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
        storage: pipeline.storage(),
        inputs,
        seen: CommittedSeen::default(),
    }
}

/// Every table the pipeline reads through `connection`, with the flow whose checkpoint
/// keeps its position (one stream of the slot serves them all).
fn members(pipeline: &Pipeline, connection: &str) -> Vec<Member> {
    let mut out = vec![];
    for flow in &pipeline.flows {
        let Some(target) = pipeline.dataset(&flow.target) else {
            continue;
        };
        for input in &flow.inputs {
            if let Input::Postgres(rp) = input
                && rp.connection == connection
            {
                out.push(Member {
                    key: LaneKey::new(&rp.source, &declared_strings(rp), max_changes(rp)),
                    storage: pipeline.storage(),
                    flow: flow.name.clone(),
                    target: target.clone(),
                    input: rp.key(),
                });
            }
        }
    }
    out
}

/// The inputs that share one slot, and where their positions are committed.
struct SlotReaders {
    storage: cdcflow_plan::location::Location,
    /// (flow, its target, the input's checkpoint key).
    inputs: Vec<(String, cdcflow_plan::Dataset, String)>,
    seen: CommittedSeen,
}

impl SlotReaders {
    /// The slot the first input with a committed position reads (its recorded name, or
    /// the name slots had before they were named from the storage, for a position
    /// written before names were recorded).
    async fn recorded_slot(&self, legacy: &str) -> Result<Option<String>, RunError> {
        for (flow, target, key) in &self.inputs {
            let committed =
                cdcflow_runtime::checkpoint::committed_position(&self.storage, flow, target, key)
                    .await?;
            if let Some(value) = committed {
                let position = position::parse(&value)?;
                return Ok(Some(position.slot.unwrap_or_else(|| legacy.to_string())));
            }
        }
        Ok(None)
    }

    /// The tables the inputs are read into (those of input `key` alone, with a key),
    /// each once, in the pipeline's order.
    fn targets(&self, key: Option<&String>) -> Vec<String> {
        let mut names: Vec<String> = vec![];
        for (_, target, k) in &self.inputs {
            if key.is_none_or(|key| key == k) && !names.contains(&target.name) {
                names.push(target.name.clone());
            }
        }
        names
    }

    /// The lowest position any of them has committed (inputs that have committed
    /// nothing yet take their own snapshot later, at a point past every position).
    /// The inputs of `own` (whose read was just committed) are read from their
    /// checkpoints; the others as this run last saw them, read once (a slot of fifty
    /// tables would otherwise read fifty checkpoints after each table's commit).
    async fn lowest_committed(&self, own: &str) -> Result<Option<u64>, RunError> {
        let mut lowest: Option<u64> = None;
        for (flow, target, key) in &self.inputs {
            let id = (flow.clone(), key.clone());
            let seen = match key == own {
                true => None,
                false => self.seen.lock().ok().and_then(|s| s.get(&id).copied()),
            };
            let position = match seen {
                Some(p) => Some(p),
                None => {
                    let committed = cdcflow_runtime::checkpoint::committed_position(
                        &self.storage,
                        flow,
                        target,
                        key,
                    )
                    .await?;
                    let position = committed.as_ref().map(position::lsn_of).transpose()?;
                    // Nothing committed yet is read again next time: once it has a
                    // position, that position counts.
                    if let (Some(p), Ok(mut s)) = (position, self.seen.lock()) {
                        s.insert(id, p);
                    }
                    position
                }
            };
            if let Some(position) = position {
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

/// How the slot (and the publication, of the same name) of a pipeline's connection is
/// named: from the pipeline storage's identity (`cdcflow_storage_id`), so that no
/// two storages read one slot; or as before identities, for the tables whose
/// checkpoints read a slot of that older name.
struct SlotNames {
    /// `cdcflow_<pipeline>_<connection>`.
    legacy: String,
    storage: Storage,
}

impl SlotNames {
    fn new(pipeline: &Pipeline, connection: &str) -> Result<SlotNames, RunError> {
        Ok(SlotNames {
            legacy: object_name(&pipeline.config.name, connection),
            storage: Storage::of(pipeline)?,
        })
    }

    /// The name for the storage of identity `id`.
    fn of(&self, id: &StorageId) -> String {
        slot_name(&self.legacy, id)
    }
}

/// `base` (at most 63 bytes) with the storage identity's short form, within 63 bytes.
pub fn slot_name(base: &str, id: &StorageId) -> String {
    let room = 63 - 1 - id.short().len();
    let cut = (0..=room.min(base.len()))
        .rev()
        .find(|i| base.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}_{}", &base[..cut], id.short())
}

struct PgSource {
    source: TableSource,
    names: SlotNames,
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
            let committed = after.map(position::parse).transpose()?;
            let slot = self.slot_for(committed.as_ref()).await?;
            let source = self.source.named(&slot);
            let first_read = committed.is_none();
            let from = committed.unwrap_or_default();
            let mut changes = source
                .read_from(&from.from)
                .await
                .map_err(|e| self.error(e))?;
            slots::record(
                &self.names.storage,
                &slot,
                &self.connection_name,
                &source.connection,
            )
            .await?;
            if first_read {
                self.claim(&slot).await;
            }
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
            let defaults = std::mem::take(&mut changes.defaults);
            let next = position::Position {
                from: ReadFrom {
                    lsn: Some(changes.position),
                    within: changes.within,
                    copy: changes.copy.clone(),
                    identity: changes.identity,
                },
                applied_until_micros: applied_until,
                slot: Some(slot),
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
                    source,
                    changes,
                    readers: Arc::clone(&self.readers),
                    key: self.key.clone(),
                })),
                carried,
                rejected,
                warnings: vec![],
                defaults,
            })
        })
    }
}

/// Retained WAL over this is a warning in `cdcflow status`.
const RETAINED_WARNING_BYTES: i64 = 1 << 30;
/// A lag over this many seconds is a warning in `cdcflow status`.
const LAG_WARNING_SECONDS: f64 = 900.0;

impl PgSource {
    /// The slot a read of this table streams: the one its committed position read, or
    /// (a first read) the one the connection's other tables read, or else the one
    /// named from this storage's identity. A recorded name of another storage's
    /// identity means this storage is a copy: reading that slot would take the other
    /// pipeline's changes away, so the read is refused.
    async fn slot_for(&self, committed: Option<&position::Position>) -> Result<String, RunError> {
        let recorded = match committed {
            Some(p) => Some(p.slot.clone().unwrap_or_else(|| self.names.legacy.clone())),
            None => self.readers.recorded_slot(&self.names.legacy).await?,
        };
        let ensured = storage_id::ensure(&self.names.storage).await?;
        let own = self.names.of(&ensured.id);
        match recorded {
            None => Ok(own),
            Some(name) if name == own || name == self.names.legacy => Ok(name),
            Some(name) => {
                let tables = self.readers.targets(None);
                let from = ensured
                    .copied_from
                    .map(|p| format!(" (the storage in {})", p.display()))
                    .unwrap_or_default();
                Err(RunError::user(
                    ErrorCode::Source,
                    format!(
                        "PostgreSQL connection `{}`: this pipeline storage's checkpoints read replication slot `{name}`, which belongs to another pipeline storage{from}: this one is a copy, and reading that slot would take changes the other has not read",
                        self.connection_name
                    ),
                )
                .with_help(format!(
                    "run `cdcflow run --full-refresh {} --cascade`: this copy takes new snapshots through a slot of its own",
                    tables.join(" ")
                )))
            }
        }
    }

    /// Names this storage in the comment of the slot's publication, so that `status` of
    /// any pipeline tells a slot some folder still reads from one none does. A comment
    /// not written (the publication made by another role) is only logged.
    async fn claim(&self, slot: &str) {
        let claim = match (
            storage_id::read(&self.names.storage).await,
            storage_id::place(&self.names.storage),
        ) {
            (Ok(Some(id)), Ok(here)) => slots::claim(id.as_str(), &here),
            _ => return,
        };
        let sql = format!(
            "COMMENT ON PUBLICATION {} IS {}",
            crate::connection::quote_ident(slot),
            crate::connection::quote_literal(&claim)
        );
        let done = match self.source.connection.connect().await {
            Ok(client) => client.batch_execute(&sql).await.map_err(PgError::from),
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            tracing::warn!(slot, error = %e, "the publication's comment naming this pipeline storage was not written");
        }
    }

    /// The slot `status` reports on, as a read would pick it, making nothing.
    async fn slot_for_status(
        &self,
        committed: Option<&position::Position>,
    ) -> Result<Option<String>, RunError> {
        let recorded = match committed {
            Some(p) => Some(p.slot.clone().unwrap_or_else(|| self.names.legacy.clone())),
            None => self.readers.recorded_slot(&self.names.legacy).await?,
        };
        Ok(match recorded {
            Some(name) => Some(name),
            None => storage_id::read(&self.names.storage)
                .await?
                .map(|id| self.names.of(&id)),
        })
    }

    fn error(&self, e: PgError) -> RunError {
        match e {
            PgError::Gap { message, refresh } => {
                let tables = self.readers.targets(match refresh {
                    Refresh::Table => Some(&self.key),
                    Refresh::Connection => None,
                });
                RunError::user(
                    ErrorCode::Source,
                    format!("PostgreSQL connection `{}`: {message}", self.connection_name),
                )
                .with_help(format!(
                    "nothing was read; a new snapshot recovers: run `cdcflow run --full-refresh {} --cascade` (the tables that read {} are rebuilt from it)",
                    tables.join(" "),
                    match tables.len() {
                        1 => "it",
                        _ => "them",
                    }
                ))
            }
            e => connection_error(&self.connection_name, e),
        }
    }

    /// The run's SQL connection to the source's server (`crate::shared_client`).
    async fn client(&self) -> Result<Arc<tokio_postgres::Client>, RunError> {
        self.source
            .clients
            .get(&self.source.connection)
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
        let Some(slot) = self.slot_for_status(committed.as_ref()).await? else {
            status.warning =
                Some("not started: the first run creates the slot and takes the snapshot".into());
            return Ok(status);
        };
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT (pg_current_wal_lsn() - s.restart_lsn)::bigint, coalesce(s.wal_status, ''), pg_current_wal_lsn()::text, \
                 (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, extract(epoch FROM r.replay_lag)::float8 \
                 FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid \
                 WHERE s.slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(|e| self.error(e.into()))?;
        let Some(row) = row else {
            status.warning = Some(match after {
                None => "not started: the first run creates the slot and takes the snapshot".into(),
                Some(_) => format!(
                    "replication slot `{slot}` is gone: the next run fails; `cdcflow run --full-refresh <table>` takes a new snapshot"
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
                "replication slot `{slot}` was invalidated by the server: changes were lost; `cdcflow run --full-refresh <table>` takes a new snapshot"
            )),
            "unreserved" => Some(format!(
                "replication slot `{slot}` is past max_slot_wal_keep_size: the server may invalidate it at its next checkpoint; run the pipeline now"
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

fn oldest_commit(rows: &RecordBatch) -> Option<i64> {
    commit_time_range(rows, cdcflow_plan::read_postgres::COMMIT_TIMESTAMP).0
}

fn newest_commit(rows: &RecordBatch) -> Option<i64> {
    commit_time_range(rows, cdcflow_plan::read_postgres::COMMIT_TIMESTAMP).1
}

struct PgAcknowledge {
    source: TableSource,
    changes: Changes,
    readers: Arc<SlotReaders>,
    /// The input's checkpoint key.
    key: String,
}

impl Acknowledge for PgAcknowledge {
    fn acknowledge(self: Box<Self>) -> BoxFuture<'static, Result<(), RunError>> {
        Box::pin(async move {
            // Run after this read's commit, so its own position is among them.
            let floor = self.readers.lowest_committed(&self.key).await?;
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

    #[tokio::test]
    async fn slot_names_carry_the_storage_identity_within_63_bytes() {
        let dir = std::env::temp_dir().join(format!("cdcflow-slot-name-{}", std::process::id()));
        let id = storage_id::ensure(&Storage::local(&dir)).await.unwrap().id;
        std::fs::remove_dir_all(&dir).unwrap();
        let short = slot_name("cdcflow_crm_src", &id);
        assert_eq!(short, format!("cdcflow_crm_src_{}", id.short()));
        let long = slot_name(&object_name(&"p".repeat(80), "crm"), &id);
        assert_eq!(long.len(), 63);
        assert!(long.ends_with(id.short()));
    }
}
