//! One stream of a slot for every table a run reads through it (a sync's fifty tables,
//! say): the first table to stream the slot in a run's poll streams it for all of them
//! (`crate::stream`'s lanes), and keeps what it found of the others for their own
//! reads, which take it instead of streaming the slot again. So a catch-up of fifty
//! tables costs the server one walsender and one decoding of the WAL, not fifty.
//!
//! What a table is given is exactly what a stream of its own would have given: the
//! transactions that committed after its committed position (after the change of a
//! transaction its last batch took in part), up to the WAL flushed when the stream
//! began, to its size. Only which read streamed them differs. A part is given only to
//! a read that starts exactly where the part starts, and finds the columns and the
//! table the part was read with; any other read of that table streams for itself (and
//! for the others). The flows of one slot read one after another (their acknowledgements
//! take turns: `cdcflow_runtime::schedule`), and the parts are held under a lock
//! through a stream, so a read never sees half a stream's parts.

use std::collections::HashMap;

use cdcflow_runtime::sources::{CarriedCell, RejectedRow};
use datafusion::arrow::array::RecordBatch;
use tokio_postgres::Client;

use crate::changes::{ChangeRows, TableColumn};
use crate::error::PgError;
use crate::source::{ReadFrom, TableRef};
use crate::stream::{Lane, Reached, StreamState};

/// Rows kept for the tables other than the one that reads, in all: a stream keeps at
/// most this many for the others together, so memory stays bounded whatever the number
/// of tables (one that reaches its share stops there and streams the rest itself).
const KEPT_FOR_OTHERS: usize = 200_000;

/// The slot of one connection, streamed for every table the pipeline reads through it.
#[derive(Default)]
pub struct SharedSlot {
    members: Vec<Member>,
    /// What the last stream found for each table that has not taken it yet. Held
    /// through a stream.
    pub(crate) kept: tokio::sync::Mutex<HashMap<LaneKey, Part>>,
    /// Where each table streams from now, as the run last left it: the position its
    /// last read returned (a read whose batch was not committed starts elsewhere, and
    /// finds no part of its own).
    known: std::sync::Mutex<HashMap<LaneKey, Known>>,
}

impl std::fmt::Debug for SharedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedSlot")
    }
}

/// A table read through the connection, how its rows are made, and where its flow
/// commits its position.
pub struct Member {
    pub key: LaneKey,
    pub storage: cdcflow_plan::location::Location,
    pub flow: String,
    pub target: cdcflow_plan::Dataset,
    /// The input's checkpoint key.
    pub input: String,
}

/// What tells two tables' rows apart: the table, the columns kept as text, and the size
/// of a read. Two flows reading one table alike share a part; read otherwise, they are
/// two lanes of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LaneKey {
    pub table: TableRef,
    pub text_columns: Vec<String>,
    pub max_changes: usize,
}

impl LaneKey {
    pub fn new(table: &TableRef, text_columns: &[String], max_changes: usize) -> Self {
        let mut text_columns = text_columns.to_vec();
        text_columns.sort();
        Self {
            table: table.clone(),
            text_columns,
            max_changes,
        }
    }
}

/// Where a table streams from: through which slot, after which position, and the OID
/// its rows are known by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    pub slot: String,
    pub lsn: u64,
    pub within: Option<(u64, i64)>,
    pub relid: u32,
}

/// What a stream found for a table that did not ask for it.
pub(crate) struct Part {
    /// The position it starts after: only a read from exactly there takes it.
    pub from: (u64, Option<(u64, i64)>),
    pub relid: u32,
    /// The table's columns its rows were made with.
    pub columns: Vec<TableColumn>,
    pub rows: RecordBatch,
    pub keys: Vec<String>,
    pub unresolved: Vec<CarriedCell>,
    pub rejected: Vec<RejectedRow>,
    pub reached: Reached,
    /// It stopped at its size before the stream's end.
    pub more: bool,
    /// The server's clock when the stream took the WAL position it read up to.
    pub read_at_micros: i64,
}

/// Another table's lane, before the stream.
pub(crate) struct Other {
    key: LaneKey,
    from: (u64, Option<(u64, i64)>),
    relid: u32,
    columns: Vec<TableColumn>,
}

impl SharedSlot {
    pub fn new(members: Vec<Member>) -> Self {
        Self {
            members,
            ..Self::default()
        }
    }

    /// Notes where table `key` streams from after a read through `slot` that returned
    /// `next` (once its copy is over).
    pub(crate) fn note(&self, key: &LaneKey, next: Known) {
        if let Ok(mut known) = self.known.lock() {
            known.insert(key.clone(), next);
        }
    }

    /// The part kept for table `key`, when it is what a read from `from` with `columns`
    /// of the table `relid` would stream. Taken out either way: a part not taken now
    /// never fits later.
    pub(crate) fn take(
        kept: &mut HashMap<LaneKey, Part>,
        key: &LaneKey,
        from: &ReadFrom,
        columns: &[TableColumn],
        relid: u32,
    ) -> Option<Part> {
        let part = kept.remove(key)?;
        let fits = from.lsn == Some(part.from.0)
            && from.within == part.from.1
            && part.relid == relid
            && part.columns == columns;
        fits.then_some(part)
    }

    /// The other tables of the slot a stream from no earlier than `acked` can serve,
    /// with where they stream from (their positions as this run left them, or as
    /// their checkpoints keep them) and their columns now.
    pub(crate) async fn others(
        &self,
        own: &LaneKey,
        slot: &str,
        acked: u64,
        client: &Client,
    ) -> Vec<Other> {
        let mut found: Vec<(LaneKey, Known)> = vec![];
        for m in &self.members {
            if m.key == *own || found.iter().any(|(k, _)| *k == m.key) {
                continue;
            }
            let Some(known) = self.known_of(m).await else {
                continue;
            };
            if known.slot == slot && known.lsn >= acked {
                found.push((m.key.clone(), known));
            }
        }
        if found.is_empty() {
            return vec![];
        }
        let tables: Vec<&LaneKey> = found.iter().map(|(k, _)| k).collect();
        // A table whose columns cannot be read now reads (and fails) on its own.
        let Ok(mut columns) = columns_of(client, &tables).await else {
            return vec![];
        };
        found
            .into_iter()
            .filter_map(|(key, known)| {
                Some(Other {
                    columns: columns.remove(&key)?,
                    from: (known.lsn, known.within),
                    relid: known.relid,
                    key,
                })
            })
            .collect()
    }

    /// Where member `m` streams from: as the run last left it, else as its checkpoint
    /// keeps it (read once); `None` while its copy goes on or before its first commit.
    async fn known_of(&self, m: &Member) -> Option<Known> {
        if let Some(k) = self.known.lock().ok()?.get(&m.key) {
            return Some(k.clone());
        }
        let committed = cdcflow_runtime::checkpoint::committed_position(
            &m.storage, &m.flow, &m.target, &m.input,
        )
        .await
        .ok()??;
        let position = crate::position::parse(&committed).ok()?;
        let from = position.from;
        if from.copy != crate::snapshot::CopyProgress::Done {
            return None;
        }
        let known = Known {
            slot: position.slot?,
            lsn: from.lsn?,
            within: from.within,
            relid: from.identity?.relid,
        };
        self.note(&m.key, known.clone());
        Some(known)
    }
}

impl Other {
    /// Its lane of a stream that keeps at most `share` rows for it.
    pub(crate) fn lane(&self, share: usize) -> Lane {
        let most = self.key.max_changes.min(share).max(1);
        Lane::new(
            self.key.table.clone(),
            self.relid,
            self.from,
            ChangeRows::new(self.columns.clone()),
            StreamState::default(),
            (most, most),
        )
    }

    /// What `lane`, its lane of a stream that read up to `target`, holds for it.
    pub(crate) fn part(
        self,
        lane: Lane,
        target: u64,
        read_at_micros: i64,
    ) -> Option<(LaneKey, Part)> {
        let reached = lane.reached()?;
        let more = reached.position < target || reached.within.is_some();
        // A part that stopped where it started (the reading table's stop came before
        // any change of this one) would tell its read "more" with nothing read: its
        // table streams for itself instead.
        if more && (reached.position, reached.within) == self.from {
            return None;
        }
        let keys = lane.rows.key_names();
        let finished = lane.rows.finish().ok()?;
        Some((
            self.key,
            Part {
                from: self.from,
                relid: self.relid,
                columns: self.columns,
                rows: finished.rows,
                keys,
                unresolved: finished.unresolved,
                rejected: finished.rejected,
                more,
                reached,
                read_at_micros,
            },
        ))
    }

    /// Where its lane starts.
    pub(crate) fn start(&self) -> u64 {
        self.from.0
    }
}

/// The share of the rows kept for others each of `n` other tables gets.
pub(crate) fn share(n: usize) -> usize {
    KEPT_FOR_OTHERS / n.max(1)
}

/// The columns of `tables`, in order, asked in one query (a table that does not exist
/// has none).
pub(crate) async fn columns_of(
    client: &Client,
    tables: &[&LaneKey],
) -> Result<HashMap<LaneKey, Vec<TableColumn>>, PgError> {
    let schemas: Vec<&str> = tables.iter().map(|t| t.table.schema.as_str()).collect();
    let names: Vec<&str> = tables.iter().map(|t| t.table.name.as_str()).collect();
    let rows = client
        .query(
            "SELECT n.nspname::text, c.relname::text, a.attname::text, a.atttypid::oid, \
             a.atttypmod, a.attnotnull, pg_get_expr(d.adbin, d.adrelid) \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE (n.nspname, c.relname) IN (SELECT * FROM unnest($1::text[], $2::text[])) \
             AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY n.nspname, c.relname, a.attnum",
            &[&schemas, &names],
        )
        .await?;
    let mut out: HashMap<LaneKey, Vec<TableColumn>> = HashMap::new();
    for r in &rows {
        let (schema, table): (String, String) = (r.get(0), r.get(1));
        let name: String = r.get(2);
        for key in tables
            .iter()
            .filter(|t| t.table.schema == schema && t.table.name == table)
        {
            out.entry((*key).clone()).or_default().push(TableColumn {
                keep_text: key.text_columns.contains(&name),
                name: name.clone(),
                type_oid: r.get(3),
                type_modifier: r.get(4),
                not_null: r.get(5),
                default: r.get(6),
            });
        }
    }
    Ok(out)
}
