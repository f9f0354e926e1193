//! Places in the binary log, and a table's position as a flow's checkpoint keeps it
//! (JSON, under the input's key):
//!
//! ```json
//! {"file": "mysql-bin.000042", "pos": 1234,       // every transaction before it is read
//!  "copy": {"after": [41999], "copied": 42000},    // the copy goes on after this key
//!  "server_id": 1,                                 // the server the log is of
//!  "columns": [["id", "int(11)"], …],              // the columns the last read had
//!  "applied_until_micros": 1764600000000000}       // every change before this time is in
//! ```

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use cdcflow_runtime::RunError;
use serde_json::{Map, Value, json};

/// A place in the binary log: a file and a byte offset in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BinlogPos {
    pub file: String,
    pub pos: u64,
}

impl BinlogPos {
    /// The file's number: the digits after its last dot (`mysql-bin.000042` is 42).
    pub fn file_number(&self) -> Option<u64> {
        self.file.rsplit_once('.')?.1.parse().ok()
    }

    /// One number that orders every place of the server's log: the file's number times
    /// 2^32 plus the offset (a file holds less than 4 GiB: `max_binlog_size` is at most
    /// 1 GiB, and a transaction larger than that at most 4 GiB).
    pub fn order(&self) -> i64 {
        let number = self.file_number().unwrap_or(0);
        i64::try_from((number << 32) | (self.pos & 0xffff_ffff)).unwrap_or(i64::MAX)
    }
}

impl std::fmt::Display for BinlogPos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

impl PartialOrd for BinlogPos {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BinlogPos {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.file_number(), &self.file, self.pos).cmp(&(
            other.file_number(),
            &other.file,
            other.pos,
        ))
    }
}

/// A key value in the checkpoint: a number, a text, or bytes that are no UTF-8 text.
pub type KeyValue = Value;

/// How far a table's initial copy has come.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Copy {
    /// Nothing copied yet.
    #[default]
    Start,
    /// The rows whose primary key is above this one are still to be copied.
    After { key: Vec<KeyValue>, copied: u64 },
    /// Copied whole.
    Done,
}

/// What the checkpoint keeps of a table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Position {
    /// Where the stream goes on: every transaction that ends at or before it is read
    /// (or copied).
    pub at: BinlogPos,
    pub copy: Copy,
    pub server_id: Option<u64>,
    /// The columns (name, `COLUMN_TYPE`) the last read gave.
    pub columns: Vec<(String, String)>,
    /// The source time (µs since the epoch) before which every change of the table
    /// is in the committed batches.
    pub applied_until_micros: Option<i64>,
}

impl Position {
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("file".into(), self.at.file.clone().into());
        out.insert("pos".into(), self.at.pos.into());
        if let Copy::After { key, copied } = &self.copy {
            out.insert("copy".into(), json!({"after": key, "copied": copied}));
        }
        if let Some(id) = self.server_id {
            out.insert("server_id".into(), id.into());
        }
        out.insert(
            "columns".into(),
            Value::Array(
                self.columns
                    .iter()
                    .map(|(name, kind)| json!([name, kind]))
                    .collect(),
            ),
        );
        if let Some(micros) = self.applied_until_micros {
            out.insert("applied_until_micros".into(), micros.into());
        }
        Value::Object(out)
    }

    pub fn parse(value: &Value) -> Result<Position, RunError> {
        let bad = || {
            RunError::input(format!(
                "the checkpoint's read_mysql position is not one cdcflow wrote: {value}"
            ))
            .with_help("run the flow with --full-refresh to copy the table again")
        };
        let file = value.get("file").and_then(Value::as_str).ok_or_else(bad)?;
        let pos = value.get("pos").and_then(Value::as_u64).ok_or_else(bad)?;
        let copy = match value.get("copy") {
            None => Copy::Done,
            Some(c) => Copy::After {
                key: c
                    .get("after")
                    .and_then(Value::as_array)
                    .cloned()
                    .ok_or_else(bad)?,
                copied: c.get("copied").and_then(Value::as_u64).ok_or_else(bad)?,
            },
        };
        let columns = value
            .get("columns")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|pair| {
                        Some((
                            pair.get(0)?.as_str()?.to_string(),
                            pair.get(1)?.as_str()?.to_string(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Position {
            at: BinlogPos {
                file: file.to_string(),
                pos,
            },
            copy,
            server_id: value.get("server_id").and_then(Value::as_u64),
            columns,
            applied_until_micros: value.get("applied_until_micros").and_then(Value::as_i64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_across_files() {
        let p = |file: &str, pos| BinlogPos {
            file: file.into(),
            pos,
        };
        assert!(p("mysql-bin.000002", 4) > p("mysql-bin.000001", 900_000));
        assert!(p("mysql-bin.999999", 4) < p("mysql-bin.1000000", 4));
        assert!(p("mysql-bin.000002", 4).order() > p("mysql-bin.000001", 900_000).order());
        assert_eq!(p("mysql-bin.000001", 328).order(), (1 << 32) + 328);
    }

    #[test]
    fn a_position_round_trips() {
        let position = Position {
            at: BinlogPos {
                file: "mysql-bin.000003".into(),
                pos: 1234,
            },
            copy: Copy::After {
                key: vec![json!(41999), json!("b")],
                copied: 42000,
            },
            server_id: Some(1),
            columns: vec![("id".into(), "int(11)".into())],
            applied_until_micros: Some(5),
        };
        assert_eq!(
            Position::parse(&position.to_json()).expect("a position cdcflow wrote"),
            position
        );
        let done = Position {
            copy: Copy::Done,
            ..position
        };
        assert_eq!(
            Position::parse(&done.to_json()).expect("a position cdcflow wrote"),
            done
        );
    }
}
