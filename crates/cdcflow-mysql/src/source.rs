//! One table read from a MySQL or MariaDB server: the copy in chunks while it goes on,
//! then the binary log from the first chunk's place. A read holds nothing on the server
//! between reads (a binary log reader has no slot): the checkpoint's position alone
//! says where the next read starts, so a crash at any point reads the same changes
//! again, and nothing is acknowledged.

use std::sync::atomic::{AtomicU32, Ordering};

use cdcflow_plan::read_mysql::MysqlTable;
use cdcflow_postgres::ChangeKind;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::binlog::{self, Request, purged, retyped};
use crate::columns::{self, TableColumn};
use crate::connection::{MysqlConnection, MysqlError};
use crate::position::{BinlogPos, Copy, Position};
use crate::rows::{ChangeMeta, ChangeRows, Finished};
use crate::server::{self, Server};
use crate::snapshot;

/// A table and where to read it.
#[derive(Debug, Clone)]
pub struct TableSource {
    pub connection: MysqlConnection,
    pub table: MysqlTable,
    /// Changes (or copied rows) one read takes at most (whole transactions).
    pub max_changes: u64,
    /// Columns `schema =>` declares STRING: kept as text.
    pub text_columns: Vec<String>,
    /// The log of the connection, read once for all its tables; `None`: read alone.
    pub log: Option<std::sync::Arc<crate::shared_log::SharedLog>>,
}

/// What one read gave.
#[derive(Debug)]
pub struct Read {
    pub rows: Finished,
    pub position: Position,
    /// The batch is committed even without rows: a copy chunk, or a read that passed
    /// over much of the log without rows of the table.
    pub must_commit: bool,
    /// A chunk of the copy: its rows are as of the snapshot, the changes since are
    /// still to be read.
    pub chunk: bool,
    pub more: bool,
    /// The server's clock when the read began, µs since the epoch.
    pub read_at_micros: i64,
    /// The table's rows as the server estimates them, while it is being copied.
    pub estimate: Option<u64>,
    /// The table's columns that have a default, with it.
    pub defaults: Vec<(String, String)>,
}

/// Bytes of log a read may pass over without rows of its table before its batch is
/// committed anyway, so a quiet table's position follows the log.
const IDLE_COMMIT_BYTES: u64 = 64 << 20;

impl TableSource {
    /// `work` on a connection to the server: the one the tables of this connection
    /// take turns on (`SharedLog::idle`, held until `work` is over), made when there is
    /// none or it no longer answers, and left for the next when `work` gives it back.
    /// A table read alone has a connection of its own.
    async fn on_connection<T>(
        &self,
        work: impl AsyncFnOnce(Conn) -> (Result<T, MysqlError>, Option<Conn>),
    ) -> Result<T, MysqlError> {
        let mut idle = match &self.log {
            Some(log) => Some(log.idle.lock().await),
            None => None,
        };
        let kept = idle.as_mut().and_then(|i| i.take());
        let conn = match kept {
            Some(mut conn) => match conn.ping().await {
                Ok(()) => conn,
                // It went away (a restart of the server, a timeout): a new one.
                Err(_) => self.connection.connect().await?,
            },
            None => self.connection.connect().await?,
        };
        let (done, back) = work(conn).await;
        match (idle.as_mut(), back) {
            (Some(idle), Some(conn)) if done.is_ok() => **idle = Some(conn),
            (_, Some(conn)) => {
                let _ = conn.disconnect().await;
            }
            (_, None) => {}
        }
        done
    }

    /// The table's columns, checked capturable.
    pub async fn columns(&self) -> Result<Vec<TableColumn>, MysqlError> {
        self.on_connection(async |mut conn: Conn| {
            let columns = match server::check_ready(&mut conn).await {
                Ok(_) => self.table_columns(&mut conn).await,
                Err(e) => Err(e),
            };
            (columns, Some(conn))
        })
        .await
    }

    pub(crate) async fn table_columns(
        &self,
        conn: &mut Conn,
    ) -> Result<Vec<TableColumn>, MysqlError> {
        let mut columns = columns::read(conn, &self.table).await?;
        for column in &mut columns {
            column.keep_text = self
                .text_columns
                .iter()
                .any(|t| t.eq_ignore_ascii_case(&column.name));
        }
        Ok(columns)
    }

    /// What is available after `after` (`None`: nothing read yet).
    pub async fn read(&self, after: Option<&Position>) -> Result<Read, MysqlError> {
        self.on_connection(async |conn: Conn| self.read_on(conn, after).await)
            .await
    }

    /// [`Self::read`] on `conn`, given back unless a dump of the log took it.
    async fn read_on(
        &self,
        mut conn: Conn,
        after: Option<&Position>,
    ) -> (Result<Read, MysqlError>, Option<Conn>) {
        let server = match server::check_ready(&mut conn).await {
            Ok(server) => server,
            Err(e) => return (Err(e), Some(conn)),
        };
        if let Some(id) = after
            .and_then(|p| p.server_id)
            .filter(|id| *id != server.id)
        {
            let refused = MysqlError::new(
                format!(
                    "the checkpoint of {} was read from the binary log of server id {id}, and {} is server id {}: binary log places are a server's own",
                    self.table,
                    self.connection.server(),
                    server.id
                ),
                "after a failover to another server, run `cdcflow run --full-refresh <bronze table> --cascade` for a new snapshot from it",
            );
            return (Err(refused), Some(conn));
        }
        let read_at_micros = match server::now_micros(&mut conn).await {
            Ok(now) => now,
            Err(e) => return (Err(e), Some(conn)),
        };
        let (read, back) = match after.map(|p| (p, &p.copy)) {
            Some((p, Copy::Start | Copy::Done)) => match self.stream(conn, &server, p).await {
                Ok((read, back)) => (Ok(read), back),
                Err(e) => (Err(e), None),
            },
            copying => {
                let (at, key, copied) = match copying {
                    Some((p, Copy::After { key, copied })) => {
                        (Some(&p.at), Some(key.as_slice()), *copied)
                    }
                    _ => (None, None, 0),
                };
                let read = self
                    .copy(&mut conn, &server, (key, copied), read_at_micros)
                    .await;
                let read = read.map(|mut read| {
                    // The stream starts where the copy's first chunk stood.
                    if let Some(at) = at {
                        read.position.at = at.clone();
                    }
                    read
                });
                (read, Some(conn))
            }
        };
        let read = read.map(|mut read| {
            read.position.server_id = Some(server.id);
            read.read_at_micros = read_at_micros;
            read
        });
        (read, back)
    }

    /// The next chunk of the copy.
    async fn copy(
        &self,
        conn: &mut Conn,
        server: &Server,
        (after, copied): (Option<&[serde_json::Value]>, u64),
        now: i64,
    ) -> Result<Read, MysqlError> {
        let columns = self.table_columns(conn).await?;
        let chunk =
            snapshot::chunk(conn, server, &self.table, &columns, after, self.max_changes).await?;
        let estimate = columns::estimated_rows(conn, &self.table).await;
        let position = Position {
            at: chunk.at.clone(),
            copy: match chunk.last_key {
                Some(key) => Copy::After {
                    key,
                    copied: copied + u64::try_from(chunk.rows.len()).unwrap_or(u64::MAX),
                },
                None => Copy::Done,
            },
            server_id: None,
            columns: described(&columns),
            applied_until_micros: None,
        };
        let file: std::sync::Arc<str> = std::sync::Arc::from(chunk.at.file.as_str());
        let defaults = defaults(&columns);
        let mut rows = ChangeRows::new(columns);
        for row in &chunk.rows {
            rows.push(
                row,
                ChangeMeta {
                    kind: ChangeKind::Snapshot,
                    position: chunk.at.order(),
                    seq: 0,
                    commit_micros: Some(now),
                    file: std::sync::Arc::clone(&file),
                },
            );
        }
        // More follows at once: the next chunk, or after the last one the changes
        // made since the first.
        let more = true;
        Ok(Read {
            rows: rows.finish()?,
            position,
            must_commit: true,
            chunk: true,
            more,
            read_at_micros: 0,
            estimate,
            defaults,
        })
    }

    /// The changes after `from`, up to where the log ends now; `conn` back when no dump
    /// took it.
    async fn stream(
        &self,
        mut conn: Conn,
        server: &Server,
        from: &Position,
    ) -> Result<(Read, Option<Conn>), MysqlError> {
        let files = server::log_files(&mut conn).await?;
        if !files.iter().any(|(name, _)| *name == from.at.file) {
            let oldest = files.first().map(|(n, _)| n.as_str()).unwrap_or("none");
            return Err(purged(
                &self.table,
                &from.at,
                &format!("the oldest file it keeps is {oldest}"),
            ));
        }
        let (log, columns, back) = match &self.log {
            Some(shared) => shared.read(self, conn, server, &from.at).await?,
            None => {
                let (log, columns) = self.read_alone(conn, server, &from.at).await?;
                (log, columns, None)
            }
        };
        for column in &columns {
            let was = from
                .columns
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(&column.name));
            if let Some((_, was)) = was
                && *was != column.arrow_type().to_string()
            {
                return Err(retyped(&self.table, column, was));
            }
        }
        let described = described(&columns);
        let defaults = defaults(&columns);
        let read = binlog::StreamRead {
            rows: log.rows_after(columns, &from.at),
            at: log.at,
            more: log.more,
        };
        let quiet = read.rows.is_empty()
            && (read.at.file != from.at.file
                || read.at.pos.saturating_sub(from.at.pos) > IDLE_COMMIT_BYTES);
        let read = Read {
            rows: read.rows.finish()?,
            position: Position {
                at: read.at,
                copy: Copy::Done,
                server_id: None,
                columns: described,
                applied_until_micros: None,
            },
            must_commit: quiet,
            chunk: false,
            more: read.more,
            read_at_micros: 0,
            estimate: None,
            defaults,
        };
        Ok((read, back))
    }

    /// The table's transactions after `from`, in a dump of its own.
    async fn read_alone(
        &self,
        mut conn: Conn,
        server: &Server,
        from: &BinlogPos,
    ) -> Result<(binlog::TableLog, Vec<TableColumn>), MysqlError> {
        // The stop place first, then the columns: every column a transaction up to the
        // stop added is among them.
        let stop = server::log_end(&mut conn).await?;
        let columns = self.table_columns(&mut conn).await?;
        let request = Request {
            table: &self.table,
            from,
            stop: &stop,
            max_changes: self.max_changes,
            dump_id: dump_id(),
            fold_names: server.fold_names,
        };
        let member = binlog::Member {
            table: &self.table,
            columns: &columns,
            from: from.clone(),
            max_changes: self.max_changes,
        };
        let mut logs = binlog::read_many(conn, std::slice::from_ref(&member), &request).await?;
        let log = logs
            .pop()
            .unwrap_or_else(|| Ok(binlog::TableLog::default()))?;
        Ok((log, columns))
    }

    /// How far the log runs past `after`, and whether it still holds `after`.
    pub async fn behind(&self, after: &BinlogPos) -> Result<(Option<u64>, i64), MysqlError> {
        self.on_connection(async |mut conn: Conn| {
            let asked = async {
                let files = server::log_files(&mut conn).await?;
                let now = server::now_micros(&mut conn).await?;
                Ok((server::bytes_after(&files, after), now))
            }
            .await;
            (asked, Some(conn))
        })
        .await
    }
}

/// The columns of `columns` that have a default, with it.
fn defaults(columns: &[TableColumn]) -> Vec<(String, String)> {
    columns
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.default.clone()?)))
        .collect()
}

/// The columns as a position records them: name and Arrow type.
fn described(columns: &[TableColumn]) -> Vec<(String, String)> {
    columns
        .iter()
        .map(|c| (c.name.clone(), c.arrow_type().to_string()))
        .collect()
}

/// A server id for one binary log dump: unique among the dumps of this process, and
/// apart from other processes' (the server ends an older dump of the same id).
pub(crate) fn dump_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    0x4000_0000 | ((std::process::id() << 12) ^ n) & 0x3fff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_ids_differ_within_a_process() {
        let a = dump_id();
        let b = dump_id();
        assert_ne!(a, b);
        assert!(a >= 0x4000_0000);
    }
}
