//! Reading a table's changes from the binary log: a dump from a place (`COM_BINLOG_DUMP`
//! with `BINLOG_DUMP_NON_BLOCK`, so the server sends what its log holds and ends the
//! stream), whole transactions of the table's row events, up to a stop place taken
//! before the table's columns were read (so every column a transaction it takes added
//! is among them) and to a number of changes.
//!
//! Each transaction ends at an `XID` event (InnoDB), a `COMMIT` statement, or a
//! statement of its own (DDL, which commits implicitly); its end is the position of
//! every change in it. Row images map to the table's columns by name (the log carries
//! names under `binlog_row_metadata = FULL`): a column the table has and an older row
//! lacks (added since) is NULL, a name the table no longer has (dropped or renamed
//! while its changes were still to be read) or a value of another type fails the read
//! naming the column.

use std::sync::Arc;

use cdcflow_plan::read_mysql::MysqlTable;
use cdcflow_postgres::ChangeKind;
use futures::StreamExt;
use mysql_async::binlog::events::{EventData, RowsEventData};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::consts::ColumnType;
use mysql_async::{BinlogStreamRequest, Conn, Value};

use crate::columns::{SPATIAL, TableColumn, key_places};
use crate::connection::MysqlError;
use crate::position::BinlogPos;
use crate::rows::{ChangeMeta, ChangeRows};
use crate::statement::{Statement, classify};
use crate::values::from_binlog;

/// What one read of the log took.
#[derive(Debug)]
pub struct StreamRead {
    pub rows: ChangeRows,
    /// The end of the last transaction read (taken, or of other tables): the next read
    /// starts there.
    pub at: BinlogPos,
    /// The read stopped at `max_changes`: more may follow at once.
    pub more: bool,
}

/// What a read is asked for.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub table: &'a MysqlTable,
    pub from: &'a BinlogPos,
    /// Transactions that end after it are left for the next read.
    pub stop: &'a BinlogPos,
    pub max_changes: u64,
    /// The id the dump registers with (unique among the server's replicas).
    pub dump_id: u32,
    /// The server compares table names without case (`lower_case_table_names` 1 or 2).
    pub fold_names: bool,
}

/// One table of a read of the log that takes several (a sync's tables on one
/// connection read the log once).
#[derive(Debug, Clone)]
pub struct Member<'a> {
    pub table: &'a MysqlTable,
    pub columns: &'a [TableColumn],
    /// Transactions that end at or before it are the table's already.
    pub from: BinlogPos,
    pub max_changes: u64,
}

/// A committed transaction's changes of one table.
#[derive(Debug, Clone)]
pub struct Txn {
    /// Where it ends: every change's position.
    pub end: BinlogPos,
    pub committed_micros: i64,
    pub file: Arc<str>,
    pub changes: Vec<(ChangeKind, Vec<Value>)>,
}

/// What a read of the log took of one table.
#[derive(Debug, Clone, Default)]
pub struct TableLog {
    pub txns: Vec<Txn>,
    /// The end of the last transaction passed over (the table's or not).
    pub at: BinlogPos,
    /// It stopped at the table's `max_changes`.
    pub more: bool,
}

impl TableLog {
    /// The changes of transactions that end after `from`, as rows.
    pub fn rows_after(&self, columns: Vec<TableColumn>, from: &BinlogPos) -> ChangeRows {
        let mut rows = ChangeRows::new(columns);
        for txn in self.txns.iter().filter(|t| t.end > *from) {
            let order = txn.end.order();
            for (seq, (kind, values)) in txn.changes.iter().enumerate() {
                rows.push(
                    values,
                    ChangeMeta {
                        kind: *kind,
                        position: order,
                        seq: i64::try_from(seq).unwrap_or(i64::MAX - 1) + 1,
                        commit_micros: Some(txn.committed_micros),
                        file: Arc::clone(&txn.file),
                    },
                );
            }
        }
        rows
    }
}

/// MySQL's compressed transaction (`binlog_transaction_compression`), whose events the
/// driver unpacks; they carry place 0, the payload's end stands for theirs.
const TRANSACTION_PAYLOAD_EVENT: u8 = 40;
/// An XA transaction's prepare, which logs its rows before it commits or rolls back.
const XA_PREPARE_LOG_EVENT: u8 = 38;
/// MariaDB's compressed query and row events (`log_bin_compress`), which the driver
/// does not parse.
const MARIADB_COMPRESSED_EVENTS: [u8; 6] = [166, 167, 168, 169, 170, 171];

fn stream_error(table: &MysqlTable, from: &BinlogPos, e: &mysql_async::Error) -> MysqlError {
    let text = e.to_string();
    // Error 1236 has other causes too (an event over max_allowed_packet, a cut log):
    // only a missing file is a purge.
    if text
        .to_ascii_lowercase()
        .contains("could not find first log file")
    {
        return purged(table, from, &text);
    }
    let mut error = MysqlError::new(
        format!("reading the binary log of {table} from {from}: {e}"),
        "the next run reads again from the committed position; check the server is up and the user has REPLICATION SLAVE",
    );
    error.unreachable = matches!(e, mysql_async::Error::Io(_));
    error
}

/// The error for a log the server no longer has from `from` on.
pub fn purged(table: &MysqlTable, from: &BinlogPos, why: &str) -> MysqlError {
    MysqlError::new(
        format!(
            "the binary log of {table} from {from}, where the checkpoint goes on, is gone from the server ({why}): the changes in between are lost to read_mysql"
        ),
        "run `cdcflow run --full-refresh <bronze table> --cascade` for a new snapshot of the table; keep binary logs longer than the pipeline may be stopped (binlog_expire_logs_seconds)",
    )
}

/// A member's state while the log is read.
struct Reading<'a> {
    member: &'a Member<'a>,
    log: TableLog,
    open: Vec<(ChangeKind, Vec<Value>)>,
    changes: u64,
    /// Its read is over: stopped at its size, or failed.
    done: Option<Result<(), MysqlError>>,
}

impl Reading<'_> {
    fn fail(&mut self, e: MysqlError) {
        if self.done.is_none() {
            self.done = Some(Err(e));
        }
    }
}

/// Reads the transactions of every member after its `from`, in one dump from
/// `request.from` (no later than any member's) to `request.stop`. An error of the
/// stream is the read's (`request.table` names it); an error of one table's changes
/// (dropped, logged as a statement…) is that member's only.
pub async fn read_many(
    conn: Conn,
    members: &[Member<'_>],
    request: &Request<'_>,
) -> Result<Vec<Result<TableLog, MysqlError>>, MysqlError> {
    let table = request.table;
    let from = request.from;
    // How often the log is read, and for how many tables (RUST_LOG=cdcflow_mysql=info).
    tracing::info!(tables = members.len(), %from, stop = %request.stop, "reading the binary log");
    let err = |e: mysql_async::Error| stream_error(table, from, &e);
    let mut stream = conn
        .get_binlog_stream(
            BinlogStreamRequest::new(request.dump_id)
                .with_filename(from.file.as_bytes())
                .with_pos(from.pos)
                .with_non_blocking(),
        )
        .await
        .map_err(err)?;
    let mut reading: Vec<Reading> = members
        .iter()
        .map(|member| Reading {
            member,
            log: TableLog {
                txns: vec![],
                at: member.from.clone().max(from.clone()),
                more: false,
            },
            open: vec![],
            changes: 0,
            done: None,
        })
        .collect();
    let mut file: Arc<str> = Arc::from(from.file.as_str());
    // Inside `BEGIN` … `COMMIT`/`XID` (a statement there, `SAVEPOINT` say, ends
    // nothing); outside, each statement is a transaction of its own.
    let mut begun = false;
    let mut described = false;
    // The end of the last compressed transaction payload (MySQL's
    // binlog_transaction_compression): the events inside it carry no place of their own.
    let mut payload_end = 0;
    while let Some(event) = stream.next().await {
        let event = event.map_err(err)?;
        let raw_type = event.header().event_type_raw();
        let log_pos = u64::from(event.header().log_pos());
        if raw_type == TRANSACTION_PAYLOAD_EVENT {
            payload_end = log_pos;
        }
        let end = BinlogPos {
            file: file.to_string(),
            pos: match log_pos {
                0 => payload_end,
                pos => pos,
            },
        };
        if MARIADB_COMPRESSED_EVENTS.contains(&raw_type) {
            return Err(MysqlError::new(
                format!(
                    "the binary log of {table} holds a compressed event at {end} (log_bin_compress = ON), which read_mysql does not read"
                ),
                "SET GLOBAL log_bin_compress = OFF (and in the server's configuration), then run `cdcflow run --full-refresh <bronze table> --cascade`",
            ));
        }
        if raw_type == XA_PREPARE_LOG_EVENT {
            // An XA transaction's rows are logged when it is prepared, and it may be
            // rolled back later: its rows cannot be taken as committed.
            for r in reading.iter_mut().filter(|r| r.done.is_none()) {
                // A member's own place is a transaction's end: what comes before it is
                // its already, and never fails it.
                if !r.open.is_empty() && end > r.member.from {
                    let t = r.member.table;
                    r.fail(MysqlError::new(
                        format!(
                            "{t} was changed by an XA transaction (prepared at {end}), which read_mysql does not read"
                        ),
                        "change the table outside XA transactions, then run `cdcflow run --full-refresh <bronze table> --cascade`",
                    ));
                }
                r.open.clear();
                if end > r.log.at {
                    r.log.at = end.clone();
                }
            }
            begun = false;
            continue;
        }
        let committed_at = i64::from(event.header().timestamp()) * 1_000_000;
        let data = event.read_data().map_err(|e| {
            MysqlError::new(
                format!("a binary log event of {table} at {end} cannot be read: {e}"),
                "report this, with the server's version",
            )
        })?;
        let ends_transaction = match data {
            // The dump begins with an artificial rotate naming the file asked for,
            // sent before the format event that says whether events carry checksums
            // (so its name would read with the checksum's bytes): the file is known.
            Some(EventData::RotateEvent(rotate)) if described => {
                file = Arc::from(rotate.name().as_ref());
                false
            }
            Some(EventData::FormatDescriptionEvent(_)) => {
                described = true;
                false
            }
            Some(EventData::QueryEvent(query)) => {
                let (sql, schema) = (query.query(), query.schema());
                let mut ends = false;
                for r in reading.iter_mut() {
                    let t = r.member.table;
                    let statement = match classify(&sql, &schema, t, request.fold_names) {
                        // Before the member's place, a statement only begins or ends a
                        // transaction.
                        Statement::Truncate
                        | Statement::Gone
                        | Statement::PartitionRows
                        | Statement::LoggedAsStatement
                            if end <= r.member.from =>
                        {
                            Statement::Other
                        }
                        statement => statement,
                    };
                    match statement {
                        Statement::Begin => {
                            r.open.clear();
                            begun = true;
                        }
                        Statement::Commit => ends = true,
                        Statement::Other => ends |= !begun,
                        Statement::Truncate => {
                            r.open.push((ChangeKind::Truncate, vec![]));
                            ends = true;
                        }
                        Statement::Gone => r.fail(MysqlError::new(
                            format!(
                                "{t} was dropped or renamed at {end} (`{sql}`): the binary log's later rows under its name are another table's"
                            ),
                            "if a table of that name is to be captured again, run `cdcflow run --full-refresh <bronze table> --cascade`; if it was renamed, change `table =>` and refresh",
                        )),
                        Statement::PartitionRows => r.fail(MysqlError::new(
                            format!(
                                "{t} lost or swapped the rows of a partition at {end} (`{sql}`), which the binary log records as a statement, without the rows"
                            ),
                            "run `cdcflow run --full-refresh <bronze table> --cascade` for a new snapshot of the table as it is; delete rows with DELETE where the pipeline must see them",
                        )),
                        Statement::LoggedAsStatement => r.fail(MysqlError::new(
                            format!(
                                "a change to {t} at {end} was logged as a statement, not as rows (`{sql}`): a session ran with binlog_format other than ROW, and its changes cannot be read"
                            ),
                            "make every session log rows (binlog_format = ROW globally, and no SET SESSION binlog_format), then run `cdcflow run --full-refresh <bronze table> --cascade`",
                        )),
                    }
                }
                // A statement of no member still begins or ends a transaction.
                if reading.is_empty() {
                    ends = !begun;
                }
                ends
            }
            Some(EventData::XidEvent(_)) => true,
            Some(EventData::RowsEvent(rows_event)) => {
                let Some(map) = stream.get_tme(rows_event.table_id()) else {
                    return Err(MysqlError::new(
                        format!(
                            "a row event at {end} names table id {}, which no table map event before it describes",
                            rows_event.table_id()
                        ),
                        "report this, with the server's version: the rows cannot be told to be or not to be the table's",
                    ));
                };
                let logged = MysqlTable {
                    database: map.database_name().into_owned(),
                    name: map.table_name().into_owned(),
                };
                let deletes = matches!(
                    rows_event,
                    RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_)
                );
                // Every member reading the table (two flows may), from its own place.
                for r in reading.iter_mut().filter(|r| {
                    r.done.is_none()
                        && end > r.member.from
                        && crate::statement::same_table(&logged, r.member.table, request.fold_names)
                }) {
                    if let Err(e) = take_rows(&rows_event, map, deletes, r, &end) {
                        r.fail(e);
                    }
                }
                false
            }
            _ => false,
        };
        if !ends_transaction {
            continue;
        }
        if end > *request.stop {
            break;
        }
        begun = false;
        for r in reading.iter_mut() {
            let changes = std::mem::take(&mut r.open);
            if r.done.is_some() || end <= r.member.from {
                continue;
            }
            if !changes.is_empty() {
                r.changes += u64::try_from(changes.len()).unwrap_or(u64::MAX);
                r.log.txns.push(Txn {
                    end: end.clone(),
                    committed_micros: committed_at,
                    file: Arc::clone(&file),
                    changes,
                });
            }
            r.log.at = end.clone();
            if r.changes >= r.member.max_changes {
                r.log.more = true;
                r.done = Some(Ok(()));
            }
        }
        if reading.iter().all(|r| r.done.is_some()) {
            break;
        }
    }
    let _ = stream.close().await;
    Ok(reading
        .into_iter()
        .map(|r| match r.done {
            Some(Err(e)) => Err(e),
            _ => Ok(r.log),
        })
        .collect())
}

/// A row event's changes, added to the member's open transaction.
fn take_rows(
    rows_event: &RowsEventData<'_>,
    map: &mysql_async::binlog::events::TableMapEvent<'_>,
    deletes: bool,
    r: &mut Reading<'_>,
    end: &BinlogPos,
) -> Result<(), MysqlError> {
    let (table, columns) = (r.member.table, r.member.columns);
    for row in rows_event.rows(map) {
        let (before, after) = row.map_err(|e| {
            MysqlError::new(
                format!("a row event of {table} at {end} cannot be read: {e}"),
                "report this, with the server's version and the table's definition",
            )
        })?;
        let before = before.map(|r| image(r, columns, table)).transpose()?;
        let after = after.map(|r| image(r, columns, table)).transpose()?;
        match (before, after) {
            (Some(old), None) if deletes => r.open.push((ChangeKind::Delete, old)),
            (None, Some(new)) => r.open.push((ChangeKind::Insert, new)),
            (Some(old), Some(new)) => {
                let keys = key_places(columns);
                let moved = keys.iter().any(|k| old.get(*k) != new.get(*k));
                if moved {
                    // A changed key: the row under its old key is gone.
                    r.open.push((ChangeKind::Delete, old));
                }
                r.open.push((ChangeKind::Update, new));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A row image as the table's values, in its column order.
fn image(
    mut row: BinlogRow,
    columns: &[TableColumn],
    table: &MysqlTable,
) -> Result<Vec<Value>, MysqlError> {
    let mut values = vec![Value::NULL; columns.len()];
    let logged: Vec<(String, ColumnType)> = row
        .columns_ref()
        .iter()
        .map(|c| (c.name_str().into_owned(), c.column_type()))
        .collect();
    for (i, (name, kind)) in logged.into_iter().enumerate() {
        if name.starts_with('@') {
            return Err(MysqlError::new(
                format!("the binary log's rows of {table} carry no column names"),
                "SET GLOBAL binlog_row_metadata = 'FULL' (and in the server's configuration); rows logged before that cannot be read: run `cdcflow run --full-refresh <bronze table> --cascade`",
            ));
        }
        let Some(place) = columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(&name))
        else {
            return Err(MysqlError::new(
                format!(
                    "column `{name}` of {table} was dropped or renamed while changes from before were still to be read"
                ),
                "run `cdcflow run --full-refresh <bronze table> --cascade` for a new snapshot of the table as it is",
            ));
        };
        let Some(column) = columns.get(place) else {
            continue;
        };
        if !same_kind(kind, &column.data_type) {
            return Err(retyped(table, column, &format!("{kind:?}")));
        }
        let Some(value) = row.take(i) else {
            continue;
        };
        let value = from_binlog(column, value).map_err(|why| {
            MysqlError::new(
                format!("{table}: {why}"),
                "report this, with the column's type",
            )
        })?;
        if let Some(slot) = values.get_mut(place) {
            *slot = value;
        }
    }
    Ok(values)
}

/// The error for a column whose type changed while its changes were being read.
pub fn retyped(table: &MysqlTable, column: &TableColumn, was: &str) -> MysqlError {
    MysqlError::new(
        format!(
            "column `{}` of {table} changed type (now {}, was {was}): its stored values and the new ones cannot share a column",
            column.name, column.column_type
        ),
        "run `cdcflow run --full-refresh <bronze table> --cascade` for a new snapshot of the table as it is",
    )
}

/// Whether a row event's column type is that of a column of `data_type` (the log's
/// types are coarser: `char` and `binary` share one, as do texts and blobs).
fn same_kind(logged: ColumnType, data_type: &str) -> bool {
    use ColumnType::*;
    let expected: &[&str] = match logged {
        MYSQL_TYPE_TINY => &["tinyint"],
        MYSQL_TYPE_SHORT => &["smallint"],
        MYSQL_TYPE_INT24 => &["mediumint"],
        MYSQL_TYPE_LONG => &["int", "integer"],
        MYSQL_TYPE_LONGLONG => &["bigint"],
        MYSQL_TYPE_NEWDECIMAL | MYSQL_TYPE_DECIMAL => &["decimal", "numeric"],
        MYSQL_TYPE_FLOAT => &["float"],
        MYSQL_TYPE_DOUBLE => &["double", "real"],
        MYSQL_TYPE_BIT => &["bit"],
        MYSQL_TYPE_YEAR => &["year"],
        MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => &["date"],
        MYSQL_TYPE_DATETIME | MYSQL_TYPE_DATETIME2 => &["datetime"],
        MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_TIMESTAMP2 => &["timestamp"],
        MYSQL_TYPE_TIME | MYSQL_TYPE_TIME2 => &["time"],
        MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING => &["varchar", "varbinary"],
        MYSQL_TYPE_STRING => &["char", "binary"],
        MYSQL_TYPE_ENUM => &["enum"],
        MYSQL_TYPE_SET => &["set"],
        MYSQL_TYPE_JSON => &["json"],
        MYSQL_TYPE_TINY_BLOB | MYSQL_TYPE_BLOB | MYSQL_TYPE_MEDIUM_BLOB | MYSQL_TYPE_LONG_BLOB => {
            &[
                "tinytext",
                "text",
                "mediumtext",
                "longtext",
                "tinyblob",
                "blob",
                "mediumblob",
                "longblob",
                "json",
            ]
        }
        MYSQL_TYPE_GEOMETRY => SPATIAL,
        _ => return false,
    };
    expected.contains(&data_type)
}
