//! A table's initial copy, in chunks of its primary key, each read inside a consistent
//! snapshot whose exact place in the binary log is known: on MariaDB `START
//! TRANSACTION WITH CONSISTENT SNAPSHOT` and its `binlog_snapshot_file` and
//! `binlog_snapshot_position` (no lock at all); on MySQL the short global read lock
//! Debezium takes (`FLUSH TABLES WITH READ LOCK`, the snapshot, `SHOW MASTER STATUS`,
//! `UNLOCK TABLES`). A transaction is in the chunk exactly when it ends at or before
//! that place. The chunk's rows carry it as their position, with place 0 in it, so a
//! change the stream gives for one of them sorts before or after the copied row exactly
//! as it committed before or after the chunk was read. The stream starts at the first
//! chunk's place, so it has every change since.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Value};

use cdcflow_plan::read_mysql::{MysqlTable, quote};

use crate::columns::{TableColumn, key_places, server_error};
use crate::connection::MysqlError;
use crate::position::{BinlogPos, KeyValue};
use crate::server::{Server, log_end};

/// One chunk copied.
#[derive(Debug)]
pub struct Chunk {
    /// The rows, each its values in the table's column order.
    pub rows: Vec<Vec<Value>>,
    /// Where the snapshot it was read in stands in the binary log.
    pub at: BinlogPos,
    /// The last row's key, when the chunk was full (the copy goes on after it).
    pub last_key: Option<Vec<KeyValue>>,
}

/// Reads the rows after `after` (all from the start when `None`), `limit` of them at
/// most, in key order, inside a new consistent snapshot.
pub async fn chunk(
    conn: &mut Conn,
    server: &Server,
    table: &MysqlTable,
    columns: &[TableColumn],
    after: Option<&[KeyValue]>,
    limit: u64,
) -> Result<Chunk, MysqlError> {
    let err = |e: mysql_async::Error| server_error(table, &e);
    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .map_err(err)?;
    let at = match server.mariadb {
        true => {
            conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                .await
                .map_err(err)?;
            let rows: Vec<(String, String)> = conn
                .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
                .await
                .map_err(err)?;
            let value = |name: &str| {
                rows.iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            BinlogPos {
                file: value("binlog_snapshot_file").unwrap_or_default(),
                pos: value("binlog_snapshot_position")
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_default(),
            }
        }
        false => {
            conn.query_drop("FLUSH TABLES WITH READ LOCK")
                .await
                .map_err(|e| MysqlError::new(
                    format!("taking the global read lock for {table}'s snapshot: {e}"),
                    "on MySQL the snapshot's place in the binary log is read under FLUSH TABLES WITH READ LOCK, held for milliseconds: grant the connection's user RELOAD",
                ))?;
            let started = conn
                .query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                .await;
            let at = log_end(conn).await;
            let unlocked = conn.query_drop("UNLOCK TABLES").await;
            started.map_err(err)?;
            unlocked.map_err(err)?;
            at?
        }
    };
    if at.file.is_empty() {
        return Err(MysqlError::new(
            format!("the server gave no binary log place for {table}'s snapshot"),
            "start the server with log_bin",
        ));
    }
    let keys = key_places(columns);
    let key_names: Vec<String> = keys
        .iter()
        .filter_map(|k| columns.get(*k))
        .map(|c| quote(&c.name))
        .collect();
    let list: Vec<String> = columns.iter().map(|c| quote(&c.name)).collect();
    let mut sql = format!("SELECT {} FROM {}", list.join(", "), table.sql());
    let mut params: Vec<Value> = vec![];
    if let Some(after) = after {
        // A key value goes back as text; MySQL compares text with a DECIMAL as a
        // double, which loses digits past 15: cast it to the column's own type.
        let marks: Vec<String> = keys
            .iter()
            .filter_map(|k| columns.get(*k))
            .map(|c| match (c.data_type.as_str(), c.precision, c.scale) {
                ("decimal" | "numeric", Some(p), Some(s)) => {
                    format!("CAST(? AS DECIMAL({p},{s}))")
                }
                _ => "?".to_string(),
            })
            .collect();
        let marks = marks.join(", ");
        sql.push_str(&format!(" WHERE ({}) > ({marks})", key_names.join(", ")));
        params = after.iter().map(key_param).collect();
    }
    sql.push_str(&format!(" ORDER BY {} LIMIT {limit}", key_names.join(", ")));
    let rows: Vec<Row> = conn.exec(sql, params).await.map_err(err)?;
    conn.query_drop("COMMIT").await.map_err(err)?;
    let rows: Vec<Vec<Value>> = rows.into_iter().map(Row::unwrap).collect();
    let full = u64::try_from(rows.len()).unwrap_or(u64::MAX) >= limit;
    let last_key = match (full, rows.last()) {
        (true, Some(row)) => Some(
            keys.iter()
                .map(|k| key_value(row.get(*k).unwrap_or(&Value::NULL)))
                .collect(),
        ),
        _ => None,
    };
    Ok(Chunk { rows, at, last_key })
}

/// A key's value as the checkpoint keeps it.
fn key_value(value: &Value) -> KeyValue {
    match value {
        Value::Int(i) => (*i).into(),
        Value::UInt(u) => (*u).into(),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(text) => text.into(),
            Err(_) => serde_json::json!({ "bytes": b }),
        },
        Value::Float(f) => f64::from(*f).into(),
        Value::Double(d) => (*d).into(),
        Value::Date(y, m, d, h, mi, s, us) => {
            format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}").into()
        }
        Value::Time(negative, days, h, m, s, us) => format!(
            "{}{}:{m:02}:{s:02}.{us:06}",
            if *negative { "-" } else { "" },
            u32::from(*h) + days * 24
        )
        .into(),
        Value::NULL => serde_json::Value::Null,
    }
}

/// A kept key value as a statement's parameter (MySQL compares a text parameter with a
/// number, date or time column as that type).
fn key_param(value: &KeyValue) -> Value {
    match value {
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::Int(i),
            (None, Some(u), _) => Value::UInt(u),
            (None, None, Some(f)) => Value::Double(f),
            _ => Value::NULL,
        },
        serde_json::Value::String(s) => Value::Bytes(s.clone().into_bytes()),
        serde_json::Value::Object(o) => Value::Bytes(
            o.get("bytes")
                .and_then(serde_json::Value::as_array)
                .map(|bytes| {
                    bytes
                        .iter()
                        .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        _ => Value::NULL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_values_round_trip_through_the_checkpoint() {
        for value in [
            Value::Int(-5),
            Value::UInt(u64::MAX),
            Value::Bytes(b"abc".to_vec()),
            Value::Bytes(vec![0xff, 0]),
        ] {
            assert_eq!(key_param(&key_value(&value)), value);
        }
    }
}
