//! What a slice of a batch's apply returns to the batch's one commit, as rows: one per
//! file it wrote (`add`, the file's add action as the log's JSON), one per file it
//! deletes rows of (`delete`, the positions as a portable Roaring bitmap), and one
//! `done` with its counts and the markers it decided (Arrow IPC). Rows, so that a
//! slice applied in another process comes back through any engine's exchange.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, RecordBatch, StringBuilder, UInt32Builder,
};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use deltalake::kernel::Action;
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::cdc::engine::merged::SliceChanges;
use crate::cdc::rules::ApplyMetrics;
use crate::cdc::slice::Slice;

const ADD: &str = "add";
const DELETE: &str = "delete";
const DONE: &str = "done";
const STATE: &str = "state";
const PUBLISHED: &str = "published";

/// The rows a slice returns.
pub fn changes_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("kind", DataType::Utf8, false),
        Field::new("table", DataType::Utf8, true),
        Field::new("slice", DataType::UInt32, false),
        Field::new("path", DataType::Utf8, true),
        Field::new("action", DataType::Utf8, true),
        Field::new("bytes", DataType::Binary, true),
    ]))
}

/// A slice's task: where it ran, what it did and how long it took (its `done` row; in
/// the flow's report, `run --format json` and the event log).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SliceSummary {
    pub slice: usize,
    /// The process that applied it, `host:pid`.
    pub worker: String,
    pub metrics: ApplyMetrics,
    /// Files of both tables its keys may be in, which it read (or pruned by their
    /// statistics): the key-bucketed layout keeps this to about 1/n of the tables'.
    pub files_read: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_change: Option<i64>,
    /// Its apply, from its events in hand to its files written.
    pub millis: u64,
}

impl SliceSummary {
    /// `slice 0 on host:pid: 1200 events in 35 ms`.
    pub fn line(&self) -> String {
        format!(
            "slice {} on {}: {} events, {} files read, in {} ms",
            self.slice, self.worker, self.metrics.events, self.files_read, self.millis
        )
    }
}

/// This process, as `host:pid`.
pub fn this_worker() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}:{}", std::process::id())
}

/// A slice's changes as rows of [`changes_schema`].
pub fn to_rows(
    slice: Slice,
    changes: SliceChanges,
    summary: &SliceSummary,
) -> Result<RecordBatch, RunError> {
    let mut rows = Rows::default();
    let index = u32::try_from(slice.index).map_err(|_| RunError::internal("too many slices"))?;
    for (table, c) in [(PUBLISHED, changes.public), (STATE, changes.state)] {
        for action in c.added {
            let json = serde_json::to_string(&action)
                .map_err(|e| RunError::internal(format!("an add action: {e}")))?;
            rows.push(ADD, Some(table), index, None, Some(&json), None);
        }
        for (path, positions) in c.deleted {
            let bitmap: RoaringTreemap = positions.into_iter().collect();
            let mut bytes = Vec::with_capacity(bitmap.serialized_size());
            bitmap
                .serialize_into(&mut bytes)
                .map_err(|e| RunError::internal(format!("a deletion bitmap: {e}")))?;
            rows.push(DELETE, Some(table), index, Some(&path), None, Some(&bytes));
        }
    }
    let json = serde_json::to_string(summary)
        .map_err(|e| RunError::internal(format!("a slice's counts: {e}")))?;
    let markers = ipc_bytes(&changes.markers)?;
    rows.push(DONE, None, index, None, Some(&json), markers.as_deref());
    rows.finish()
}

#[derive(Default)]
struct Rows {
    kind: StringBuilder,
    table: StringBuilder,
    slice: UInt32Builder,
    path: StringBuilder,
    action: StringBuilder,
    bytes: BinaryBuilder,
}

impl Rows {
    fn push(
        &mut self,
        kind: &str,
        table: Option<&str>,
        slice: u32,
        path: Option<&str>,
        action: Option<&str>,
        bytes: Option<&[u8]>,
    ) {
        self.kind.append_value(kind);
        self.table.append_option(table);
        self.slice.append_value(slice);
        self.path.append_option(path);
        self.action.append_option(action);
        self.bytes.append_option(bytes);
    }

    fn finish(mut self) -> Result<RecordBatch, RunError> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.kind.finish()),
            Arc::new(self.table.finish()),
            Arc::new(self.slice.finish()),
            Arc::new(self.path.finish()),
            Arc::new(self.action.finish()),
            Arc::new(self.bytes.finish()),
        ];
        Ok(RecordBatch::try_new(changes_schema(), columns)?)
    }
}

/// `batches` as one Arrow IPC stream; none when there are no rows.
fn ipc_bytes(batches: &[RecordBatch]) -> Result<Option<Vec<u8>>, RunError> {
    let Some(first) = batches.iter().find(|b| b.num_rows() > 0) else {
        return Ok(None);
    };
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &first.schema())?;
    for b in batches {
        writer.write(b)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(Some(out))
}

/// One table's changes from every slice: positions of one file from several slices are
/// united (a file of no slice's keys alone holds rows of several).
#[derive(Debug, Default)]
pub struct TableChanges {
    pub added: Vec<Action>,
    pub deleted: BTreeMap<String, RoaringTreemap>,
}

/// Every slice's changes, checked to be whole.
#[derive(Debug, Default)]
pub struct Gathered {
    pub public: TableChanges,
    pub state: TableChanges,
    pub markers: Vec<RecordBatch>,
    pub summaries: Vec<SliceSummary>,
}

/// The rows of `slices` slices gathered; fails unless each slice's `done` came exactly
/// once, so that a slice whose output was cut short commits nothing.
pub fn gather(batches: &[RecordBatch], slices: usize) -> Result<Gathered, RunError> {
    let mut out = Gathered::default();
    let mut done: BTreeMap<u32, SliceSummary> = BTreeMap::new();
    if batches.is_empty() {
        return Err(RunError::internal("no slice of the batch returned"));
    }
    let all = concat_batches(&changes_schema(), batches)?;
    let text = |c: usize| all.column(c).as_string::<i32>();
    let (kind, table, path, action) = (text(0), text(1), text(3), text(4));
    let slice = all.column(2).as_primitive::<UInt32Type>();
    let bytes = all.column(5).as_binary::<i32>();
    for r in 0..all.num_rows() {
        let changes = match table.is_null(r) {
            true => None,
            false if table.value(r) == STATE => Some(&mut out.state),
            false => Some(&mut out.public),
        };
        match (kind.value(r), changes) {
            (ADD, Some(changes)) => {
                let added: Action = serde_json::from_str(action.value(r))
                    .map_err(|e| RunError::internal(format!("a slice's add action: {e}")))?;
                changes.added.push(added);
            }
            (DELETE, Some(changes)) => {
                let positions = RoaringTreemap::deserialize_from(Cursor::new(bytes.value(r)))
                    .map_err(|e| RunError::internal(format!("a slice's deletions: {e}")))?;
                *changes
                    .deleted
                    .entry(path.value(r).to_string())
                    .or_default() |= positions;
            }
            (DONE, None) => {
                let summary: SliceSummary = serde_json::from_str(action.value(r))
                    .map_err(|e| RunError::internal(format!("a slice's counts: {e}")))?;
                if done.insert(slice.value(r), summary).is_some() {
                    return Err(RunError::internal(format!(
                        "slice {} of the batch returned twice",
                        slice.value(r)
                    )));
                }
                if !bytes.is_null(r) {
                    let reader = StreamReader::try_new(Cursor::new(bytes.value(r)), None)?;
                    for b in reader {
                        out.markers.push(b?);
                    }
                }
            }
            (other, _) => {
                return Err(RunError::internal(format!(
                    "a slice's row of unknown kind `{other}`"
                )));
            }
        }
    }
    let expected: Vec<u32> = (0..slices)
        .map(|s| u32::try_from(s).unwrap_or(u32::MAX))
        .collect();
    let returned: Vec<u32> = done.keys().copied().collect();
    if returned != expected {
        return Err(RunError::internal(format!(
            "the batch's {slices} slices did not all finish (finished: {returned:?}); nothing was committed"
        )));
    }
    out.summaries = done.into_values().collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdc::engine::merged::Changes;

    fn slice_rows(index: usize, count: usize, deleted: &[u64]) -> RecordBatch {
        let changes = SliceChanges {
            public: Changes {
                added: vec![],
                deleted: [("part-0.parquet".to_string(), deleted.to_vec())].into(),
            },
            state: Changes::default(),
            markers: vec![],
            metrics: ApplyMetrics::default(),
            files_read: 0,
        };
        to_rows(Slice { index, count }, changes, &SliceSummary::default()).unwrap()
    }

    #[test]
    fn the_deletions_of_one_file_from_several_slices_are_united() {
        let rows = [slice_rows(0, 2, &[1, 5]), slice_rows(1, 2, &[2, 5])];
        let gathered = gather(&rows, 2).unwrap();
        let positions: Vec<u64> = gathered.public.deleted["part-0.parquet"].iter().collect();
        assert_eq!(positions, vec![1, 2, 5]);
        assert_eq!(gathered.summaries.len(), 2);
    }

    #[test]
    fn a_batch_whose_slice_did_not_finish_or_finished_twice_is_refused() {
        let missing = gather(&[slice_rows(0, 3, &[1]), slice_rows(2, 3, &[2])], 3);
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("did not all finish")
        );
        let twice = gather(&[slice_rows(0, 1, &[1]), slice_rows(0, 1, &[1])], 1);
        assert!(twice.unwrap_err().to_string().contains("returned twice"));
    }
}
