//! A table's initial copy, in chunks of its primary key: each chunk is read in a
//! snapshot exported by a replication slot, so it has an exact WAL position (the
//! slot's consistent point), and its rows carry that position as their sequence. The
//! stream of the table's changes starts at the first chunk's point, so a change the
//! stream gives for a row a later chunk copies sorts before or after that chunk's row
//! exactly as it committed before or after it: AUTO CDC's `SEQUENCE BY` keeps the
//! latest, and nothing is lost or applied twice whichever batch brings which.
//!
//! Each chunk is its own batch (its key range in the checkpoint), so a crash at any
//! chunk resumes after the last committed one, and memory holds one chunk. A table
//! without a primary key is copied in chunks of its tuple ids the same way
//! ([`crate::tid_copy`]); a partitioned table without one is copied in one piece.

use std::time::{Duration, Instant};

use pgwire_replication::ReplicationClient;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::copy_text::copy_rows;

use crate::changes::{ChangeKind, ChangeMeta, ChangeRows};
use crate::connection::{quote_ident, quote_literal};
use crate::error::PgError;
use crate::parking::Exporter;
use crate::source::{TableSource, parse_lsn, table_sql};
use crate::tid_copy::{self, TupleResume};

/// How long a slot's creation may wait before the read says what it waits for, and
/// how often it says so again.
const FIRST_NOTICE: Duration = Duration::from_secs(3);
const NOTICE_EVERY: Duration = Duration::from_secs(30);

/// How far a table's initial copy has come.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CopyProgress {
    /// Nothing copied yet.
    #[default]
    Start,
    /// The rows whose primary key is above this one (its values as PostgreSQL prints
    /// them, in key order) are still to be copied; `copied` rows were.
    After { key: Vec<String>, copied: u64 },
    /// A table without a primary key: the rows after a tuple id are still to be
    /// copied.
    AfterTuple(TupleResume),
    /// Copied whole.
    Done,
}

impl CopyProgress {
    /// The rows copied so far, while the copy goes on.
    pub fn copied(&self) -> Option<u64> {
        match self {
            Self::After { copied, .. } => Some(*copied),
            Self::AfterTuple(resume) => Some(resume.copied),
            Self::Start | Self::Done => None,
        }
    }
}

/// One chunk copied.
pub struct Chunk {
    /// The WAL position of the snapshot it was read in.
    pub consistent: u64,
    /// The session whose slot exported that snapshot, idle: the source's own slot
    /// (created by the copy's first chunk), gated before START_REPLICATION, or a
    /// temporary one. The next chunk may read in the same snapshot
    /// ([`crate::parking`]).
    pub(crate) exporter: Exporter,
    /// Where the copy stands after it.
    pub progress: CopyProgress,
    /// The table's rows as the server estimates them (for progress).
    pub estimate: Option<u64>,
}

impl TableSource {
    /// Copies the next chunk after `progress` into `rows`: in the snapshot of `kept`,
    /// the exporter of an earlier chunk of this table in this run, while it is still
    /// valid; else in one exported by the source's slot when the slot is missing (it is
    /// created), else by a temporary slot that goes with its session.
    pub(crate) async fn copy_chunk(
        &self,
        client: &Client,
        rows: &mut ChangeRows,
        progress: &CopyProgress,
        kept: Option<Exporter>,
    ) -> Result<Chunk, PgError> {
        let exporter = match kept {
            Some(e) if begin_in_snapshot(client, &e.snapshot).await.is_ok() => e,
            kept => {
                if kept.is_some() {
                    // Its session ended (a timeout, the server's restart): a new one.
                    tracing::debug!(table = %self.table, "the kept snapshot is gone; exporting a new one");
                    client.batch_execute("ROLLBACK").await?;
                }
                drop(kept);
                let e = self.export_snapshot(client).await?;
                begin_in_snapshot(client, &e.snapshot).await?;
                e
            }
        };
        let copied = self
            .copy_rows(client, rows, progress, exporter.consistent)
            .await;
        let done = client.batch_execute("COMMIT").await;
        let (progress, estimate) = copied?;
        done?;
        tracing::info!(table = %self.table, rows = rows.len(), snapshot = %exporter.snapshot, at = %crate::source::lsn_text(exporter.consistent), ?progress, "snapshot chunk copied");
        Ok(Chunk {
            consistent: exporter.consistent,
            exporter,
            progress,
            estimate,
        })
    }

    /// A snapshot exported by the source's slot, created now when missing, else by a
    /// temporary slot that goes with its session.
    async fn export_snapshot(&self, client: &Client) -> Result<Exporter, PgError> {
        let (name, temporary) = match self.slot_exists(client).await? {
            false => (self.slot.clone(), ""),
            true => (temporary_slot(&self.slot), " TEMPORARY"),
        };
        let config = self.connection.replication_config(&name, &self.publication);
        let mut session = ReplicationClient::connect_gated(config).await?;
        let sql = format!(
            "CREATE_REPLICATION_SLOT {}{temporary} LOGICAL pgoutput (SNAPSHOT 'export')",
            quote_ident(&name)
        );
        // The slot's consistent point waits for every transaction running on the
        // server when it was asked for: say which one holds it up, while it does.
        let created = {
            let create = session.simple_query(&sql);
            tokio::pin!(create);
            let mut waited = Duration::ZERO;
            let mut pause = FIRST_NOTICE;
            loop {
                tokio::select! {
                    created = &mut create => break created?,
                    () = tokio::time::sleep(pause) => {
                        waited += pause;
                        pause = NOTICE_EVERY;
                        self.say_what_blocks(client, &name, waited).await;
                    }
                }
            }
        };
        let row = created
            .first()
            .filter(|r| r.len() >= 3)
            .ok_or_else(|| PgError::Protocol("CREATE_REPLICATION_SLOT returned no row".into()))?;
        let text = |i: usize| {
            row[i]
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        Ok(Exporter {
            table: self.table.clone(),
            session,
            snapshot: text(2),
            consistent: parse_lsn(&text(1))?,
            source_slot: temporary.is_empty(),
            since: Instant::now(),
        })
    }

    /// Says which transactions the creation of slot `slot` waits for: those on the
    /// server holding a transaction id that began before it was asked for, oldest first
    /// (logical decoding starts at a point where none that began before it is running,
    /// in any database).
    async fn say_what_blocks(&self, client: &Client, slot: &str, waited: Duration) {
        let waited_secs = waited.as_secs_f64();
        let blocking = client
            .query(
                "SELECT pid, coalesce(datname, ''), coalesce(usename, ''), coalesce(state, ''), \
                 extract(epoch FROM now() - xact_start)::bigint \
                 FROM pg_stat_activity \
                 WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() \
                 AND xact_start <= now() - make_interval(secs => $1) \
                 ORDER BY xact_start LIMIT 3",
                &[&waited_secs],
            )
            .await
            .unwrap_or_default();
        let named: Vec<String> = blocking
            .iter()
            .map(|row| {
                let pid: i32 = row.get(0);
                let database: String = row.get(1);
                let user: String = row.get(2);
                let state: String = row.get(3);
                let open: Option<i64> = row.get(4);
                format!(
                    "the transaction of pid {pid} (database `{database}`, user `{user}`, {state}, open for {} s)",
                    open.unwrap_or_default()
                )
            })
            .collect();
        let what = match named.is_empty() {
            true => "transactions still running on the server: the copy starts once they end"
                .to_string(),
            false => {
                let ends: Vec<String> = blocking
                    .iter()
                    .map(|r| format!("SELECT pg_terminate_backend({});", r.get::<_, i32>(0)))
                    .collect();
                format!(
                    "{}: the copy starts once they end; to go on now, end them: {}",
                    named.join(", "),
                    ends.join(" ")
                )
            }
        };
        self.notices.say(&format!(
            "{}: creating replication slot `{slot}` for the first copy has waited {} s for {what}",
            self.table,
            waited.as_secs()
        ));
    }

    /// The chunk's rows, inside the open snapshot transaction.
    async fn copy_rows(
        &self,
        client: &Client,
        rows: &mut ChangeRows,
        progress: &CopyProgress,
        consistent: u64,
    ) -> Result<(CopyProgress, Option<u64>), PgError> {
        let at = one_number(
            client,
            "SELECT (extract(epoch FROM now()) * 1000000)::bigint::text",
        )
        .await?;
        let estimate = one_number(
            client,
            &format!(
                "SELECT greatest(reltuples, 0)::bigint::text FROM pg_class WHERE oid = {}::regclass",
                quote_literal(&table_sql(&self.table))
            ),
        )
        .await?
        .and_then(|n| u64::try_from(n).ok());
        let list = rows
            .columns()
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect::<Vec<_>>()
            .join(", ");
        let meta = ChangeMeta {
            kind: ChangeKind::Snapshot,
            commit_lsn: consistent,
            seq: 0,
            commit_micros: at,
            xid: None,
        };
        let table = table_sql(&self.table);
        let limit = self.max_changes.max(1) as u64;
        let key = match progress {
            CopyProgress::AfterTuple(resume) => {
                let next =
                    tid_copy::copy_chunk(client, rows, (&table, &list), Some(resume), meta, limit);
                return Ok((next.await?, estimate));
            }
            CopyProgress::Start | CopyProgress::After { .. } | CopyProgress::Done => {
                self.primary_key(client).await?
            }
        };
        let places: Vec<usize> = key
            .iter()
            .filter_map(|k| rows.columns().iter().position(|c| &c.name == k))
            .collect();
        let (after, copied_before) = match progress {
            CopyProgress::After { key, copied } => (Some(key.as_slice()), *copied),
            CopyProgress::Start | CopyProgress::AfterTuple(_) | CopyProgress::Done => (None, 0),
        };
        let chunked = !key.is_empty() && places.len() == key.len();
        if !chunked && *progress == CopyProgress::Start && self.plain_table(client).await? {
            let next = tid_copy::copy_chunk(client, rows, (&table, &list), None, meta, limit);
            return Ok((next.await?, estimate));
        }
        let mut sql = format!("SELECT {list} FROM {table}");
        if chunked {
            let columns = key.iter().map(|k| quote_ident(k)).collect::<Vec<_>>();
            if let Some(after) = after.filter(|a| a.len() == key.len()) {
                let values = after.iter().map(|v| quote_literal(v)).collect::<Vec<_>>();
                // Literals of unknown type take the columns' types.
                sql += &format!(" WHERE ({}) > ({})", columns.join(", "), values.join(", "));
            }
            // One row past the chunk tells whether another follows (that row is the
            // next chunk's first), so a table of whole chunks needs no empty last one.
            sql += &format!(
                " ORDER BY {} LIMIT {}",
                columns.join(", "),
                self.max_changes.max(1).saturating_add(1)
            );
        }
        let before = rows.len();
        let width = rows.columns().len();
        // Unchunked (a partitioned table without a primary key), the copy is whole.
        let most = match chunked {
            true => self.max_changes.max(1),
            false => usize::MAX,
        };
        let mut n = 0_usize;
        let mut more = false;
        copy_rows(client, &sql, width, |values| match n < most {
            true => {
                n += 1;
                rows.push(values, meta)
            }
            false => {
                more = true;
                Ok(())
            }
        })
        .await?;
        // The last row's key, where the next chunk starts.
        let last: Vec<String> = match (chunked, rows.len().checked_sub(1)) {
            (true, Some(row)) if row >= before => places
                .iter()
                .map(|&p| rows.cell(row, p).unwrap_or_default().to_string())
                .collect(),
            _ => vec![],
        };
        let progress = match chunked && more {
            true => CopyProgress::After {
                key: last,
                copied: copied_before + n as u64,
            },
            false => CopyProgress::Done,
        };
        Ok((progress, estimate))
    }

    /// The primary key's columns, in key order (none without one).
    async fn primary_key(&self, client: &Client) -> Result<Vec<String>, PgError> {
        let rows = client
            .query(
                "SELECT a.attname::text FROM pg_index i \
                 JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey::int2[]) \
                 WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary \
                 ORDER BY array_position(i.indkey::int2[], a.attnum)",
                &[&self.table.schema, &self.table.name],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Whether the table is an ordinary one (not partitioned), whose tuple ids order
    /// its rows.
    async fn plain_table(&self, client: &Client) -> Result<bool, PgError> {
        let row = client
            .query_opt(
                "SELECT c.relkind = 'r' FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&self.table.schema, &self.table.name],
            )
            .await?;
        Ok(row.is_some_and(|r| r.get(0)))
    }
}

/// Opens a read-only transaction in the exported snapshot `name`.
async fn begin_in_snapshot(client: &Client, name: &str) -> Result<(), PgError> {
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
            quote_literal(name)
        ))
        .await?;
    Ok(())
}

pub(crate) async fn one_number(client: &Client, sql: &str) -> Result<Option<i64>, PgError> {
    for m in client.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(row) = m {
            return Ok(row.get(0).and_then(|t| t.parse().ok()));
        }
    }
    Ok(None)
}

/// The name of the temporary slot that exports a chunk's snapshot: the source slot's,
/// cut to leave room, with this process's id (temporary slots of a process that died
/// are gone with its session).
fn temporary_slot(slot: &str) -> String {
    // The server drops a temporary slot once the session's backend has gone, which
    // may be after the next chunk asks for one: each has a name of its own.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cut = slot.char_indices().nth(36).map_or(slot.len(), |(i, _)| i);
    format!("{}_snap_{}_{n}", &slot[..cut], std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_slot_names_fit_postgres() {
        let name = temporary_slot(&"s".repeat(63));
        assert!(name.len() <= 63, "{name}");
        assert!(name.starts_with(&"s".repeat(36)));
        assert_ne!(name, temporary_slot(&"s".repeat(63)));
    }
}
