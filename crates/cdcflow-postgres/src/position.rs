//! A table's position as a flow's checkpoint keeps it (JSON, under the input's key):
//!
//! ```json
//! {"lsn": "16/B374D848",                       // every transaction before it is read
//!  "within": {"commit_lsn": "16/B3750000", "seq": 100000},   // one read in part
//!  "copy": {"after": ["41999"], "copied": 42000},             // the copy goes on
//!  // or, for a table without a primary key, after a tuple id:
//!  // "copy": {"after_tid": "(812,40)", "pages": 9000, "filenode": 16384, "copied": 42000},
//!  "identity": {"relid": 16384, "publication": 16390, "member": 16391},  // OIDs read from
//!  "slot": "cdcflow_crm_src_0123456789ab",    // the slot it was read through
//!  "applied_until_micros": 1764600000000000}  // every change before this time is in
//! ```
//!
//! Only `lsn` is always there; positions written before the others existed read as a
//! finished copy and no transaction in part.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use cdcflow_runtime::RunError;
use pgwire_replication::Lsn;
use serde_json::{Map, Value, json};

use crate::identity::Identity;
use crate::snapshot::CopyProgress;
use crate::source::{ReadFrom, lsn_text};
use crate::tid_copy::TupleResume;

/// What the checkpoint keeps of a table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Position {
    pub from: ReadFrom,
    /// The source time (µs since the epoch) before which every change of the table is
    /// in the committed batches (`cdcflow status` reports the lag from it).
    pub applied_until_micros: Option<i64>,
    /// The replication slot (and publication) the position was read through; `None`
    /// in positions written before it was kept (the slot of the older name).
    pub slot: Option<String>,
}

impl Position {
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("lsn".into(), json!(lsn_text(self.from.lsn.unwrap_or(0))));
        if let Some((commit, seq)) = self.from.within {
            out.insert(
                "within".into(),
                json!({ "commit_lsn": lsn_text(commit), "seq": seq }),
            );
        }
        match &self.from.copy {
            CopyProgress::After { key, copied } => {
                out.insert("copy".into(), json!({ "after": key, "copied": copied }));
            }
            CopyProgress::AfterTuple(r) => {
                out.insert(
                    "copy".into(),
                    json!({ "after_tid": r.after.to_string(), "pages": r.pages,
                            "filenode": r.filenode, "copied": r.copied }),
                );
            }
            CopyProgress::Start | CopyProgress::Done => {}
        }
        if let Some(i) = &self.from.identity {
            out.insert(
                "identity".into(),
                json!({ "relid": i.relid, "publication": i.publication, "member": i.member }),
            );
        }
        if let Some(slot) = &self.slot {
            out.insert("slot".into(), json!(slot));
        }
        if let Some(at) = self.applied_until_micros {
            out.insert("applied_until_micros".into(), json!(at));
        }
        Value::Object(out)
    }
}

fn bad(value: &Value) -> RunError {
    RunError::input(format!(
        "the checkpoint's PostgreSQL position `{value}` cannot be read"
    ))
    .with_help("run `cdcflow run --full-refresh <table>` to take a new snapshot")
}

fn lsn(value: Option<&Value>) -> Option<u64> {
    value
        .and_then(Value::as_str)
        .and_then(|t| Lsn::parse(t).ok())
        .map(Lsn::as_u64)
}

/// The LSN of a position.
pub fn lsn_of(value: &Value) -> Result<u64, RunError> {
    lsn(value.get("lsn")).ok_or_else(|| bad(value))
}

/// A position the checkpoint kept.
pub fn parse(value: &Value) -> Result<Position, RunError> {
    let within = match value.get("within") {
        None => None,
        Some(w) => Some((
            lsn(w.get("commit_lsn")).ok_or_else(|| bad(value))?,
            w.get("seq")
                .and_then(Value::as_i64)
                .ok_or_else(|| bad(value))?,
        )),
    };
    let number = |c: &Value, name: &str| {
        c.get(name)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad(value))
    };
    let copy = match value.get("copy") {
        None => CopyProgress::Done,
        Some(c) if c.get("after_tid").is_some() => CopyProgress::AfterTuple(TupleResume {
            after: c
                .get("after_tid")
                .and_then(Value::as_str)
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| bad(value))?,
            pages: number(c, "pages")?,
            filenode: number(c, "filenode")?,
            copied: c.get("copied").and_then(Value::as_u64).unwrap_or(0),
        }),
        Some(c) => CopyProgress::After {
            key: c
                .get("after")
                .and_then(Value::as_array)
                .ok_or_else(|| bad(value))?
                .iter()
                .map(|k| k.as_str().map(String::from).ok_or_else(|| bad(value)))
                .collect::<Result<_, _>>()?,
            copied: c.get("copied").and_then(Value::as_u64).unwrap_or(0),
        },
    };
    let identity = match value.get("identity") {
        None => None,
        Some(i) => Some(Identity {
            relid: number(i, "relid")?,
            publication: number(i, "publication")?,
            member: number(i, "member")?,
        }),
    };
    Ok(Position {
        from: ReadFrom {
            lsn: Some(lsn_of(value)?),
            within,
            copy,
            identity,
        },
        applied_until_micros: value.get("applied_until_micros").and_then(Value::as_i64),
        slot: value.get("slot").and_then(Value::as_str).map(String::from),
    })
}

/// A read with no rows still commits its position when the table's position fell this
/// far behind the WAL, or its time this far behind the clock: the shared slot is
/// acknowledged only up to the lowest table's position, so an idle table must not hold
/// the WAL of the others, and `cdcflow status` must not see a quiet table as lagging.
pub const IDLE_COMMIT_BYTES: u64 = 64 << 20;
pub const IDLE_COMMIT_MICROS: i64 = 300 * 1_000_000;

/// Whether a read from `committed` that found no rows and reached `position` at
/// `read_at` moves the position far enough to commit it.
pub fn idle_commit(committed: &Position, position: u64, read_at: i64) -> bool {
    let Some(from) = committed.from.lsn else {
        return false;
    };
    position > from
        && (position - from >= IDLE_COMMIT_BYTES
            || committed
                .applied_until_micros
                .is_none_or(|at| read_at - at >= IDLE_COMMIT_MICROS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lsn: u64, micros: Option<i64>) -> Position {
        Position {
            from: ReadFrom {
                lsn: Some(lsn),
                within: None,
                copy: CopyProgress::Done,
                identity: None,
            },
            applied_until_micros: micros,
            slot: None,
        }
    }

    #[test]
    fn positions_round_trip() {
        let v = at(0x16_B374_D848, None).to_json();
        assert_eq!(v, json!({"lsn": "16/B374D848"}));
        assert_eq!(lsn_of(&v).unwrap(), 0x16_B374_D848);
        assert_eq!(parse(&v).unwrap(), at(0x16_B374_D848, None));
        assert!(lsn_of(&json!({"lsn": 3})).is_err());
        let full = Position {
            from: ReadFrom {
                lsn: Some(0x10),
                within: Some((0x20, 7)),
                copy: CopyProgress::After {
                    key: vec!["41".into(), "x".into()],
                    copied: 42,
                },
                identity: Some(Identity {
                    relid: 1,
                    publication: 2,
                    member: 3,
                }),
            },
            applied_until_micros: Some(9),
            slot: Some("cdcflow_p_src_0123456789ab".into()),
        };
        let v = full.to_json();
        assert_eq!(
            v,
            json!({"lsn": "0/10", "within": {"commit_lsn": "0/20", "seq": 7},
                   "copy": {"after": ["41", "x"], "copied": 42},
                   "identity": {"relid": 1, "publication": 2, "member": 3}, "applied_until_micros": 9,
                   "slot": "cdcflow_p_src_0123456789ab"})
        );
        assert_eq!(parse(&v).unwrap(), full);
        assert!(parse(&json!({"lsn": "0/10", "copy": {"after": [1]}})).is_err());
        let tuples = Position {
            from: ReadFrom {
                lsn: Some(0x10),
                within: None,
                copy: CopyProgress::AfterTuple(TupleResume {
                    after: "(812,40)".parse().unwrap(),
                    pages: 9000,
                    filenode: 16384,
                    copied: 42,
                }),
                identity: None,
            },
            applied_until_micros: None,
            slot: None,
        };
        let v = tuples.to_json();
        assert_eq!(
            v,
            json!({"lsn": "0/10", "copy": {"after_tid": "(812,40)", "pages": 9000, "filenode": 16384, "copied": 42}})
        );
        assert_eq!(parse(&v).unwrap(), tuples);
        assert!(
            parse(&json!({"lsn": "0/10", "copy": {"after_tid": "812", "pages": 1, "filenode": 1}}))
                .is_err()
        );
        assert!(
            parse(&json!({"lsn": "0/10", "copy": {"after_tid": "(1,1)", "filenode": 1}})).is_err()
        );
    }

    #[test]
    fn an_idle_table_commits_its_position_once_it_falls_far_behind() {
        let minute = 60 * 1_000_000;
        // No move: nothing to commit.
        assert!(!idle_commit(&at(100, Some(0)), 100, 60 * minute));
        // A little WAL, a little time: not worth a commit.
        assert!(!idle_commit(&at(100, Some(0)), 1000, minute));
        // Far in WAL, or in time (or a position of an older version, without time).
        assert!(idle_commit(
            &at(100, Some(0)),
            100 + IDLE_COMMIT_BYTES,
            minute
        ));
        assert!(idle_commit(&at(100, Some(0)), 1000, 6 * minute));
        assert!(idle_commit(&at(100, None), 1000, 0));
        assert!(!idle_commit(&Position::default(), 1000, 0));
    }
}
