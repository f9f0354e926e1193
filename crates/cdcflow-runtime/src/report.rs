//! What a run did, per flow: the summary `cdcflow run` prints.

use serde::Serialize;

use crate::cdc::kernel::ApplyMetrics;

/// How a flow's part of the run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FlowOutcome {
    /// A batch was committed.
    Committed { batch: i64 },
    /// Nothing new to read.
    UpToDate { reason: String },
    /// Not run because an input failed.
    Skipped { reason: String },
    /// Failed; nothing of this batch was committed.
    Failed { error: String, help: Option<String> },
}

impl FlowOutcome {
    /// `committed`, `up_to_date`, `skipped` or `failed`: the `status` of its JSON form.
    pub fn status(&self) -> &'static str {
        match self {
            Self::Committed { .. } => "committed",
            Self::UpToDate { .. } => "up_to_date",
            Self::Skipped { .. } => "skipped",
            Self::Failed { .. } => "failed",
        }
    }

    /// The batch committed, if one was.
    pub fn batch(&self) -> Option<i64> {
        match self {
            Self::Committed { batch } => Some(*batch),
            _ => None,
        }
    }

    /// Why nothing was committed: the reason, or the error of a failed flow.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Committed { .. } => None,
            Self::UpToDate { reason } | Self::Skipped { reason } => Some(reason),
            Self::Failed { error, .. } => Some(error),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FlowReport {
    pub flow: String,
    pub target: String,
    /// `append`, `materialized view` or `auto cdc`.
    pub kind: &'static str,
    pub outcome: FlowOutcome,
    /// A failed flow's stable error code (`cdcflow::run::…`, `cdcflow::internal`).
    #[serde(rename = "code", skip_serializing_if = "Option::is_none")]
    pub error_code: Option<&'static str>,
    /// Source rows read by the batch.
    pub rows_read: u64,
    /// Rows appended (append flows) or in the result (materialized views).
    pub rows_written: u64,
    /// Landing files read.
    pub files: u64,
    /// Malformed landing records set apart in `<target>__quarantine`.
    pub quarantined: u64,
    /// Broker tombstones among the rows read: records without a value, which the
    /// Debezium recipe leaves out (docs/sources.md).
    #[serde(skip_serializing_if = "is_zero")]
    pub tombstones: u64,
    /// Per partition of the brokers' topics the flow reads, how far behind it is once
    /// the batch is committed (as `cdcflow status` shows it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partition_lag: Vec<crate::sources::PartitionLag>,
    /// AUTO CDC flows: what the apply did.
    pub cdc: Option<ApplyMetrics>,
    /// An AUTO CDC batch applied in slices (on workers): each slice's task.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<crate::cdc::exec::SliceSummary>,
    /// AUTO CDC FROM SNAPSHOT flows: each snapshot applied, with what it changed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<crate::cdc::snapshot::counts::AppliedSnapshot>,
    /// Flows that aggregate a watermarked stream: their state and watermark after the
    /// batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::stateful::StateMetrics>,
    /// The target's expectations over the rows of this batch.
    pub expectations: Vec<crate::expectations::ExpectationResult>,
    /// Things the user should know that did not fail the flow.
    pub warnings: Vec<String>,
    /// Columns this batch added to the target that the pipeline was not planned with
    /// (a source's columns grew while the run went on): the flows that read the target
    /// wait until the pipeline is planned again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unplanned_columns: Vec<String>,
    /// Landing files left for a later batch because they were still being written.
    #[serde(skip)]
    pub pending_files: u64,
    pub millis: u64,
    /// The oldest change of the batch: its source commit time (a timestamp SEQUENCE BY)
    /// or its landing file's arrival, µs since the epoch.
    #[serde(skip)]
    pub oldest_change_micros: Option<i64>,
    /// From the oldest change of the batch to its commit, milliseconds.
    pub lag_ms: Option<i64>,
    /// When the flow started and ended in this run, µs since the epoch.
    pub started_micros: i64,
    pub ended_micros: i64,
}

impl FlowReport {
    pub fn new(flow: &str, target: &str, kind: &'static str) -> Self {
        Self {
            flow: flow.to_string(),
            target: target.to_string(),
            kind,
            outcome: FlowOutcome::UpToDate {
                reason: "nothing new".into(),
            },
            error_code: None,
            rows_read: 0,
            rows_written: 0,
            files: 0,
            quarantined: 0,
            tombstones: 0,
            partition_lag: vec![],
            cdc: None,
            slices: vec![],
            snapshots: vec![],
            state: None,
            expectations: vec![],
            warnings: vec![],
            unplanned_columns: vec![],
            pending_files: 0,
            millis: 0,
            oldest_change_micros: None,
            lag_ms: None,
            started_micros: 0,
            ended_micros: 0,
        }
    }

    pub fn failed(&self) -> bool {
        matches!(self.outcome, FlowOutcome::Failed { .. })
    }

    /// The lag per partition in one line, as `cdcflow status` writes each partition:
    /// `orders-0: 0 behind; orders-1: 5 behind, 2.0 s`; `None` for a flow that reads
    /// no broker.
    pub fn partition_lag_line(&self) -> Option<String> {
        if self.partition_lag.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .partition_lag
            .iter()
            .map(|p| {
                let seconds = p
                    .behind_seconds
                    .map(|s| format!(", {s:.1} s"))
                    .unwrap_or_default();
                format!("{}: {} behind{seconds}", p.partition, p.behind_messages)
            })
            .collect();
        Some(parts.join("; "))
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    /// Identifies the run in the event log.
    pub run_id: String,
    pub flows: Vec<FlowReport>,
    /// What the run did besides its flows (tables a full refresh left alone, …).
    pub notes: Vec<String>,
    /// Internal state tables vacuumed after the batches committed.
    pub vacuumed: Vec<crate::vacuum::TableVacuum>,
    /// The tables compacted after the flows (each also a note).
    pub compactions: Vec<TableCompaction>,
}

impl RunReport {
    pub fn failed(&self) -> bool {
        self.flows.iter().any(FlowReport::failed)
    }

    /// Whether some table gained columns the pipeline was not planned with, so that
    /// flows reading it waited: the pipeline is to be loaded again (its sources asked
    /// for their columns) and run again before those flows read the new rows.
    pub fn needs_planning(&self) -> bool {
        self.flows.iter().any(|f| !f.unplanned_columns.is_empty())
    }
}

/// What a compaction did to one table.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TableCompaction {
    /// The dataset.
    pub table: String,
    /// Its AUTO CDC state rather than its published table.
    pub state: bool,
    /// Data files of the table before.
    pub files_before: usize,
    pub files_removed: usize,
    pub files_added: usize,
    /// Live rows rewritten.
    pub rows: u64,
    /// Bytes of the files removed, and of those added.
    pub bytes_removed: u64,
    pub bytes_added: u64,
    /// Why the table was not looked at.
    pub skipped: Option<String>,
}

impl TableCompaction {
    /// Whether a commit rewrote files.
    pub fn compacted(&self) -> bool {
        self.files_removed > 0
    }

    /// The table as people name it: `cur`, or `cur` (state).
    pub fn shown(&self) -> String {
        match self.state {
            true => format!("`{}` (state)", self.table),
            false => format!("`{}`", self.table),
        }
    }

    /// One line saying what was rewritten.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} files rewritten into {} ({} rows, {} → {} bytes)",
            self.shown(),
            self.files_removed,
            self.files_added,
            self.rows,
            self.bytes_removed,
            self.bytes_added
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::PartitionLag;

    #[test]
    fn the_lag_per_partition_reads_as_status_writes_it() {
        let mut f = FlowReport::new("bronze", "bronze", "append");
        assert_eq!(f.partition_lag_line(), None);
        f.partition_lag = vec![
            PartitionLag {
                partition: "orders-0".into(),
                behind_messages: 0,
                behind_seconds: None,
            },
            PartitionLag {
                partition: "orders-1".into(),
                behind_messages: 5,
                behind_seconds: Some(2.04),
            },
        ];
        assert_eq!(
            f.partition_lag_line().as_deref(),
            Some("orders-0: 0 behind; orders-1: 5 behind, 2.0 s")
        );
    }
}
