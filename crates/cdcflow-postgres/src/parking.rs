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
//! While a session waits here, its worker keeps sending status updates (the server
//! would otherwise end it after `wal_sender_timeout`) and stops reading the socket
//! once its event buffer is full, so memory stays bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

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

/// The sessions of one run waiting for their next read, one per slot at most.
#[derive(Clone, Default)]
pub struct Parking(Arc<Mutex<HashMap<String, Parked>>>);

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parking")
    }
}

impl Parking {
    pub(crate) fn park(&self, slot: &str, parked: Parked) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(slot.to_string(), parked);
    }

    /// Ends every parked session, each once the server has its acknowledged position:
    /// the end of a run.
    pub async fn finish(&self) {
        let parked: Vec<(String, Parked)> = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        for (slot, p) in parked {
            p.finish(&slot).await;
        }
    }

    /// The session parked on `slot`, taken out: the caller goes on with it or closes
    /// it before streaming the slot.
    pub(crate) fn take(&self, slot: &str) -> Option<Parked> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(slot)
    }
}
