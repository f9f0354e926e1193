//! One table read through logical replication: checks that the server is ready,
//! creates the publication and the slot when missing, copies the table in a snapshot
//! exported at a known WAL position, and streams the changes committed since the
//! checkpoint's position up to the WAL flushed when the read began ("everything
//! available now").
//!
//! One slot and one publication serve every table a pipeline reads through a
//! connection. The first table read creates the slot and copies itself in the snapshot
//! the slot exports; a table added later copies itself in the snapshot of a temporary
//! slot made for it (dropped with its session), and streams the shared slot from that
//! snapshot's consistent point: the other tables never stop.
//!
//! The position is an LSN: every transaction that committed before it has been read.
//! The slot's confirmed position only moves in [`TableSource::acknowledge_to`], which
//! the caller runs after the rows are durably committed, and never past the position of
//! any table of the slot (the caller gives the lowest one its tables committed); until
//! then the server keeps the WAL, so a crash at any point reads the same changes again.
//! A read also skips every transaction that ended at or before the position it starts
//! from, so a table ahead of the slot (or a slot left behind by a crash between the
//! commit and the acknowledgement) gives no doubles.

use std::time::Duration;

use cdcflow_plan::read_postgres::TableName;
use pgwire_replication::{Lsn, ReplicationClient};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::changes::{ChangeRows, TableColumn};
use crate::connection::{PgConnection, quote_ident, quote_literal};
use crate::error::PgError;
use crate::identity::Identity;
use crate::parking::{KEEP_SNAPSHOT_FOR, Parked, Parking};
use crate::shared_slot::{self, Known, LaneKey, SharedSlot};
use crate::snapshot::CopyProgress;
pub(crate) use crate::stream::StreamState;
use crate::stream::{Lane, stream};
/// How often, and how many times, an acknowledgement looks whether the server took
/// the position (10 s in all).
const WAIT_STEP: Duration = Duration::from_millis(20);
const WAIT_TRIES: usize = 500;
/// How often, and how many times, it looks before ending the session that sent it
/// (1 s: the worker sends it within its status interval,
/// [`crate::connection::STATUS_INTERVAL`]).
const SENT_STEP: Duration = Duration::from_millis(5);
const SENT_TRIES: usize = 200;
/// WAL behind a copy under way that its reads leave to after it; more is streamed
/// with its chunks, so that the server can free it.
const STREAM_DURING_COPY_BYTES: u64 = 256 << 20;
/// How long a read waits for a slot another session still holds.
const SLOT_BUSY: Duration = Duration::from_secs(10);

/// A table, schema-qualified (the planner's name for it).
pub type TableRef = TableName;

/// `table` as SQL, each part quoted.
pub fn table_sql(table: &TableName) -> String {
    format!(
        "{}.{}",
        quote_ident(&table.schema),
        quote_ident(&table.name)
    )
}

/// One table of a PostgreSQL database, read through a slot and publication that other
/// tables of the same database may share.
#[derive(Debug, Clone)]
pub struct TableSource {
    pub connection: PgConnection,
    pub table: TableRef,
    /// The replication slot (created when missing), shared by the pipeline's tables of
    /// this connection.
    pub slot: String,
    /// The publication the slot streams (created when missing; each table adds itself).
    pub publication: String,
    /// A read stops after the transaction that brings it to this many changes (and
    /// says there is more), or inside a transaction that alone has this many; the copy
    /// takes chunks of this many rows.
    pub max_changes: usize,
    /// Columns the pipeline declares STRING (`schema =>`): kept as PostgreSQL prints
    /// them, whatever their type.
    pub text_columns: Vec<String>,
    /// Where a read that stopped at its size limit leaves its session for the next
    /// read of the run (`crate::parking`).
    pub parking: Parking,
    /// Told what a read waits for while it waits.
    pub notices: crate::notices::Notices,
    /// The run's SQL connection to the server, for the reads that copy nothing.
    pub clients: crate::shared_client::SharedClients,
    /// The slot streamed once for every table of the connection (`crate::shared_slot`).
    pub shared: Option<std::sync::Arc<SharedSlot>>,
}

/// What one read found.
pub struct Changes {
    pub rows: datafusion::arrow::array::RecordBatch,
    /// Everything committed before this LSN is in `rows` or in earlier reads.
    pub position: u64,
    /// A transaction the read stopped inside (it was larger than a batch): its commit
    /// LSN and the position in it of the last change in `rows`. The next read resumes
    /// there; `position` is before it.
    pub within: Option<(u64, i64)>,
    /// The rows start with a chunk of the table's initial copy (or the copy ended).
    pub snapshot: bool,
    /// Where the copy stands after this read.
    pub copy: CopyProgress,
    /// The table's rows as the server estimates them, when a chunk was copied.
    pub estimate: Option<u64>,
    /// The read stopped at its size limit before the WAL flushed when it began: read
    /// again.
    pub more: bool,
    /// The server's clock when the read took the WAL position it reads up to: without
    /// `more`, every change committed before it is in `rows` or in earlier reads.
    pub read_at_micros: i64,
    /// The replica identity's columns (known once the stream described the table).
    pub keys: Vec<String>,
    /// The server objects the stream depends on, as this read found them.
    pub identity: Option<Identity>,
    /// Cells updates left out (unchanged TOASTed values) that no earlier row of this
    /// read gives: (row, column). They are the values of the key's latest row stored
    /// before this read.
    pub unresolved: Vec<cdcflow_runtime::sources::CarriedCell>,
    /// Rows with a value their column's type has none of, set apart with why.
    pub rejected: Vec<cdcflow_runtime::sources::RejectedRow>,
    /// The table's columns that have a default, with it, as the read found them.
    pub defaults: Vec<(String, String)>,
    session: Option<Session>,
}

/// The replication session a read streamed, with where its stream stands.
struct Session {
    client: ReplicationClient,
    state: StreamState,
    /// The table's columns as the read found them.
    columns: Vec<TableColumn>,
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Changes")
            .field("rows", &self.rows.num_rows())
            .field("position", &Lsn::from_u64(self.position).to_pg_string())
            .field("snapshot", &self.snapshot)
            .finish()
    }
}

/// An LSN as PostgreSQL prints it (`16/B374D848`).
/// The columns of `columns` that have a default, with it.
fn defaults(columns: &[TableColumn]) -> Vec<(String, String)> {
    columns
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.default.clone()?)))
        .collect()
}

pub fn lsn_text(lsn: u64) -> String {
    Lsn::from_u64(lsn).to_pg_string()
}

pub(crate) fn parse_lsn(text: &str) -> Result<u64, PgError> {
    Lsn::parse(text)
        .map(Lsn::as_u64)
        .map_err(|e| PgError::Protocol(format!("`{text}` is not an LSN: {e}")))
}

/// A slot's `confirmed_flush_lsn` as text (none yet: 0).
fn confirmed_lsn(text: Option<&str>) -> Result<u64, PgError> {
    text.map(parse_lsn)
        .transpose()
        .map(Option::unwrap_or_default)
}

/// The server's flushed WAL position and its clock (µs since the Unix epoch).
async fn flush_position(client: &Client) -> Result<(u64, i64), PgError> {
    let row = client
        .query_one(
            "SELECT pg_current_wal_flush_lsn()::text, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
            &[],
        )
        .await?;
    Ok((parse_lsn(row.get::<_, &str>(0))?, row.get(1)))
}

/// A replication slot as the server shows it.
struct SlotRow {
    /// A session streams it now.
    active: bool,
    /// Its confirmed position (0 before any).
    confirmed: u64,
    /// The server invalidated it (its WAL exceeded `max_slot_wal_keep_size`).
    lost: bool,
}

/// Slot `slot`, or `None` when there is none of that name.
async fn slot_row(client: &Client, slot: &str) -> Result<Option<SlotRow>, PgError> {
    let row = client
        .query_opt(
            "SELECT active, confirmed_flush_lsn::text, coalesce(wal_status, '') = 'lost' FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    row.map(|row| {
        Ok(SlotRow {
            active: row.get(0),
            confirmed: confirmed_lsn(row.get(1))?,
            lost: row.get(2),
        })
    })
    .transpose()
}

/// Waits until slot `slot` shows `position` confirmed (a session's worker sends it
/// within its status interval), a second at most.
pub(crate) async fn wait_confirmed(
    connection: &PgConnection,
    slot: &str,
    position: u64,
) -> Result<(), PgError> {
    let client = connection.connect().await?;
    for _ in 0..SENT_TRIES {
        match slot_row(&client, slot).await? {
            Some(s) if s.confirmed < position => tokio::time::sleep(SENT_STEP).await,
            _ => return Ok(()),
        }
    }
    Ok(())
}

async fn one_value(client: &Client, sql: &str) -> Result<Option<String>, PgError> {
    for m in client.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(row) = m {
            return Ok(row.get(0).map(String::from));
        }
    }
    Ok(None)
}

/// Where a read starts: what the last committed batch recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadFrom {
    /// Every transaction that committed before this LSN has been read; `None`: nothing
    /// has (the first read creates the slot and starts the copy).
    pub lsn: Option<u64>,
    /// A transaction read in part by the last batch: its commit LSN and the position
    /// in it of the last change taken.
    pub within: Option<(u64, i64)>,
    /// The table's initial copy.
    pub copy: CopyProgress,
    /// The table and publication the position was read from (`None` in positions
    /// written before they were kept).
    pub identity: Option<Identity>,
}

impl TableSource {
    /// What tells this table's rows from other tables' in a shared stream.
    fn lane_key(&self) -> LaneKey {
        LaneKey::new(&self.table, &self.text_columns, self.max_changes)
    }

    /// This table read through slot `slot` and the publication of the same name.
    pub fn named(&self, slot: &str) -> TableSource {
        TableSource {
            slot: slot.to_string(),
            publication: slot.to_string(),
            ..self.clone()
        }
    }

    /// Reads the changes committed after `after` (a position an earlier read returned
    /// and the caller committed), or, with `None`, the first chunk of the table's copy
    /// and what followed it. The replication session stays open until
    /// [`Self::acknowledge`].
    pub async fn read(&self, after: Option<u64>) -> Result<Changes, PgError> {
        let copy = match after {
            None => CopyProgress::Start,
            Some(_) => CopyProgress::Done,
        };
        self.read_from(&ReadFrom {
            lsn: after,
            within: None,
            copy,
            identity: None,
        })
        .await
    }

    /// Reads what comes after `from`: the next chunk of the copy while it is not done,
    /// and the changes committed since, a batch's worth at most (a transaction larger
    /// than a batch is read over several, each resuming inside it).
    ///
    /// A read that fails lets go of the sessions kept for it (all of the run's when the
    /// server is out of reach or shutting down: `Parking::let_go`).
    pub async fn read_from(&self, from: &ReadFrom) -> Result<Changes, PgError> {
        let read = self.read_kept(from).await;
        if let (Ok(changes), Some(shared)) = (&read, &self.shared)
            && changes.copy == CopyProgress::Done
            && let Some(identity) = &changes.identity
        {
            shared.note(
                &self.lane_key(),
                Known {
                    slot: self.slot.clone(),
                    lsn: changes.position,
                    within: changes.within,
                    relid: identity.relid,
                },
            );
        }
        if let Err(e) = &read {
            self.parking.let_go(&self.slot, e.unreachable()).await;
            if e.unreachable() {
                self.clients.forget(&self.connection).await;
            }
        }
        read
    }

    /// [`Self::read_from`], going on with the sessions kept for it where it can.
    async fn read_kept(&self, from: &ReadFrom) -> Result<Changes, PgError> {
        // A copy holds a transaction on its connection: its own. Other reads only ask
        // the catalog, through the run's shared connection.
        let client = match (from.lsn, &from.copy) {
            (Some(_), CopyProgress::Done) => self.clients.get(&self.connection).await?,
            _ => std::sync::Arc::new(self.connection.connect().await?),
        };
        self.check_ready(&client).await?;
        // The WAL to read up to, taken before the columns: a column added by a
        // transaction the read takes in is then in the table's columns (the stream's
        // older transactions may lack it: they get nulls).
        let (target, read_at_micros) = flush_position(&client).await?;
        let columns = self.columns(&client).await?;
        let identity = self.check_objects(&client, from).await?;
        // What a stream of another table of the slot read for this one, when it starts
        // where this read does; the lock is held through this read's own stream, which
        // reads for the others in turn.
        let mut parts = match (&self.shared, from.lsn, &from.copy) {
            (Some(shared), Some(_), CopyProgress::Done) => Some(shared.kept.lock().await),
            _ => None,
        };
        if let Some(parts) = parts.as_mut()
            && let Some(part) =
                SharedSlot::take(parts, &self.lane_key(), from, &columns, identity.relid)
        {
            return Ok(Changes {
                rows: part.rows,
                position: part.reached.position,
                within: part.reached.within,
                snapshot: false,
                copy: CopyProgress::Done,
                estimate: None,
                more: part.more,
                read_at_micros: part.read_at_micros,
                keys: part.keys,
                identity: Some(identity),
                unresolved: part.unresolved,
                rejected: part.rejected,
                defaults: defaults(&columns),
                session: None,
            });
        }
        // A session the run's previous read left on the slot: gone on with when this
        // read starts where that one stopped, closed otherwise (one session a slot).
        // What it was told is committed, which the server may not have yet: the
        // session that streams the slot next reports it.
        let parked = self.parking.take(&self.slot);
        // The exporter an earlier chunk of this table's copy kept, for the next chunk;
        // any other read of the slot ends it (its session may hold the slot).
        let kept = self.parking.take_exporter(&self.slot).filter(|e| {
            e.table == self.table
                && from.lsn.is_some()
                && from.copy.copied().is_some()
                && e.since.elapsed() < KEEP_SNAPSHOT_FOR
        });
        let acknowledged = parked.as_ref().map_or(0, |p| p.acknowledged);
        let resumed = match parked {
            Some(p)
                if from.copy == CopyProgress::Done && p.resumes(&self.table, from, &columns) =>
            {
                Some(p)
            }
            Some(p) => {
                p.close().await;
                None
            }
            None => None,
        };
        let mut rows = ChangeRows::new(columns.clone());
        let mut copy = from.copy.clone();
        let mut estimate = None;
        let mut exporter = None;
        // `acked`: the slot's confirmed position, which the session reports until the
        // caller acknowledges more (other tables of the slot may be behind this one).
        let (start, acked) = match from.lsn {
            None => {
                let chunk = self
                    .copy_chunk(&client, &mut rows, &CopyProgress::Start, None)
                    .await?;
                (copy, estimate) = (chunk.progress, chunk.estimate);
                let acked = match chunk.exporter.source_slot {
                    true => chunk.consistent,
                    false => self.check_slot(&client, chunk.consistent).await?,
                };
                exporter = Some(chunk.exporter);
                (chunk.consistent, acked)
            }
            Some(after) => {
                let acked = self.check_slot(&client, after).await?;
                if from.copy.copied().is_some() {
                    let chunk = self
                        .copy_chunk(&client, &mut rows, &from.copy, kept)
                        .await?;
                    (copy, estimate) = (chunk.progress, chunk.estimate);
                    exporter = Some(chunk.exporter);
                }
                (after, acked)
            }
        };
        let acked = acked.max(acknowledged);
        let snapshot = !rows.is_empty() || from.copy != CopyProgress::Done;
        let copying = copy != CopyProgress::Done;
        // While the copy goes on, its chunks come first: the changes since its start
        // wait in the slot and are read after it (starting a stream for each chunk
        // costs more than the chunk), unless the WAL they hold grows large.
        let defer = copying && target.saturating_sub(start) < STREAM_DURING_COPY_BYTES;
        if target <= start || defer {
            // Nothing to stream: the exporter waits for the copy's next chunk (a gated
            // session that never started ends when dropped), and a kept session for
            // the next read.
            if let Some(e) = exporter.filter(|_| copying) {
                self.parking.keep_exporter(&self.slot, e);
            }
            if let Some(p) = resumed {
                self.parking.park(&self.slot, p);
            }
            let keys = rows.key_names();
            let finished = rows.finish()?;
            return Ok(Changes {
                identity: Some(identity),
                keys,
                unresolved: finished.unresolved,
                rejected: finished.rejected,
                defaults: defaults(&columns),
                rows: finished.rows,
                position: start,
                within: from.within,
                snapshot,
                copy,
                estimate,
                more: copying,
                read_at_micros,
                session: None,
            });
        }
        let most = self.max_changes.max(1);
        let limit = rows.len() + most;
        let mut resuming = resumed.is_some();
        // The source slot's session made by this read's first chunk streams it;
        // any other exporter ends here, letting go of its slot.
        let session = exporter
            .filter(|e| e.source_slot && from.lsn.is_none())
            .map(|e| e.session);
        // A new session of the slot streams it for the slot's other tables too.
        let others = match (&self.shared, &parts, &session, &resumed) {
            (Some(shared), Some(_), None, None) => {
                shared
                    .others(&self.lane_key(), &self.slot, acked, &client)
                    .await
            }
            _ => vec![],
        };
        let own_lane = |rows: ChangeRows, state: StreamState| {
            Lane::new(
                self.table.clone(),
                identity.relid,
                (start, from.within),
                rows,
                state,
                (limit, most),
            )
        };
        let share = shared_slot::share(others.len());
        let mut lanes: Vec<Lane> = vec![];
        let (mut session, state) = match (session, resumed) {
            (Some(mut s), _) => {
                s.start().await?;
                s.wait_started().await?;
                (s, StreamState::default())
            }
            (None, Some(p)) => (p.session, p.state),
            (None, None) => {
                let lowest = others.iter().map(|o| o.start()).fold(start, u64::min);
                lanes.extend(others.iter().map(|o| o.lane(share)));
                (
                    self.start_streaming(lowest, acked).await?,
                    StreamState::default(),
                )
            }
        };
        lanes.insert(0, own_lane(rows, state));
        let reached = loop {
            let reached = stream(&mut session, &mut lanes, target).await;
            if !(resuming && reached.is_err()) {
                break reached?;
            }
            // The kept session broke between the reads (the server ended it, or the
            // connection dropped): read again from the position with a new one.
            let _ = session.shutdown().await;
            resuming = false;
            lanes = vec![own_lane(
                ChangeRows::new(columns.clone()),
                StreamState::default(),
            )];
            session = self.start_streaming(start, acked).await?;
        };
        let mut lanes = lanes.into_iter();
        let Some(own) = lanes.next() else {
            return Err(PgError::Protocol(
                "the stream lost its reading table's lane".into(),
            ));
        };
        if let Some(parts) = parts.as_mut() {
            for (other, lane) in others.into_iter().zip(lanes) {
                if let Some((key, part)) = other.part(lane, target, read_at_micros) {
                    parts.insert(key, part);
                }
            }
        }
        let (rows, state) = (own.rows, own.state);
        let keys = rows.key_names();
        let finished = rows.finish()?;
        Ok(Changes {
            identity: Some(identity),
            keys,
            unresolved: finished.unresolved,
            rejected: finished.rejected,
            defaults: defaults(&columns),
            rows: finished.rows,
            position: reached.position,
            within: reached.within,
            snapshot,
            copy,
            estimate,
            more: reached.position < target || reached.within.is_some() || copying,
            read_at_micros,
            session: Some(Session {
                client: session,
                state,
                columns,
            }),
        })
    }

    /// A replication session streaming from `start`, reporting `acked` as confirmed
    /// until told more. The slot may still be held for a moment by the session of a
    /// process that just died (the server notices the closed connection soon after):
    /// that is waited for, a few seconds at most.
    async fn start_streaming(&self, start: u64, acked: u64) -> Result<ReplicationClient, PgError> {
        let mut waited = Duration::ZERO;
        loop {
            let config = self
                .connection
                .replication_config(&self.slot, &self.publication)
                .with_start_lsn(Lsn::from_u64(start))
                .with_ack_lsn(Lsn::from_u64(acked.min(start)));
            let mut session = ReplicationClient::connect(config).await?;
            match session.wait_started().await {
                Ok(()) => return Ok(session),
                Err(e) if e.to_string().contains("is active for PID") && waited < SLOT_BUSY => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    waited += Duration::from_millis(250);
                }
                Err(e) if e.to_string().contains("is active for PID") => {
                    return Err(PgError::Slot {
                        message: format!("replication slot `{}` is in use by another session: {e}", self.slot),
                        help: "is another cdcflow run of this pipeline going on? Two runs cannot read one slot".into(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Moves the slot's confirmed position to `changes.position`, so the server can
    /// free the WAL before it. Run only after the rows are durably committed, and only
    /// when no other table reads the slot.
    pub async fn acknowledge(&self, changes: Changes) -> Result<(), PgError> {
        self.acknowledge_to(changes, None).await
    }

    /// As [`Self::acknowledge`], but never past `floor`: the lowest position the other
    /// tables of the slot have committed (they still need the WAL after it).
    pub async fn acknowledge_to(
        &self,
        changes: Changes,
        floor: Option<u64>,
    ) -> Result<(), PgError> {
        let position = floor.map_or(changes.position, |f| f.min(changes.position));
        if let Some(session) = changes.session {
            session.client.update_applied_lsn(Lsn::from_u64(position));
            if changes.copy == CopyProgress::Done {
                // The next read goes on with this session (`crate::parking`): its
                // worker reports the position within its status interval, and the end
                // of the run waits for the slot to take it.
                self.parking.park(
                    &self.slot,
                    Parked {
                        table: self.table.clone(),
                        lsn: changes.position,
                        within: changes.within,
                        columns: session.columns,
                        session: session.client,
                        state: session.state,
                        connection: self.connection.clone(),
                        acknowledged: position,
                    },
                );
                return Ok(());
            }
            // The worker sends the position within its status interval: once the
            // server has it, the session can end (advancing the slot by SQL instead
            // would decode its WAL again).
            let mut session = session.client;
            wait_confirmed(&self.connection, &self.slot, position).await?;
            let _ = session.shutdown().await;
        }
        if self.parking.acknowledge(&self.slot, position) {
            return Ok(());
        }
        let client = self.clients.get(&self.connection).await?;
        // The walsender may take a moment to let go of the slot.
        for _ in 0..WAIT_TRIES {
            let slot = slot_row(&client, &self.slot)
                .await?
                .ok_or_else(|| self.slot_missing())?;
            if slot.confirmed >= position {
                return Ok(());
            }
            if !slot.active {
                client
                    .simple_query(&format!(
                        "SELECT pg_replication_slot_advance({}, {}::pg_lsn)",
                        quote_literal(&self.slot),
                        quote_literal(&lsn_text(position))
                    ))
                    .await?;
                return Ok(());
            }
            tokio::time::sleep(WAIT_STEP).await;
        }
        Err(PgError::Slot {
            message: format!(
                "replication slot `{}` stayed in use by another session: its position was not advanced to {}",
                self.slot,
                lsn_text(position)
            ),
            help: "is another cdcflow run of this pipeline reading it? The next run advances it"
                .into(),
        })
    }

    /// Drops the slot (a full refresh starts over from a new snapshot), ending the
    /// session kept on it first.
    pub async fn drop_slot(&self) -> Result<(), PgError> {
        if let Some(p) = self.parking.take(&self.slot) {
            p.close().await;
        }
        drop(self.parking.take_exporter(&self.slot));
        let client = self.connection.connect().await?;
        let mut waited = Duration::ZERO;
        loop {
            let dropped = client
                .query(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
                    &[&self.slot],
                )
                .await;
            match dropped {
                // The walsender of a session just ended lets go of the slot soon after.
                Err(e)
                    if e.code() == Some(&tokio_postgres::error::SqlState::OBJECT_IN_USE)
                        && waited < SLOT_BUSY =>
                {
                    tokio::time::sleep(WAIT_STEP).await;
                    waited += WAIT_STEP;
                }
                done => return done.map(drop).map_err(PgError::from),
            }
        }
    }

    /// The table's columns, in order.
    pub async fn columns(&self, client: &Client) -> Result<Vec<TableColumn>, PgError> {
        let key = self.lane_key();
        shared_slot::columns_of(client, &[&key])
            .await?
            .remove(&key)
            .ok_or_else(|| self.missing_table())
    }

    /// Checks the table and its publication before anything is changed on the server
    /// (`crate::identity`), puts the table in the publication when it is not there yet
    /// (a first read), and returns the identities the position is to keep.
    async fn check_objects(&self, client: &Client, from: &ReadFrom) -> Result<Identity, PgError> {
        let mut found = self.find(client).await?;
        self.check_replica_identity(&found)?;
        if from.lsn.is_some() {
            self.check_continuity(&found, from.identity.as_ref())?;
        }
        self.check_publishes_everything(&found)?;
        if !found.published() {
            self.ensure_publication(client).await?;
            found = self.find(client).await?;
        }
        found.identity().ok_or_else(|| {
            PgError::Protocol(format!(
                "publication `{}` does not hold `{}` after it was added",
                self.publication, self.table
            ))
        })
    }

    async fn check_ready(&self, client: &Client) -> Result<(), PgError> {
        let level = one_value(client, "SHOW wal_level")
            .await?
            .unwrap_or_default();
        if level != "logical" {
            return Err(PgError::NotReady {
                message: format!(
                    "the server's wal_level is `{level}`: logical replication needs `logical`"
                ),
                help: "run ALTER SYSTEM SET wal_level = logical; and restart the server (README, \"PostgreSQL\")".into(),
            });
        }
        let can = one_value(
            client,
            "SELECT (rolreplication OR rolsuper)::text FROM pg_roles WHERE rolname = current_user",
        )
        .await?;
        if can.as_deref() != Some("true") {
            return Err(PgError::NotReady {
                message: format!(
                    "role `{}` lacks the REPLICATION privilege a replication slot needs",
                    self.connection.user
                ),
                help: format!(
                    "ALTER ROLE {} WITH REPLICATION; (as a superuser)",
                    quote_ident(&self.connection.user)
                ),
            });
        }
        Ok(())
    }

    async fn ensure_publication(&self, client: &Client) -> Result<(), PgError> {
        let exists = client
            .query_opt(
                "SELECT 1 FROM pg_publication WHERE pubname = $1",
                &[&self.publication],
            )
            .await?
            .is_some();
        let has_table = client
            .query_opt(
                "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                &[&self.publication, &self.table.schema, &self.table.name],
            )
            .await?
            .is_some();
        if has_table {
            return Ok(());
        }
        let sql = match exists {
            true => format!(
                "ALTER PUBLICATION {} ADD TABLE {}",
                quote_ident(&self.publication),
                table_sql(&self.table)
            ),
            false => format!(
                "CREATE PUBLICATION {} FOR TABLE {}",
                quote_ident(&self.publication),
                table_sql(&self.table)
            ),
        };
        client.batch_execute(&sql).await.map_err(|e| {
            let denied = e.as_db_error().is_some_and(|d| d.code().code() == "42501");
            match denied {
                true => PgError::NotReady {
                    message: format!(
                        "role `{}` may not create publication `{}` for `{}`: {}",
                        self.connection.user,
                        self.publication,
                        self.table,
                        e.as_db_error().map(|d| d.message()).unwrap_or_default()
                    ),
                    help: format!(
                        "a publication needs the CREATE privilege on the database and ownership of the table; or create it as its owner: CREATE PUBLICATION {} FOR TABLE {};",
                        quote_ident(&self.publication),
                        table_sql(&self.table)
                    ),
                },
                false => PgError::Sql(e),
            }
        })
    }

    fn slot_missing(&self) -> PgError {
        PgError::Slot {
            message: format!(
                "replication slot `{}` is gone (dropped, or removed by the server): the changes since the last run cannot be read",
                self.slot
            ),
            help: "run `cdcflow run --full-refresh <table>` to take a new snapshot".into(),
        }
    }

    /// A slot to continue from: it must exist, hold the WAL, and not be past `after`.
    /// Returns its confirmed position.
    async fn check_slot(&self, client: &Client, after: u64) -> Result<u64, PgError> {
        let Some(slot) = slot_row(client, &self.slot).await? else {
            return Err(self.slot_missing());
        };
        if slot.lost {
            return Err(PgError::Slot {
                message: format!(
                    "replication slot `{}` was invalidated by the server (its WAL exceeded max_slot_wal_keep_size): changes were lost",
                    self.slot
                ),
                help: "run `cdcflow run --full-refresh <table>` to take a new snapshot, and run the pipeline more often or raise max_slot_wal_keep_size".into(),
            });
        }
        if slot.confirmed > after {
            return Err(PgError::Slot {
                message: format!(
                    "replication slot `{}` is at {}, past this pipeline's checkpoint at {}: changes between them would be lost",
                    self.slot,
                    lsn_text(slot.confirmed),
                    lsn_text(after)
                ),
                help: "another consumer advanced the slot; run `cdcflow run --full-refresh <table>` to take a new snapshot".into(),
            });
        }
        Ok(slot.confirmed)
    }

    /// Whether the slot exists.
    pub(crate) async fn slot_exists(&self, client: &Client) -> Result<bool, PgError> {
        Ok(client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await?
            .is_some())
    }
}
