//! `cdcflow status`: per flow the last run, rows in and out, lag, backlog and the last
//! error, from the event log and the checkpoints. Reads only; safe beside a run.

use std::collections::BTreeMap;

use cdcflow_plan::DatasetKind;
use cdcflow_plan::{Input, Pipeline};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMicrosecondType};
use serde::Serialize;

use crate::checkpoint::Checkpoint;
use crate::delta::Table;
use crate::landing::FileName;
use crate::sources::{SourceStatus, Sources};
use crate::storage::Storage;
use crate::{RunError, catalog, event_log, layout};

/// The status of external source `input`; a failure to ask is its warning.
async fn source_status(
    pipeline: &Pipeline,
    input: &Input,
    sources: &Sources,
    progress: &crate::checkpoint::Processed,
) -> SourceStatus {
    let source = match sources.open(pipeline, input) {
        Ok(s) => s,
        Err(e) => {
            return SourceStatus {
                warning: Some(e.with_help_inline()),
                ..SourceStatus::default()
            };
        }
    };
    let key = source.checkpoint_key();
    match source.status(progress.source_position(&key)).await {
        Ok(s) => s,
        Err(e) => SourceStatus {
            source: key,
            warning: Some(format!("cannot ask the source: {}", e.with_help_inline())),
            ..SourceStatus::default()
        },
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct FlowStatus {
    pub flow: String,
    pub target: String,
    /// When the flow last ran and how it ended (`flow_completed`, `flow_failed`, …).
    pub last_run: Option<String>,
    pub last_event: Option<String>,
    pub rows_read: Option<i64>,
    pub rows_written: Option<i64>,
    pub lag_ms: Option<i64>,
    /// AUTO CDC flows: the late events of the last batch applied into history (SCD2)
    /// and dropped (older than the state they met).
    pub late_applied: Option<i64>,
    pub late_dropped: Option<i64>,
    /// Landing files not read yet, and their bytes.
    pub backlog_files: u64,
    pub backlog_bytes: u64,
    /// The failure of the flow's last run, with its time; `None` once a later run of
    /// the flow succeeded.
    pub last_error: Option<String>,
    /// Why the flow's table cannot be read now (a damaged Delta log), when it cannot.
    pub unreadable: Option<String>,
    /// Sources outside the storage that the flow reads (`read_postgres`, `read_kafka`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceStatus>,
    /// A flow that aggregates a watermarked stream: its watermark and state after its
    /// last committed batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::stateful::StoredState>,
}

pub async fn status(pipeline: &Pipeline) -> Result<Vec<FlowStatus>, RunError> {
    status_with_sources(pipeline, None).await
}

/// As [`status`], asking the sources outside the storage how far behind each flow is.
/// A source that cannot be asked (its server down) is a warning in its status.
pub async fn status_with_sources(
    pipeline: &Pipeline,
    sources: Option<&Sources>,
) -> Result<Vec<FlowStatus>, RunError> {
    let storage = pipeline.storage();
    let records = Storage::at(&storage)?;
    // In the pipeline's order; looked up by name.
    let mut out: Vec<FlowStatus> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for &i in &pipeline.order {
        let flow = &pipeline.flows[i];
        let Some(target) = pipeline.dataset(&flow.target) else {
            continue;
        };
        if target.kind == DatasetKind::View {
            continue;
        }
        let mut s = FlowStatus {
            flow: flow.name.clone(),
            target: flow.target.clone(),
            ..FlowStatus::default()
        };
        let table = match Table::open(&layout::table_dir(&storage, target)?).await {
            Ok(table) => table,
            Err(e) => {
                s.unreadable = Some(e.with_help_inline());
                index.insert(flow.name.to_lowercase(), out.len());
                out.push(s);
                continue;
            }
        };
        let checkpoint = Checkpoint::in_storage(&records, &flow.name)?;
        let progress = checkpoint.peek(&table, &layout::app_id(&flow.name)).await?;
        if !flow.watermarks.is_empty() {
            s.state = crate::stateful::stored_state(&checkpoint, &flow.name, &progress).await;
        }
        for input in &flow.inputs {
            if let (Some(sources), true) = (sources, input.reads_a_server()) {
                s.sources
                    .push(source_status(pipeline, input, sources, &progress).await);
                continue;
            }
            let Input::Files(rf) = input else { continue };
            if !rf.streaming {
                continue;
            }
            let seen = progress.files.get(&rf.table);
            for path in rf.list_files().map_err(|e| RunError::io(&rf.path, e))? {
                if seen.is_some_and(|s| s.contains_key(&FileName::of(rf, &path))) {
                    continue;
                }
                s.backlog_files += 1;
                s.backlog_bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            }
        }
        index.insert(flow.name.to_lowercase(), out.len());
        out.push(s);
    }
    // A damaged event log leaves the per-flow backlog above (the log is left out of the
    // catalog with a warning).
    if Table::open(&event_log::dir(&storage))
        .await
        .is_ok_and(|t| t.exists())
    {
        let ctx = catalog::session(pipeline).await?;
        // A log written before the late counts were split has no such columns.
        let log_columns = ctx.table(event_log::TABLE).await?.schema().clone();
        let late = |c: &str| match log_columns.has_column_with_unqualified_name(c) {
            true => c.to_string(),
            false => format!("CAST(NULL AS BIGINT) AS {c}"),
        };
        let batches = ctx
            .sql(&format!("SELECT flow, event, timestamp, rows_read, rows_written, lag_ms, message, {}, {} FROM event_log WHERE flow IS NOT NULL ORDER BY timestamp", late("late_applied"), late("late_dropped")))
            .await?
            .collect()
            .await?;
        for b in &batches {
            // The Delta reader may give strings as views: read everything in the plain
            // types, so a layout change cannot break status.
            let text = |c: usize| cast(b.column(c), &DataType::Utf8);
            let (flow, event, message) = (text(0)?, text(1)?, text(6)?);
            let (flow, event, message) = (
                flow.as_string::<i32>(),
                event.as_string::<i32>(),
                message.as_string::<i32>(),
            );
            let ts = cast(
                b.column(2),
                &DataType::Timestamp(TimeUnit::Microsecond, None),
            )?;
            let ts = ts.as_primitive::<TimestampMicrosecondType>();
            let numbers: Vec<_> = (0..b.num_columns())
                .map(|c| match c {
                    3..=5 | 7.. => cast(b.column(c), &DataType::Int64).map(Some),
                    _ => Ok(None),
                })
                .collect::<Result<_, _>>()?;
            let num = |c: usize, r: usize| {
                let a = numbers[c].as_ref()?.as_primitive::<Int64Type>();
                (!a.is_null(r)).then(|| a.value(r))
            };
            for r in 0..b.num_rows() {
                let Some(&i) = index.get(&flow.value(r).to_lowercase()) else {
                    continue;
                };
                let s = &mut out[i];
                let when = chrono::DateTime::from_timestamp_micros(ts.value(r))
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string());
                s.last_run = when.clone();
                s.last_event = Some(event.value(r).to_string());
                match event.value(r) {
                    "flow_completed" => {
                        s.rows_read = num(3, r);
                        s.rows_written = num(4, r);
                        s.lag_ms = num(5, r);
                        s.late_applied = num(7, r);
                        s.late_dropped = num(8, r);
                        s.last_error = None;
                    }
                    // Nothing new is a success too: an earlier failure is over.
                    "flow_up_to_date" => s.last_error = None,
                    "flow_failed" => {
                        // The failed batch read its rows and committed none: no
                        // numbers of the batch before it.
                        s.rows_read = num(3, r);
                        s.rows_written = Some(0);
                        s.lag_ms = None;
                        s.late_applied = None;
                        s.late_dropped = None;
                        s.last_error = (!message.is_null(r)).then(|| {
                            format!("{} ({})", message.value(r), when.unwrap_or_default())
                        });
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(out)
}
