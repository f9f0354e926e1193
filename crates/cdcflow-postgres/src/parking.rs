//! A replication session kept open from one read of a table to the next.
//!
//! A read stops after a batch's worth of changes, often inside a transaction larger
//! than a batch. Started again from its position, the server decodes the WAL from the
//! transaction's beginning each time, so a transaction of n batches costs n²/2 batches
//! of decoding. Kept open instead, the session goes on where it stopped: the next read
//! of the same table from the position the first one returned takes it, with the
//! table's description and the open transaction as the stream left them. Any other
//! read of the slot (another table, another position) closes it first, since a slot
//! streams to one session at a time.
//!
//! A read that caught up parks its session too: the next batch of `run --continuous`
//! then starts streaming at once, and an acknowledgement needs no wait, since the
//! session reports the acknowledged position to the server in its next status update.
//! The end of the run ([`Parking::finish`]) waits for the server to take each parked
//! session's position, then ends the session.
//!
//! A table's copy keeps here, between its chunks, the session whose slot exported the
//! snapshot of the last one ([`Exporter`]): the next chunk of the same table reads in
//! that snapshot instead of creating a slot for one of its own, which waits for the
//! server's next consistent point (tens of milliseconds a chunk). The snapshot holds back
//! the server's cleanup of dead rows while it lives, so it is kept for
//! [`KEEP_SNAPSHOT_FOR`] at most; any other read of the slot ends it first.
//!
//! While a session waits here, its worker keeps sending status updates (the server
//! would otherwise end it after `wal_sender_timeout`) and stops reading the socket
//! once its event buffer is full, so memory stays bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pgwire_replication::ReplicationClient;

use crate::changes::TableColumn;
use crate::connection::PgConnection;
use crate::source::{ReadFrom, StreamState, TableRef, wait_confirmed};

/// A session between two reads, and what the next read must start from to go on with
/// it.
pub(crate) struct Parked {
    pub table: TableRef,
    /// The position and partial transaction the read that parked it returned.
    pub lsn: u64,
    pub within: Option<(u64, i64)>,
    /// The table's columns the stream state was built against.
    pub columns: Vec<TableColumn>,
    pub session: ReplicationClient,
    pub state: StreamState,
    /// The server the session reads, and the position it was told to acknowledge.
    pub connection: PgConnection,
    pub acknowledged: u64,
}

impl Parked {
    /// Whether a read of `table` from `from`, finding `columns`, goes on with this
    /// session: the same table, from exactly where it stopped, with the same columns
    /// (a column added or changed since needs the server's new description of it).
    pub fn resumes(&self, table: &TableRef, from: &ReadFrom, columns: &[TableColumn]) -> bool {
        self.table == *table
            && from.lsn == Some(self.lsn)
            && from.within == self.within
            && self.columns == columns
    }

    /// Ends the session, letting go of the slot.
    pub async fn close(self) {
        let mut session = self.session;
        let _ = session.shutdown().await;
    }

    /// Ends the session once the server has taken its acknowledged position (within
    /// the session's status interval), so that the slot frees the WAL before it.
    async fn finish(self, slot: &str) {
        if let Err(e) = wait_confirmed(&self.connection, slot, self.acknowledged).await {
            tracing::warn!(slot, error = %e, "the slot's position was not seen advanced; the next run advances it");
        }
        self.close().await;
    }
}

/// How long closing a session may take before it is left to end on its own.
const CLOSE_WITHIN: Duration = Duration::from_secs(2);

/// How long a copy reads its chunks in one exported snapshot before it takes a new one.
pub(crate) const KEEP_SNAPSHOT_FOR: Duration = Duration::from_secs(60);

/// The idle replication session whose slot exported a chunk's snapshot (valid while
/// the session runs no other command), and where that snapshot stands.
pub(crate) struct Exporter {
    pub table: TableRef,
    pub session: ReplicationClient,
    /// The exported snapshot's name, for `SET TRANSACTION SNAPSHOT`.
    pub snapshot: String,
    /// The WAL position it sees everything before.
    pub consistent: u64,
    /// Whether its slot is the source's own, created by the copy's first chunk (else a
    /// temporary slot that goes with the session).
    pub source_slot: bool,
    pub since: Instant,
}

/// The sessions of one run waiting for their next read, one per slot at most, and the
/// exporters of the copies going on.
#[derive(Clone, Default)]
pub struct Parking {
    sessions: Arc<Mutex<HashMap<String, Parked>>>,
    exporters: Arc<Mutex<HashMap<String, Exporter>>>,
}

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parking")
    }
}

impl Parking {
    pub(crate) fn park(&self, slot: &str, parked: Parked) {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(slot.to_string(), parked);
    }

    /// Ends every parked session, each once the server has its acknowledged position,
    /// and every kept exporter: the end of a run.
    pub async fn finish(&self) {
        drop(
            self.exporters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain()
                .collect::<Vec<_>>(),
        );
        let parked: Vec<(String, Parked)> = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        for (slot, p) in parked {
            p.finish(&slot).await;
        }
    }

    /// Ends at once, without waiting for any acknowledgement, the session parked on
    /// `slot` and its kept exporter, or with `all` every one of the run's: a read that
    /// failed before it took them. A server shutting down waits for each of its
    /// replication clients to confirm everything it was sent, which a parked session
    /// never does on its own, so a session kept past the server's first refusal would
    /// hold its shutdown for as long as the run lasts. What was not acknowledged is
    /// read again from the slot by the next session.
    pub(crate) async fn let_go(&self, slot: &str, all: bool) {
        let exporters: Vec<Exporter> = {
            let mut kept = self
                .exporters
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match all {
                true => kept.drain().map(|(_, e)| e).collect(),
                false => kept.remove(slot).into_iter().collect(),
            }
        };
        let parked: Vec<Parked> = {
            let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            match all {
                true => sessions.drain().map(|(_, p)| p).collect(),
                false => sessions.remove(slot).into_iter().collect(),
            }
        };
        // An exporter's session ends when dropped (its worker is told to stop).
        drop(exporters);
        for p in parked {
            // Bounded: a server that stopped answering must not hold the run either.
            let _ = tokio::time::timeout(CLOSE_WITHIN, p.close()).await;
        }
    }

    /// Tells the session parked on `slot`, when there is one, that everything before
    /// `position` is committed (it reports it to the server in its next status update;
    /// [`Parking::finish`] waits for the server to take it). A table whose read took
    /// its part of another table's stream acknowledges so: the slot streams to that
    /// session, so the server would refuse to advance it otherwise. Returns whether
    /// there was one.
    pub(crate) fn acknowledge(&self, slot: &str, position: u64) -> bool {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(parked) = sessions.get_mut(slot) else {
            return false;
        };
        if position > parked.acknowledged {
            parked
                .session
                .update_applied_lsn(pgwire_replication::Lsn::from_u64(position));
            parked.acknowledged = position;
        }
        true
    }

    /// The session parked on `slot`, taken out: the caller goes on with it or closes
    /// it before streaming the slot.
    pub(crate) fn take(&self, slot: &str) -> Option<Parked> {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(slot)
    }

    /// Keeps `exporter` for the next chunk of its table's copy through `slot`.
    pub(crate) fn keep_exporter(&self, slot: &str, exporter: Exporter) {
        self.exporters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(slot.to_string(), exporter);
    }

    /// The exporter kept on `slot`, taken out. A gated session that never started ends
    /// when dropped, letting go of its slot.
    pub(crate) fn take_exporter(&self, slot: &str) -> Option<Exporter> {
        self.exporters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(slot)
    }
}
