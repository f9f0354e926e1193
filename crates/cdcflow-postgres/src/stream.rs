//! The replication stream of a slot read for one table or for several at once: each
//! table a stream serves is a [`Lane`], with its own starting position, its own rows
//! and its own limits; the messages are decoded once and each goes to the lanes of its
//! table. The first lane is the table that reads; the others are the tables of the
//! same slot that read after it in the run (`crate::shared_slot`), which then take
//! their part instead of streaming the slot again.

use std::time::Duration;

use cdcflow_plan::read_postgres::TableName;
use pgwire_replication::{ReplicationClient, ReplicationEvent};

use crate::changes::{ChangeKind, ChangeMeta, ChangeRows, TableColumn};
use crate::error::{PgError, Refresh};
use crate::pgoutput::{self, Message, RelationColumn, Value};

/// How long the stream may stay silent before the read fails (the server sends a
/// keepalive every `wal_sender_timeout / 2`, 30 s by default).
const SILENCE: Duration = Duration::from_secs(120);
/// Seconds since the Unix epoch at PostgreSQL's epoch (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// A change of an open transaction: what, the values, the columns left out, and the
/// old values of an update that changed the key.
type Change = (
    ChangeKind,
    Vec<Option<String>>,
    Vec<usize>,
    Option<Vec<Option<String>>>,
);

/// Where a stream stands between two events: the table as the stream described it,
/// and the transaction being received.
#[derive(Default)]
pub(crate) struct StreamState {
    relation: Option<Relation>,
    open: Option<Open>,
}

/// A transaction being received.
struct Open {
    xid: u32,
    commit_micros: i64,
    /// Its commit LSN (the Begin message gives it).
    commit_lsn: u64,
    /// Read by an earlier batch (it committed before the position the read started
    /// from): its changes are skipped.
    skipped: bool,
    /// Its changes up to this position were taken by an earlier batch.
    taken_before: i64,
    /// The position of its last change so far, from 1.
    seq: i64,
    /// Its changes taken by this read.
    taken: usize,
    /// The changes of the message being handled: each with the columns it left out
    /// (unchanged TOASTed values) and, for an update that changed the key, the old
    /// values.
    changes: Vec<Change>,
}

/// Where a stream read stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reached {
    /// Every transaction that committed before it is read.
    pub position: u64,
    /// Inside a transaction larger than a batch: its commit LSN and the last change
    /// taken.
    pub within: Option<(u64, i64)>,
}

/// One table's share of a stream: where it starts, what it has taken, and where it
/// stopped.
pub(crate) struct Lane {
    pub table: TableName,
    /// The table's OID: its rows are known by it (a rename keeps it).
    pub relid: u32,
    /// Transactions that committed before it were read by a committed batch.
    pub start: u64,
    /// A transaction the last batch read in part, and its last change taken.
    pub within: Option<(u64, i64)>,
    pub rows: ChangeRows,
    pub state: StreamState,
    /// It stops at a transaction's end once it holds this many rows, or inside a
    /// transaction that alone gave it `most` changes.
    pub limit: usize,
    pub most: usize,
    position: u64,
    end: LaneEnd,
}

/// How a lane's share ended.
enum LaneEnd {
    Streaming,
    Reached(Reached),
    /// It cannot be given as a read of its own would have been (its rows failed, or a
    /// transaction was larger than its share): its table streams for itself.
    Dropped,
}

impl Lane {
    pub fn new(
        table: TableName,
        relid: u32,
        (start, within): (u64, Option<(u64, i64)>),
        rows: ChangeRows,
        state: StreamState,
        (limit, most): (usize, usize),
    ) -> Self {
        let mut rows = rows;
        // A session gone on with knows the table already: its key columns hold from
        // the first row.
        if let Some(r) = &state.relation {
            rows.set_keys(&r.keys);
        }
        Self {
            table,
            relid,
            start,
            within,
            rows,
            state,
            limit,
            most,
            position: start,
            end: LaneEnd::Streaming,
        }
    }

    /// Where its share ended: `None` when it was dropped.
    pub fn reached(&self) -> Option<Reached> {
        match self.end {
            LaneEnd::Reached(r) => Some(r),
            LaneEnd::Streaming => Some(Reached {
                position: self.position,
                within: None,
            }),
            LaneEnd::Dropped => None,
        }
    }

    fn streaming(&self) -> bool {
        matches!(self.end, LaneEnd::Streaming)
    }

    /// Stops the lane where it stands: inside the open transaction after the last
    /// change it saw of it, or before it when it saw none.
    fn stop_here(&mut self) {
        let within = self
            .state
            .open
            .as_ref()
            .filter(|txn| !txn.skipped && txn.seq.max(txn.taken_before) > 0)
            // Never before what an earlier batch took of it.
            .map(|txn| (txn.commit_lsn, txn.seq.max(txn.taken_before)));
        self.end = LaneEnd::Reached(Reached {
            position: self.position,
            within,
        });
    }

    /// Handles one decoded message of the open transaction; `Some` when the lane
    /// stopped inside it.
    fn handle(&mut self, message: Message) -> Result<Option<Reached>, PgError> {
        let StreamState { relation, open } = &mut self.state;
        let Some(txn) = open.as_mut() else {
            return Ok(None);
        };
        change(
            message,
            (&self.table, self.relid),
            self.rows.columns(),
            relation,
            txn,
        )?;
        if let Some(r) = relation.as_ref() {
            self.rows.set_keys(&r.keys);
        }
        take(txn, &mut self.rows)?;
        Ok((txn.taken >= self.most).then_some(Reached {
            position: self.position,
            within: Some((txn.commit_lsn, txn.seq)),
        }))
    }

    /// Whether `message` concerns this lane's table.
    fn concerns(&self, message: &Message) -> bool {
        let current = self.state.relation.as_ref().map(|r| r.id);
        match message {
            Message::Relation {
                id,
                namespace,
                name,
                ..
            } => *id == self.relid || (*namespace == self.table.schema && *name == self.table.name),
            Message::Insert { relation, .. }
            | Message::Update { relation, .. }
            | Message::Delete { relation, .. } => Some(*relation) == current,
            Message::Truncate { relations } => relations.iter().any(|r| Some(*r) == current),
            _ => false,
        }
    }
}

/// Receives transactions until the stream has passed `target`, or the first lane
/// holds its `limit` rows at a transaction's end, or a transaction has given it `most`
/// changes (it stops inside it). Each lane takes the rows of its table's transactions
/// that committed at or after its `start`, but those of transaction `within.0` only
/// after its change `within.1`, and stops at its own limits; a lane whose rows fail is
/// dropped (its table meets the error on a read of its own). Rows are added as they
/// come, so memory holds a batch a lane, whatever the size of a transaction. Returns
/// where the first lane stopped; the others' ends are in them.
pub(crate) async fn stream(
    session: &mut ReplicationClient,
    lanes: &mut [Lane],
    target: u64,
) -> Result<Reached, PgError> {
    for lane in lanes.iter_mut() {
        if let Some(txn) = lane.state.open.as_mut() {
            // Gone on with from an earlier read: what it took counts there.
            txn.taken = 0;
        }
    }
    let reached = receive(session, lanes, target).await;
    for lane in lanes.iter_mut().skip(1) {
        if lane.streaming() {
            lane.stop_here();
        }
    }
    reached
}

async fn receive(
    session: &mut ReplicationClient,
    lanes: &mut [Lane],
    target: u64,
) -> Result<Reached, PgError> {
    while lanes[0].position < target {
        let event = tokio::time::timeout(SILENCE, session.recv())
            .await
            .map_err(|_| {
                PgError::Protocol(format!(
                    "the server sent nothing for {} s",
                    SILENCE.as_secs()
                ))
            })??;
        let Some(event) = event else {
            return Err(PgError::Protocol(
                "the replication stream ended before the WAL flushed at the start was read".into(),
            ));
        };
        match event {
            ReplicationEvent::Begin {
                xid,
                commit_time_micros,
                final_lsn,
            } => {
                let commit_lsn = final_lsn.as_u64();
                for lane in lanes.iter_mut().filter(|l| l.streaming()) {
                    lane.state.open = Some(Open {
                        xid,
                        commit_micros: commit_time_micros + PG_EPOCH_MICROS,
                        commit_lsn,
                        // Already read by a committed batch (a restart from a slot
                        // that was not acknowledged, or a table ahead of the slot).
                        skipped: commit_lsn < lane.start,
                        taken_before: lane
                            .within
                            .filter(|(lsn, _)| *lsn == commit_lsn)
                            .map_or(0, |(_, seq)| seq),
                        seq: 0,
                        taken: 0,
                        changes: vec![],
                    });
                }
                // A transaction that commits at or after the target is left for the
                // next read; every one before it has been sent (they come in commit
                // order). The stream stops at its Begin, kept open in the state, so
                // that a session parked here (`crate::parking`) goes on with it.
                if commit_lsn >= target {
                    for lane in lanes.iter_mut().filter(|l| l.streaming()) {
                        lane.end = LaneEnd::Reached(Reached {
                            position: lane.position.max(commit_lsn),
                            within: None,
                        });
                    }
                    return Ok(lanes[0].reached().unwrap_or(Reached {
                        position: commit_lsn,
                        within: None,
                    }));
                }
            }
            ReplicationEvent::XLogData { data, .. } => {
                if lanes[0].state.open.is_none() {
                    continue;
                }
                let message = pgoutput::decode(&data)?;
                let concerned: Vec<usize> = lanes
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| l.streaming() && l.concerns(&message))
                    .map(|(i, _)| i)
                    .collect();
                // Copied only for a table that two lanes read (read with other options).
                let mut message = Some(message);
                for (n, &i) in concerned.iter().enumerate() {
                    let message = match n + 1 == concerned.len() {
                        true => message.take(),
                        false => message.clone(),
                    };
                    let Some(message) = message else { break };
                    let handled = lanes[i].handle(message);
                    match (i, handled) {
                        (0, Err(e)) => return Err(e),
                        (0, Ok(Some(stop))) => return Ok(stop),
                        (_, Err(_)) => lanes[i].end = LaneEnd::Dropped,
                        (_, Ok(Some(stop))) => lanes[i].end = LaneEnd::Reached(stop),
                        (_, Ok(None)) => {}
                    }
                }
            }
            ReplicationEvent::Commit { end_lsn, .. } => {
                let mut first_full = false;
                for (i, lane) in lanes.iter_mut().enumerate() {
                    if !lane.streaming() || lane.state.open.take().is_none() {
                        continue;
                    }
                    lane.position = lane.position.max(end_lsn.as_u64());
                    if lane.rows.len() >= lane.limit {
                        lane.end = LaneEnd::Reached(Reached {
                            position: lane.position,
                            within: None,
                        });
                        first_full |= i == 0;
                    }
                }
                if first_full {
                    break;
                }
            }
            // Between transactions, everything before the server's position has been
            // sent.
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                for lane in lanes.iter_mut().filter(|l| l.streaming()) {
                    if lane.state.open.is_none() {
                        lane.position = lane.position.max(wal_end.as_u64());
                    }
                }
            }
            ReplicationEvent::StoppedAt { reached } => {
                for lane in lanes.iter_mut().filter(|l| l.streaming()) {
                    lane.position = lane.position.max(reached.as_u64());
                }
            }
            _ => {}
        }
    }
    Ok(lanes[0].reached().unwrap_or(Reached {
        position: lanes[0].position,
        within: None,
    }))
}

/// Moves the open transaction's new changes into `rows`, numbered in the transaction,
/// leaving out those an earlier batch took.
fn take(txn: &mut Open, rows: &mut ChangeRows) -> Result<(), PgError> {
    for (kind, values, unchanged, old_key) in std::mem::take(&mut txn.changes) {
        txn.seq += 1;
        if txn.skipped || txn.seq <= txn.taken_before {
            continue;
        }
        let meta = ChangeMeta {
            kind,
            commit_lsn: txn.commit_lsn,
            seq: txn.seq,
            commit_micros: Some(txn.commit_micros),
            xid: Some(txn.xid),
        };
        rows.push_change(values, meta, &unchanged, old_key.as_deref())?;
        txn.taken += 1;
    }
    Ok(())
}

/// How the stream describes the table: its id, and for each of the table's columns
/// (as the read found them) its place in the stream's tuples and whether it is part of
/// the replica identity.
struct Relation {
    id: u32,
    places: Vec<Option<usize>>,
    keys: Vec<bool>,
    /// The stream sends the table's columns in the table's order (the usual case).
    in_place: bool,
}

impl Relation {
    /// `places`: for each of the table's columns, its place among the `sent` columns
    /// of the stream's tuples.
    fn new(id: u32, places: Vec<Option<usize>>, keys: Vec<bool>, sent: usize) -> Self {
        let in_place =
            sent == places.len() && places.iter().enumerate().all(|(i, p)| *p == Some(i));
        Self {
            id,
            places,
            keys,
            in_place,
        }
    }

    /// The stream's tuple in the table's column order; a column the stream does not
    /// have yet (added later upstream) is null. The values are moved, not copied.
    fn reorder<T>(&self, tuple: Vec<T>, missing: impl Fn() -> T) -> Vec<T> {
        if self.in_place && tuple.len() == self.places.len() {
            return tuple;
        }
        let mut sent: Vec<Option<T>> = tuple.into_iter().map(Some).collect();
        self.places
            .iter()
            .map(|p| {
                p.and_then(|p| sent.get_mut(p).and_then(Option::take))
                    .unwrap_or_else(&missing)
            })
            .collect()
    }
}

/// The stream's description of a table against the columns the read found: every
/// stream column must be one of them with the same type; a table column the stream
/// lacks was added later and reads as null.
fn relation(
    id: u32,
    sent: &[RelationColumn],
    columns: &[TableColumn],
    table: &str,
) -> Result<Relation, PgError> {
    for s in sent {
        match columns.iter().find(|c| c.name == s.name) {
            None => {
                return Err(PgError::Data {
                    message: format!(
                        "column `{}` of `{table}` is in the change stream but no longer in the table (dropped or renamed upstream)",
                        s.name
                    ),
                    help: "run `cdcflow run --full-refresh <table>` to take a new snapshot of the table as it is".into(),
                });
            }
            Some(c) if c.type_oid != s.type_oid || c.type_modifier != s.type_modifier => {
                let old = crate::types::arrow_type(s.type_oid, s.type_modifier);
                return Err(PgError::Data {
                    message: format!(
                        "column `{}` of `{table}` changed its type upstream, from {old} (type oid {}) to {} (type oid {}), while changes of the old type are still to be read",
                        s.name,
                        s.type_oid,
                        c.arrow_type(),
                        c.type_oid
                    ),
                    help: "run `cdcflow run --full-refresh <table> --cascade` to take a new snapshot of the table as it is (the tables that read it are rebuilt with the new type)".into(),
                });
            }
            Some(_) => {}
        }
    }
    let places: Vec<Option<usize>> = columns
        .iter()
        .map(|c| sent.iter().position(|s| s.name == c.name))
        .collect();
    let keys = places
        .iter()
        .map(|p| p.is_some_and(|p| sent[p].key))
        .collect();
    Ok(Relation::new(id, places, keys, sent.len()))
}

/// Adds the rows of one decoded message to the open transaction. The table is known by
/// its OID (`relid`), which a rename keeps; another table under its name is the table
/// dropped and created again, a gap the read cannot fill.
fn change(
    message: Message,
    (table, relid): (&TableName, u32),
    columns: &[TableColumn],
    current: &mut Option<Relation>,
    txn: &mut Open,
) -> Result<(), PgError> {
    let ours = |id: u32, current: &Option<Relation>| current.as_ref().is_some_and(|r| r.id == id);
    if let Message::Relation {
        id,
        columns: sent,
        namespace,
        name,
    } = &message
    {
        // The slot's publication has the other tables of the pipeline too.
        if *id != relid {
            if *namespace == table.schema && *name == table.name {
                return Err(PgError::Gap {
                    message: format!(
                        "table `{table}` was dropped and created again while the stream was read (it was OID {relid}, the stream now has OID {id})"
                    ),
                    refresh: Refresh::Table,
                });
            }
            return Ok(());
        }
        *current = Some(relation(
            *id,
            sent,
            columns,
            &format!("{namespace}.{name}"),
        )?);
        return Ok(());
    }
    let Some(rel) = current.as_ref() else {
        return Ok(());
    };
    // Values and left-out columns in the table's column order.
    let ordered = |tuple: Vec<Value>, old: Option<&[Value]>| {
        let (values, unchanged) = texts(tuple, old);
        let mut left_out = vec![false; values.len()];
        for i in unchanged {
            left_out[i] = true;
        }
        let values = rel.reorder(values, || None);
        let left_out = rel.reorder(left_out, || false);
        let unchanged: Vec<usize> = left_out
            .iter()
            .enumerate()
            .filter(|(_, u)| **u)
            .map(|(i, _)| i)
            .collect();
        (values, unchanged)
    };
    match message {
        Message::Insert { relation: id, new } if ours(id, current) => {
            let (new, unchanged) = ordered(new, None);
            txn.changes.push((ChangeKind::Insert, new, unchanged, None));
        }
        Message::Update {
            relation: id,
            old,
            new,
        } if ours(id, current) => {
            let (new, unchanged) = ordered(new, old.as_deref());
            let mut moved_from = None;
            if let Some(old) = old {
                let old = rel.reorder(texts_lenient(old), || None);
                let moved = rel
                    .keys
                    .iter()
                    .enumerate()
                    .any(|(i, key)| *key && old.get(i) != new.get(i));
                // A changed key: the row under its old key is gone.
                if moved {
                    let key_only: Vec<Option<String>> = old
                        .into_iter()
                        .zip(&rel.keys)
                        .map(|(v, key)| v.filter(|_| *key))
                        .collect();
                    moved_from = Some(key_only.clone());
                    txn.changes
                        .push((ChangeKind::Delete, key_only, vec![], None));
                }
            }
            txn.changes
                .push((ChangeKind::Update, new, unchanged, moved_from));
        }
        Message::Delete { relation: id, old } if ours(id, current) => {
            let old = rel.reorder(texts_lenient(old), || None);
            txn.changes.push((ChangeKind::Delete, old, vec![], None));
        }
        Message::Truncate { relations } if relations.iter().any(|r| ours(*r, current)) => {
            txn.changes.push((
                ChangeKind::Truncate,
                vec![None; columns.len()],
                vec![],
                None,
            ));
        }
        _ => {}
    }
    Ok(())
}

/// A tuple's values as text, with the columns it leaves out: an unchanged TOASTed
/// value is taken from `old` (sent under `REPLICA IDENTITY FULL`), else left for
/// [`ChangeRows`] to carry over from the key's row before.
fn texts(values: Vec<Value>, old: Option<&[Value]>) -> (Vec<Option<String>>, Vec<usize>) {
    let mut unchanged = vec![];
    let values = values
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Null => None,
            Value::Text(t) => Some(t),
            Value::UnchangedToast => match old.and_then(|o| o.get(i)) {
                Some(Value::Text(t)) => Some(t.clone()),
                _ => {
                    unchanged.push(i);
                    None
                }
            },
        })
        .collect();
    (values, unchanged)
}

/// Old values (a key or a whole old row): an unchanged TOASTed value is null.
fn texts_lenient(values: Vec<Value>) -> Vec<Option<String>> {
    values
        .into_iter()
        .map(|v| match v {
            Value::Text(t) => Some(t),
            Value::Null | Value::UnchangedToast => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation(places: Vec<Option<usize>>, sent: usize) -> Relation {
        let keys = vec![false; places.len()];
        Relation::new(1, places, keys, sent)
    }

    fn texts(values: &[&str]) -> Vec<Option<String>> {
        values.iter().map(|v| Some(v.to_string())).collect()
    }

    #[test]
    fn a_tuple_in_the_tables_order_is_kept_as_sent() {
        let r = relation(vec![Some(0), Some(1)], 2);
        assert_eq!(r.reorder(texts(&["1", "a"]), || None), texts(&["1", "a"]));
    }

    #[test]
    fn a_tuple_in_another_order_or_short_of_a_column_takes_the_tables_order() {
        // The table's columns: id, added later (not in the stream yet), name; the
        // stream sends name before id.
        let r = relation(vec![Some(1), None, Some(0)], 2);
        assert_eq!(
            r.reorder(texts(&["a", "1"]), || None),
            vec![Some("1".to_string()), None, Some("a".to_string())]
        );
        assert_eq!(r.reorder(vec![true, false], || false), [false, false, true]);
    }
}
