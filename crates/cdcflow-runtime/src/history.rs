//! A table's history read from its Delta log: one entry per commit, newest first, with
//! what the commit did (its `operation`, flow and batch) and what it wrote. `cdcflow
//! query "DESCRIBE HISTORY t"` prints it; `TIMESTAMP AS OF` finds its version by the
//! same timestamps, so a time copied from the history reads that version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, MapBuilder, RecordBatch, StringArray, StringBuilder,
    TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use deltalake::kernel::Action;

use crate::RunError;
use crate::delta::Table;
use crate::delta::operation::{BATCH_KEY, FLOW_KEY};

/// One commit of a table.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    pub version: i64,
    /// Milliseconds since the epoch: the commit's own time, else its log file's.
    pub timestamp: Option<i64>,
    pub operation: Option<String>,
    pub parameters: BTreeMap<String, String>,
    /// The flow whose batch the commit carries, and the batch.
    pub flow: Option<String>,
    pub batch: Option<i64>,
    /// Rows in the data files the commit added (a file added again with a deletion
    /// vector is not counted: its rows were written before).
    pub rows_written: i64,
    pub files_added: i64,
    pub files_removed: i64,
    pub read_version: Option<i64>,
    pub engine_info: Option<String>,
}

/// The commits of `table`, newest first, at most `limit`; the walk stops at a commit
/// that log cleanup removed.
pub async fn entries(table: &Table, limit: Option<usize>) -> Result<Vec<Entry>, RunError> {
    let (Some(t), Some(newest)) = (&table.table, table.version()) else {
        return Ok(vec![]);
    };
    let mut out = Vec::new();
    for v in (0..=newest).rev() {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let Some(actions) = table.commit_actions(t, v).await? else {
            break;
        };
        out.push(entry(&table.dir, v, &actions));
    }
    Ok(out)
}

fn entry(dir: &Path, version: i64, actions: &[Action]) -> Entry {
    let mut e = Entry {
        version,
        ..Entry::default()
    };
    let removed: BTreeSet<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Remove(r) => Some(r.path.as_str()),
            _ => None,
        })
        .collect();
    let mut added = BTreeSet::new();
    for a in actions {
        match a {
            Action::CommitInfo(info) => {
                e.timestamp = info.timestamp;
                e.operation.clone_from(&info.operation);
                e.read_version = info.read_version.map(|v| v as i64);
                e.engine_info.clone_from(&info.engine_info);
                for (k, v) in info.operation_parameters.iter().flatten() {
                    let text = match v {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    e.parameters.insert(k.clone(), text);
                }
            }
            Action::Add(add) => {
                added.insert(add.path.as_str());
                if removed.contains(add.path.as_str()) {
                    continue;
                }
                e.files_added += 1;
                if let Some(stats) = add.get_stats().ok().flatten() {
                    e.rows_written += stats.num_records;
                }
            }
            // The batch a commit carries; a full refresh's reset (-1) carries none.
            Action::Txn(txn) if txn.version >= 0 && e.batch.is_none() => {
                e.flow = Some(
                    txn.app_id
                        .strip_prefix("cdcflow:")
                        .unwrap_or(&txn.app_id)
                        .to_string(),
                );
                e.batch = Some(txn.version);
            }
            _ => {}
        }
    }
    e.files_removed = removed.iter().filter(|p| !added.contains(*p)).count() as i64;
    // The flow as written in the pipeline, where the commit names it.
    if let Some(flow) = e.parameters.get(FLOW_KEY) {
        e.flow = Some(flow.clone());
    }
    if let Some(batch) = e.parameters.get(BATCH_KEY).and_then(|b| b.parse().ok()) {
        e.batch = Some(batch);
    }
    if e.timestamp.is_none() {
        e.timestamp = log_file_time(dir, version);
    }
    e
}

/// When the commit file of `version` was last written, ms since the epoch.
fn log_file_time(dir: &Path, version: i64) -> Option<i64> {
    let file = dir.join("_delta_log").join(format!("{version:020}.json"));
    let modified = std::fs::metadata(file).ok()?.modified().ok()?;
    let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}

/// The entries as the rows of `DESCRIBE HISTORY`: Databricks' column names where it
/// has the column, newest version first.
pub fn to_batch(entries: &[Entry]) -> Result<RecordBatch, RunError> {
    let mut parameters = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for e in entries {
        for (k, v) in &e.parameters {
            parameters.keys().append_value(k);
            parameters.values().append_value(v);
        }
        parameters.append(true)?;
    }
    let parameters = parameters.finish();
    let int = |f: fn(&Entry) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from_iter(entries.iter().map(f)))
    };
    let text = |f: fn(&Entry) -> Option<&str>| -> ArrayRef {
        Arc::new(StringArray::from_iter(entries.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        int(|e| Some(e.version)),
        Arc::new(
            TimestampMillisecondArray::from_iter(entries.iter().map(|e| e.timestamp))
                .with_timezone("UTC"),
        ),
        text(|e| e.operation.as_deref()),
        text(|e| e.flow.as_deref()),
        int(|e| e.batch),
        int(|e| Some(e.rows_written)),
        int(|e| Some(e.files_added)),
        int(|e| Some(e.files_removed)),
        Arc::new(parameters.clone()),
        int(|e| e.read_version),
        text(|e| e.engine_info.as_deref()),
    ];
    let i = |n: &str, null: bool| Field::new(n, DataType::Int64, null);
    let s = |n: &str| Field::new(n, DataType::Utf8, true);
    let schema = Schema::new(vec![
        i("version", false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        s("operation"),
        s("flow"),
        i("batch", true),
        i("rowsWritten", false),
        i("filesAdded", false),
        i("filesRemoved", false),
        Field::new("operationParameters", parameters.data_type().clone(), true),
        i("readVersion", true),
        s("engineInfo"),
    ]);
    Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
}
