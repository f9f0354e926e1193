//! What a commit did, as its `commitInfo` says it: the `operation` and
//! `operationParameters` that `DESCRIBE HISTORY` (cdcflow's, Spark's, delta-rs') shows.
//! Names are Delta's own where one fits (`STREAMING UPDATE` for a micro-batch append,
//! `MERGE` for an AUTO CDC apply, `CREATE OR REPLACE TABLE AS SELECT` for a recomputed
//! materialized view), so tools that key on them understand the table; the
//! `cdcflow.*` parameters say which flow and batch.

use std::collections::HashMap;

use serde_json::Value;

/// The `operationParameters` keys cdcflow adds to each of its commits.
pub const FLOW_KEY: &str = "cdcflow.flow";
pub const BATCH_KEY: &str = "cdcflow.batch";
pub const KIND_KEY: &str = "cdcflow.operation";

/// What a commit does to its table.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Operation {
    /// A plain write of cdcflow's own bookkeeping (the event log, quarantined records):
    /// deltalake's `WRITE`.
    #[default]
    Write,
    /// A batch of an append flow into a streaming table.
    StreamingAppend { flow: String, batch: i64 },
    /// A batch of an AUTO CDC flow applied to its target (or to the target's state).
    AutoCdc {
        flow: String,
        batch: i64,
        scd_type: u8,
        keys: Vec<String>,
    },
    /// A materialized view recomputed from its inputs.
    Recompute { flow: String, batch: i64 },
    /// A full refresh emptied the table; its flows start over.
    FullRefresh { flows: Vec<String> },
    /// An AUTO CDC target derived again from its state, after a run stopped between the
    /// two commits of a batch.
    Rederive { flows: Vec<String> },
}

impl Operation {
    /// The commit's `operation`, `None` for deltalake's own name (`WRITE`).
    pub fn name(&self) -> Option<&'static str> {
        Some(match self {
            Self::Write | Self::Rederive { .. } => return None,
            Self::StreamingAppend { .. } => "STREAMING UPDATE",
            Self::AutoCdc { .. } => "MERGE",
            Self::Recompute { .. } => "CREATE OR REPLACE TABLE AS SELECT",
            Self::FullRefresh { .. } => "CREATE OR REPLACE TABLE",
        })
    }

    /// The commit's `operationParameters` (strings, as Delta keeps them).
    pub fn parameters(&self) -> HashMap<String, Value> {
        let mut p: Vec<(&str, String)> = Vec::new();
        match self {
            Self::Write => {}
            Self::StreamingAppend { flow, batch } => {
                // Spark's parameters of a streaming micro-batch.
                p.extend([
                    ("outputMode", "Append".to_string()),
                    ("queryId", flow.clone()),
                    ("epochId", batch.to_string()),
                    (KIND_KEY, "append".into()),
                    (FLOW_KEY, flow.clone()),
                    (BATCH_KEY, batch.to_string()),
                ]);
            }
            Self::AutoCdc {
                flow,
                batch,
                scd_type,
                keys,
            } => p.extend([
                (KIND_KEY, "auto cdc".into()),
                (FLOW_KEY, flow.clone()),
                (BATCH_KEY, batch.to_string()),
                ("cdcflow.scdType", scd_type.to_string()),
                ("cdcflow.keys", keys.join(", ")),
            ]),
            Self::Recompute { flow, batch } => p.extend([
                (KIND_KEY, "materialized view".into()),
                (FLOW_KEY, flow.clone()),
                (BATCH_KEY, batch.to_string()),
            ]),
            Self::FullRefresh { flows } => p.extend([
                (KIND_KEY, "full refresh".into()),
                ("cdcflow.flows", flows.join(", ")),
            ]),
            Self::Rederive { flows } => p.extend([
                (
                    KIND_KEY,
                    "AUTO CDC target derived again from its state".into(),
                ),
                ("cdcflow.flows", flows.join(", ")),
            ]),
        }
        p.into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_flow_commit_names_its_flow_and_batch() {
        let op = Operation::AutoCdc {
            flow: "f".into(),
            batch: 3,
            scd_type: 2,
            keys: vec!["id".into()],
        };
        assert_eq!(op.name(), Some("MERGE"));
        let p = op.parameters();
        assert_eq!(p[FLOW_KEY], "f");
        assert_eq!(p[BATCH_KEY], "3");
        assert_eq!(Operation::Write.name(), None);
        assert!(Operation::Write.parameters().is_empty());
    }
}
