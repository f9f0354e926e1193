//! What a read asks of the server before it reads: that its binary log holds whole rows
//! with their column names (so each change is complete and maps to columns by name),
//! where the log ends now, which log files it still keeps, and which server it is.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::connection::MysqlError;
use crate::position::BinlogPos;

/// The server a read talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: u64,
    pub mariadb: bool,
    /// Table names compare without case (`lower_case_table_names` 1 or 2).
    pub fold_names: bool,
}

fn error(what: &str, e: &mysql_async::Error) -> MysqlError {
    let mut error = MysqlError::new(
        format!("{what}: {e}"),
        "the connection's user needs the REPLICATION SLAVE and REPLICATION CLIENT privileges (BINLOG MONITOR on MariaDB 10.5+) besides SELECT",
    );
    error.unreachable = matches!(e, mysql_async::Error::Io(_));
    error
}

/// Checks the server logs rows as read_mysql needs them; an error naming each setting
/// that is not, and how to set it.
pub async fn check_ready(conn: &mut Conn) -> Result<Server, MysqlError> {
    type Settings = (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        u64,
        String,
        u64,
    );
    let settings: Option<Settings> = conn
        .query_first(
            "SELECT CAST(@@log_bin AS CHAR), @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@server_id, VERSION(), @@lower_case_table_names",
        )
        .await
        .map_err(|e| error("reading the server's binary log settings", &e))?;
    let Some((log_bin, format, image, metadata, id, version, case)) = settings else {
        return Err(MysqlError::new(
            "the server gave no settings",
            "report this",
        ));
    };
    let mut wrong = vec![];
    if !matches!(log_bin.as_deref(), Some("1" | "ON")) {
        wrong.push("log_bin is off (the server keeps no binary log): start it with log_bin (and server_id) in its configuration".to_string());
    }
    let want = [
        ("binlog_format", format, "ROW"),
        ("binlog_row_image", image, "FULL"),
        ("binlog_row_metadata", metadata, "FULL"),
    ];
    for (name, value, expected) in want {
        let value = value.unwrap_or_else(|| "unknown".into());
        if !value.eq_ignore_ascii_case(expected) {
            wrong.push(format!(
                "{name} is {value}, not {expected}: SET GLOBAL {name} = '{expected}' (and in the server's configuration)"
            ));
        }
    }
    // Settings one kind of server has: MariaDB's compressed events, which the driver
    // does not parse; MySQL's partial JSON updates, which carry no whole value.
    let compressed: Option<Option<String>> = conn
        .query_first("SELECT CAST(@@log_bin_compress AS CHAR)")
        .await
        .ok()
        .flatten();
    if matches!(compressed.flatten().as_deref(), Some("1" | "ON")) {
        wrong.push("log_bin_compress is on (compressed events cannot be read): SET GLOBAL log_bin_compress = OFF".to_string());
    }
    let partial: Option<Option<String>> = conn
        .query_first("SELECT @@binlog_row_value_options")
        .await
        .ok()
        .flatten();
    if partial
        .flatten()
        .is_some_and(|v| v.to_ascii_uppercase().contains("PARTIAL_JSON"))
    {
        wrong.push("binlog_row_value_options is PARTIAL_JSON (a JSON update logs no whole value): SET GLOBAL binlog_row_value_options = ''".to_string());
    }
    if !wrong.is_empty() {
        return Err(MysqlError::new(
            format!(
                "the server's binary log cannot be read as read_mysql needs: {}",
                wrong.join("; ")
            ),
            "read_mysql needs the row-based binary log with whole rows and column names (docs/sources.md, \"MySQL and MariaDB\")",
        ));
    }
    Ok(Server {
        id,
        mariadb: version.to_ascii_lowercase().contains("mariadb"),
        fold_names: case != 0,
    })
}

/// Where the binary log ends now.
pub async fn log_end(conn: &mut Conn) -> Result<BinlogPos, MysqlError> {
    // MySQL 8.4 renamed SHOW MASTER STATUS; MariaDB and older MySQL know only that.
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW MASTER STATUS").await {
        Ok(row) => row,
        Err(_) => conn
            .query_first("SHOW BINARY LOG STATUS")
            .await
            .map_err(|e| error("reading where the binary log ends", &e))?,
    };
    let Some(row) = row else {
        return Err(MysqlError::new(
            "the server reports no binary log (SHOW MASTER STATUS is empty)",
            "start the server with log_bin",
        ));
    };
    let file: Option<String> = row.get(0);
    let pos: Option<u64> = row.get(1);
    Ok(BinlogPos {
        file: file.unwrap_or_default(),
        pos: pos.unwrap_or_default(),
    })
}

/// The binary log files the server keeps, oldest first, with their sizes.
pub async fn log_files(conn: &mut Conn) -> Result<Vec<(String, u64)>, MysqlError> {
    let rows: Vec<mysql_async::Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| error("listing the binary log files", &e))?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let file: Option<String> = row.get(0);
            let size: Option<u64> = row.get(1);
            (file.unwrap_or_default(), size.unwrap_or_default())
        })
        .collect())
}

/// The bytes of the log after `from` up to its end (`files` as [`log_files`] gives
/// them); `None` when `from`'s file is gone.
pub fn bytes_after(files: &[(String, u64)], from: &BinlogPos) -> Option<u64> {
    let at = files.iter().position(|(name, _)| *name == from.file)?;
    let mut bytes = files[at].1.saturating_sub(from.pos);
    for (_, size) in &files[at + 1..] {
        bytes += size;
    }
    Some(bytes)
}

/// The server's clock, µs since the epoch.
pub async fn now_micros(conn: &mut Conn) -> Result<i64, MysqlError> {
    let now: Option<i64> = conn
        .query_first("SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)")
        .await
        .map_err(|e| error("reading the server's clock", &e))?;
    Ok(now.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_after_a_place_span_the_later_files() {
        let files = vec![
            ("b.000001".to_string(), 1000),
            ("b.000002".to_string(), 500),
        ];
        let at = |file: &str, pos| BinlogPos {
            file: file.into(),
            pos,
        };
        assert_eq!(bytes_after(&files, &at("b.000001", 400)), Some(1100));
        assert_eq!(bytes_after(&files, &at("b.000002", 500)), Some(0));
        assert_eq!(bytes_after(&files, &at("b.000000", 4)), None);
    }
}
