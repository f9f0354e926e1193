//! The event log: what each run did, one row per run start and end, per flow and per
//! table vacuumed, in the Delta table `<storage>/system/event_log`, queryable as
//! `event_log`.

use std::sync::Arc;

use cdcflow_plan::location::Location;
use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::RunError;
use crate::delta::{self, Commit, Mode};
use crate::report::{FlowOutcome, RunReport};

/// The name `cdcflow query` knows the event log by.
pub const TABLE: &str = "event_log";

pub fn dir(storage: &Location) -> Location {
    storage.join("system").join(TABLE)
}

fn schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let i = |n: &str| Field::new(n, DataType::Int64, true);
    let s = |n: &str, null: bool| Field::new(n, DataType::Utf8, null);
    Arc::new(Schema::new(vec![
        Field::new("timestamp", ts, false),
        s("pipeline", false),
        s("run_id", false),
        s("event", false),
        s("flow", true),
        s("target", true),
        i("batch"),
        i("rows_read"),
        i("rows_written"),
        i("files"),
        i("upserted"),
        i("deleted"),
        i("late"),
        i("late_applied"),
        i("late_dropped"),
        i("duplicates"),
        i("quarantined"),
        i("lag_ms"),
        i("duration_ms"),
        s("message", true),
        // Added after the first logs were written: a log without them gains them.
        i("tombstones"),
        // A stateful flow's state after the batch, under the names of `run --format
        // json` (Spark's numRowsTotal, numRowsUpdated, numRowsRemoved, memoryUsedBytes,
        // numRowsDroppedByWatermark, numDroppedDuplicateRows) and its watermark.
        i("state_rows"),
        i("state_rows_updated"),
        i("state_rows_removed"),
        i("state_memory_bytes"),
        i("state_disk_bytes"),
        i("rows_dropped_by_watermark"),
        i("duplicates_dropped"),
        Field::new(
            "watermark",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
    ]))
}

/// The state columns, `state_rows` to `duplicates_dropped`.
const STATE_COUNTS: usize = 7;

/// The count columns, `rows_read` to `lag_ms`.
const COUNTS: usize = 11;

/// One row of the log.
#[derive(Default)]
struct Row {
    timestamp: i64,
    event: &'static str,
    flow: Option<String>,
    target: Option<String>,
    batch: Option<i64>,
    counts: [Option<i64>; COUNTS],
    message: Option<String>,
    /// Broker tombstones read (flows that read a broker).
    tombstones: Option<i64>,
    /// A stateful flow's state counts and its watermark.
    state: Option<([i64; STATE_COUNTS], i64)>,
}

/// Appends the events of one run (started at `started`, ended at `ended`, µs).
pub async fn append(
    storage: &Location,
    pipeline: &str,
    report: &RunReport,
    started: i64,
    ended: i64,
) -> Result<(), RunError> {
    let mut rows = vec![Row {
        timestamp: started,
        event: "run_started",
        ..Row::default()
    }];
    for f in &report.flows {
        if !matches!(f.outcome, FlowOutcome::Skipped { .. }) {
            rows.push(Row {
                timestamp: f.started_micros,
                event: "flow_started",
                flow: Some(f.flow.clone()),
                target: Some(f.target.clone()),
                ..Row::default()
            });
        }
        let (event, batch, message) = match &f.outcome {
            FlowOutcome::Committed { batch } => ("flow_completed", Some(*batch), None),
            FlowOutcome::UpToDate { reason } => ("flow_up_to_date", None, Some(reason.clone())),
            FlowOutcome::Skipped { reason } => ("flow_skipped", None, Some(reason.clone())),
            // The code goes with the error, for queries of the log that group failures.
            FlowOutcome::Failed { error, .. } => match f.error_code {
                Some(code) => ("flow_failed", None, Some(format!("{error} [{code}]"))),
                None => ("flow_failed", None, Some(error.clone())),
            },
        };
        let mut notes: Vec<String> = message.into_iter().collect();
        notes.extend(f.warnings.iter().cloned());
        if !f.expectations.is_empty() {
            notes.push(format!(
                "expectations: {}",
                crate::expectations::summary(&f.expectations)
            ));
        }
        if let Some(lag) = f.partition_lag_line() {
            notes.push(format!("lag per partition: {lag}"));
        }
        if let Some(state) = &f.state {
            notes.push(format!("state: {}", state.summary()));
        }
        if !f.slices.is_empty() {
            let tasks: Vec<String> = f.slices.iter().map(|s| s.line()).collect();
            notes.push(format!("applied in slices: {}", tasks.join("; ")));
        }
        let cdc = f.cdc;
        rows.push(Row {
            timestamp: f.ended_micros.max(f.started_micros),
            event,
            flow: Some(f.flow.clone()),
            target: Some(f.target.clone()),
            batch,
            counts: [
                Some(f.rows_read as i64),
                Some(f.rows_written as i64),
                Some(f.files as i64),
                cdc.map(|m| m.upserted as i64),
                cdc.map(|m| m.deleted as i64),
                cdc.map(|m| m.late as i64),
                cdc.map(|m| m.late_applied as i64),
                cdc.map(|m| m.late_dropped as i64),
                cdc.map(|m| m.duplicates as i64),
                Some(f.quarantined as i64),
                f.lag_ms,
            ],
            message: (!notes.is_empty()).then(|| notes.join("; ")),
            tombstones: (!f.partition_lag.is_empty() || f.tombstones > 0)
                .then_some(f.tombstones as i64),
            state: f.state.as_ref().map(|m| {
                let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                (
                    [
                        n(m.rows_total),
                        n(m.rows_updated),
                        n(m.rows_removed),
                        n(m.memory_used_bytes),
                        n(m.state_bytes),
                        n(m.rows_dropped_by_watermark),
                        n(m.duplicates_dropped),
                    ],
                    m.watermark_micros,
                )
            }),
        });
    }
    // Internal state tables vacuumed after the batches: `files` holds the files removed.
    for v in &report.vacuumed {
        rows.push(Row {
            timestamp: ended,
            event: "table_vacuumed",
            target: Some(v.table.clone()),
            counts: {
                let mut counts = [None; COUNTS];
                counts[2] = Some(v.files_removed as i64);
                counts
            },
            message: Some(format!(
                "{}: freed {} bytes in {} file(s) (retention {} h)",
                if v.internal_state {
                    "internal state"
                } else {
                    "table"
                },
                v.bytes_freed,
                v.files_removed,
                v.retention_hours
            )),
            ..Row::default()
        });
    }
    rows.push(Row {
        timestamp: ended,
        event: if report.failed() {
            "run_failed"
        } else {
            "run_completed"
        },
        message: (!report.notes.is_empty()).then(|| report.notes.join("; ")),
        ..Row::default()
    });
    let n = rows.len();
    let mut columns: Vec<Arc<dyn datafusion::arrow::array::Array>> = vec![
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(rows.iter().map(|r| r.timestamp))
                .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from(vec![pipeline; n])),
        Arc::new(StringArray::from(vec![report.run_id.as_str(); n])),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.event))),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.flow.as_deref()),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.target.as_deref()),
        )),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.batch))),
    ];
    for i in 0..COUNTS {
        columns.push(Arc::new(Int64Array::from_iter(
            rows.iter().map(|r| r.counts[i]),
        )));
    }
    let duration = (ended - started) / 1000;
    columns.push(Arc::new(Int64Array::from_iter(rows.iter().map(|r| {
        matches!(r.event, "run_completed" | "run_failed").then_some(duration)
    }))));
    columns.push(Arc::new(StringArray::from_iter(
        rows.iter().map(|r| r.message.as_deref()),
    )));
    columns.push(Arc::new(Int64Array::from_iter(
        rows.iter().map(|r| r.tombstones),
    )));
    for i in 0..STATE_COUNTS {
        columns.push(Arc::new(Int64Array::from_iter(
            rows.iter().map(|r| r.state.map(|(counts, _)| counts[i])),
        )));
    }
    columns.push(Arc::new(
        TimestampMicrosecondArray::from_iter(rows.iter().map(|r| r.state.map(|(_, w)| w)))
            .with_timezone("UTC"),
    ));
    let batch = RecordBatch::try_new(schema(), columns)?;
    let commit = Commit {
        name: TABLE.into(),
        description: Some(format!("what the runs of pipeline `{pipeline}` did")),
        ..Commit::default()
    };
    delta::write(&dir(storage), &schema(), vec![batch], Mode::Append, &commit).await?;
    Ok(())
}
