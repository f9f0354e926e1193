//! One reader of a server's binary log for every table a run reads from it (a sync's
//! fifty tables, say): the first table to read dumps the log once for all of them, and
//! keeps what it found of the others for their own reads, which then take it instead
//! of dumping the log again. Dumps of one connection go one at a time.
//!
//! What a table is given is exactly what a dump of its own would have given: the
//! transactions that end after its committed place, up to a stop place taken before
//! its columns were read, to its size; only which dump read them differs. A table whose
//! place the kept part does not cover (it is behind the dump that kept it, or ahead of
//! it) reads again, for itself and for the others. A part is given once: a table up to
//! date is told so by the part that found nothing for it, and its next read dumps anew.

use std::collections::HashMap;

use mysql_async::Conn;

use crate::binlog::{self, Member, Request, TableLog};
use crate::columns::TableColumn;
use crate::connection::MysqlError;
use crate::position::{BinlogPos, Copy, Position};
use crate::server::{self, Server};
use crate::source::TableSource;

/// Changes kept for the tables other than the one that reads, in all: a dump keeps at
/// most this many rows for the others together, so memory stays bounded whatever the
/// number of tables (one that reaches its share reads the rest itself).
const KEPT_FOR_OTHERS: u64 = 200_000;

/// The binary log of one connection, read for every table the pipeline reads through it.
#[derive(Default)]
pub struct SharedLog {
    members: Vec<Reader>,
    kept: tokio::sync::Mutex<HashMap<ReaderId, Kept>>,
    /// The place each table last read from: no later than where it streams from now
    /// (a table's place only moves on), so its checkpoint need not be read again.
    known: std::sync::Mutex<HashMap<ReaderId, BinlogPos>>,
    /// The connection the tables' reads take turns on: a read holds it (the others
    /// wait), asks the server through it, and leaves it for the next unless a dump of
    /// the log took it. So a poll of fifty tables costs the server the dump's
    /// connection and this one, not a connection per table.
    pub(crate) idle: tokio::sync::Mutex<Option<Conn>>,
}

/// What tells two readers' rows apart: the table, as the server compares its name, and
/// how its rows are made (columns kept as text, the size of a read). Two flows reading
/// one table alike share what a dump kept; read otherwise, they are two readers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ReaderId {
    database: String,
    name: String,
    text_columns: Vec<String>,
    max_changes: u64,
}

impl ReaderId {
    fn of(source: &TableSource, fold_names: bool) -> Self {
        let fold = |s: &str| match fold_names {
            true => s.to_lowercase(),
            false => s.to_string(),
        };
        let mut text_columns: Vec<String> = source
            .text_columns
            .iter()
            .map(|c| c.to_lowercase())
            .collect();
        text_columns.sort();
        Self {
            database: fold(&source.table.database),
            name: fold(&source.table.name),
            text_columns,
            max_changes: source.max_changes,
        }
    }
}

/// A table read through the connection, and where its flow commits its place.
pub struct Reader {
    pub source: TableSource,
    pub storage: cdcflow_plan::location::Location,
    pub flow: String,
    pub target: cdcflow_plan::Dataset,
    /// The input's checkpoint key.
    pub key: String,
}

impl std::fmt::Debug for SharedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedLog")
    }
}

/// What a dump found of a table that did not ask for it.
struct Kept {
    /// Where the dump began: the part covers a table whose place is at or after it.
    from: BinlogPos,
    log: TableLog,
    columns: Vec<TableColumn>,
}

impl SharedLog {
    pub fn new(members: Vec<Reader>) -> Self {
        Self {
            members,
            kept: tokio::sync::Mutex::default(),
            known: std::sync::Mutex::default(),
            idle: tokio::sync::Mutex::default(),
        }
    }

    /// Where each other table streams from now (its committed place, once its copy is
    /// over), for those the server's log still holds: the dump begins at the lowest.
    async fn others_from(
        &self,
        own: &ReaderId,
        fold_names: bool,
        files: &[(String, u64)],
    ) -> Vec<(&TableSource, ReaderId, BinlogPos)> {
        let mut out = vec![];
        let known = self.known.lock().map(|k| k.clone()).unwrap_or_default();
        let held = |at: &BinlogPos| files.iter().any(|(name, _)| *name == at.file);
        for r in self.members.iter() {
            let id = ReaderId::of(&r.source, fold_names);
            if id == *own
                || out
                    .iter()
                    .any(|(_, o, _): &(&TableSource, ReaderId, _)| *o == id)
            {
                continue;
            }
            if let Some(at) = known.get(&id) {
                if held(at) {
                    out.push((&r.source, id, at.clone()));
                }
                continue;
            }
            let committed = cdcflow_runtime::checkpoint::committed_position(
                &r.storage, &r.flow, &r.target, &r.key,
            )
            .await;
            let Some(position) = committed
                .ok()
                .flatten()
                .and_then(|v| Position::parse(&v).ok())
            else {
                continue;
            };
            let streaming = matches!(position.copy, Copy::Start | Copy::Done);
            if streaming && held(&position.at) {
                out.push((&r.source, id, position.at));
            }
        }
        out
    }

    /// `source`'s transactions after `from`, with its columns as they were when the stop
    /// place was taken; `conn` back when no dump took it.
    pub async fn read(
        &self,
        source: &TableSource,
        mut conn: Conn,
        server: &Server,
        from: &BinlogPos,
    ) -> Result<(TableLog, Vec<TableColumn>, Option<Conn>), MysqlError> {
        // Held through the dump: the other tables' reads wait for what it keeps.
        let mut kept = self.kept.lock().await;
        let own = ReaderId::of(source, server.fold_names);
        if let Ok(mut known) = self.known.lock() {
            known.insert(own.clone(), from.clone());
        }
        if let Some(part) = kept.remove(&own)
            && part.from <= *from
            // A part that ends at the table's place gives it something only when it
            // read to its stop (nothing more for it there); one that stopped at its
            // size there holds nothing after the place.
            && (*from < part.log.at || *from == part.log.at && !part.log.more)
        {
            return Ok((part.log, part.columns, Some(conn)));
        }
        // The stop place first, then the columns: every column a transaction up to the
        // stop added is among them.
        let files = server::log_files(&mut conn).await?;
        let others = self.others_from(&own, server.fold_names, &files).await;
        let stop = server::log_end(&mut conn).await?;
        let columns = source.table_columns(&mut conn).await?;
        let share = KEPT_FOR_OTHERS / u64::try_from(others.len().max(1)).unwrap_or(1);
        let mut other_columns = Vec::with_capacity(others.len());
        for (other, id, other_from) in others {
            // A table whose columns cannot be read now reads (and fails) on its own.
            if let Ok(c) = other.table_columns(&mut conn).await {
                other_columns.push((other, id, other_from, c));
            }
        }
        let start = other_columns
            .iter()
            .map(|(_, _, f, _)| f)
            .chain([from])
            .min()
            .cloned()
            .unwrap_or_else(|| from.clone());
        let mut members = vec![Member {
            table: &source.table,
            columns: &columns,
            from: from.clone(),
            max_changes: source.max_changes,
        }];
        members.extend(
            other_columns
                .iter()
                .map(|(other, _, other_from, c)| Member {
                    table: &other.table,
                    columns: c,
                    from: other_from.clone(),
                    max_changes: other.max_changes.min(share.max(1)),
                }),
        );
        let request = Request {
            table: &source.table,
            from: &start,
            stop: &stop,
            max_changes: source.max_changes,
            dump_id: crate::source::dump_id(),
            fold_names: server.fold_names,
        };
        let mut logs = binlog::read_many(conn, &members, &request)
            .await?
            .into_iter();
        let own = logs.next().unwrap_or_else(|| Ok(TableLog::default()))?;
        for ((_, id, other_from, c), log) in other_columns.into_iter().zip(logs) {
            // A table whose changes cannot be read meets the error on its own read.
            if let Ok(log) = log {
                kept.insert(
                    id,
                    Kept {
                        from: other_from,
                        log,
                        columns: c,
                    },
                );
            }
        }
        Ok((own, columns, None))
    }
}
