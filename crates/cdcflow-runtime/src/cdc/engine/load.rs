//! The first batch of a large target (an initial load), read and applied a group of its
//! keys at a time.
//!
//! A first batch has no stored rows to stream through (`partitioned.rs` decides it a
//! partition of its keys at a time), but its events are the whole of it: read at once,
//! the source rows (whose buffers the events share) are what holds the memory, about
//! the size of the table being built. When the source's new rows would take more than
//! [`group_bytes`] once read, the keys are split into groups of about that size, and for
//! each group the source is read again, each batch cut down to the group's keys as it
//! is decoded, turned into events and decided, its rows written into the same files.
//! The rules are per key, so the tables are those of one load; the price is one read of
//! the source per group (docs/benchmarks.md has it). In the batch's plan the groups are
//! the partitions of its scan (`exec/groups.rs`), which the apply takes one after
//! another (`exec/apply.rs`), so the plan that runs is the planner's, as for any batch.
//!
//! A single integer key is split into key ranges, so that the files keep narrow key
//! ranges that later batches prune by; other keys by hash. Flows with APPLY AS TRUNCATE
//! are read whole: a TRUNCATE has no key, every group would have to see it.

use std::sync::Arc;

use cdcflow_plan::autocdc::AutoCdcSpec;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};

use super::keyset::hashes;
use crate::RunError;
use crate::delta::{DataFile, read};

/// Bytes of source rows (in memory, once read) a load holds at a time, unless
/// `CDCFLOW_LOAD_GROUP_BYTES` says otherwise.
const GROUP_BYTES: u64 = 384 << 20;

/// Source keys sampled to find the key ranges: one in this many.
const SAMPLE_STEP: usize = 64;

/// The bytes of source rows a load holds at a time.
fn group_bytes() -> u64 {
    std::env::var("CDCFLOW_LOAD_GROUP_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&b| b > 0)
        .unwrap_or(GROUP_BYTES)
}

/// A first batch to be read a group of keys at a time: the source files (each named for
/// messages), how many groups, and which group a row's key falls in. The batch's plan
/// reads it as one partition per group (`exec/groups.rs`), and the apply takes the
/// groups one after another (`exec/apply.rs`).
#[derive(Debug)]
pub struct GroupedLoad {
    pub(crate) files: Vec<(String, DataFile)>,
    pub(crate) groups: usize,
    /// Rows of the files, as their footers count them.
    pub rows: u64,
    /// The source's schema, as the files are read.
    pub(crate) source: SchemaRef,
    /// The positions of the flow's keys among the source's columns.
    pub(crate) keys: Vec<usize>,
    pub(crate) grouping: Grouping,
}

impl GroupedLoad {
    /// The grouped load of `files` (of `source` schema), the first batch of `spec`'s
    /// target; `None` when they fit in one group or the flow has a TRUNCATE.
    pub(crate) fn plan(
        spec: &AutoCdcSpec,
        files: &[(String, DataFile)],
        source: &SchemaRef,
    ) -> Result<Option<Self>, RunError> {
        Self::plan_in_groups_of(spec, files, source, group_bytes())
    }

    /// [`GroupedLoad::plan`] with groups of about `group_bytes` bytes of source rows.
    pub fn plan_in_groups_of(
        spec: &AutoCdcSpec,
        files: &[(String, DataFile)],
        source: &SchemaRef,
        group_bytes: u64,
    ) -> Result<Option<Self>, RunError> {
        if spec.truncate_when.is_some() || files.is_empty() {
            return Ok(None);
        }
        let data: Vec<DataFile> = files.iter().map(|(_, f)| f.clone()).collect();
        let (rows, bytes) = read::memory_size(&data, source)?;
        let groups = usize::try_from(bytes.div_ceil(group_bytes.max(1))).unwrap_or(usize::MAX);
        if groups <= 1 {
            return Ok(None);
        }
        let keys = source_keys(spec, source)?;
        let grouping = Grouping::of(&data, groups, source, &keys)?;
        tracing::info!(
            flow = %spec.flow,
            groups,
            rows,
            by = grouping.name(),
            "initial load read in key groups"
        );
        Ok(Some(Self {
            files: files.to_vec(),
            groups,
            rows,
            source: Arc::clone(source),
            keys,
            grouping,
        }))
    }

    /// The number of key groups.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// How the keys are grouped, for plans' display.
    pub fn grouping_name(&self) -> &'static str {
        self.grouping.name()
    }

    /// The source rows whose key is in `group`, each batch with the name of its file;
    /// what the group drops is never held at once.
    pub(crate) fn read_group(&self, group: usize) -> Result<Vec<(String, RecordBatch)>, RunError> {
        let mut rows = Vec::new();
        for (origin, file) in &self.files {
            let kept = read::read_files_where(std::slice::from_ref(file), &self.source, |b| {
                self.grouping.keep(&b, &self.keys, group)
            })?;
            rows.extend(kept.into_iter().map(|b| (origin.clone(), b)));
        }
        Ok(rows)
    }
}

/// The positions of the flow's keys among the source's columns.
fn source_keys(spec: &AutoCdcSpec, source: &Schema) -> Result<Vec<usize>, RunError> {
    spec.keys
        .iter()
        .map(|k| {
            source
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(k))
                .ok_or_else(|| {
                    RunError::input(format!(
                        "flow `{}`: key `{k}` is not a column of `{}`",
                        spec.flow, spec.source
                    ))
                })
        })
        .collect()
}

/// Which group a source row's key falls in.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Grouping {
    /// A single integer key: the group is the range between these bounds.
    Ranges(Vec<i64>),
    /// Any other key: the group is taken from the key's hash.
    Hash(u64),
}

impl Grouping {
    fn name(&self) -> &'static str {
        match self {
            Self::Ranges(_) => "key range",
            Self::Hash(_) => "key hash",
        }
    }

    /// The grouping of the keys of `files` into `count` groups.
    fn of(
        files: &[DataFile],
        count: usize,
        source: &SchemaRef,
        keys: &[usize],
    ) -> Result<Self, RunError> {
        let groups = count as u64;
        let [key] = keys else {
            return Ok(Self::Hash(groups));
        };
        if !source.field(*key).data_type().is_integer() {
            return Ok(Self::Hash(groups));
        }
        // Only the key column is decoded to sample it.
        let key_schema: SchemaRef = Arc::new(Schema::new(vec![source.field(*key).clone()]));
        let samples = read::read_files_where(files, &key_schema, |b| {
            let keys = integers(b.column(0))?;
            let sampled: Vec<i64> = keys.iter().step_by(SAMPLE_STEP).flatten().collect();
            let column = Arc::new(Int64Array::from(sampled));
            let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
            Ok(Some(RecordBatch::try_new(schema, vec![column])?))
        })?;
        let mut sample: Vec<i64> = samples
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        sample.sort_unstable();
        if sample.is_empty() {
            return Ok(Self::Hash(groups));
        }
        let mut bounds: Vec<i64> = (1..count)
            .map(|i| sample[i * sample.len() / count])
            .collect();
        bounds.dedup();
        Ok(Self::Ranges(bounds))
    }

    /// The rows of `batch` whose key is in `group`. A null key goes to the first group,
    /// whose events then report it.
    fn keep(
        &self,
        batch: &RecordBatch,
        keys: &[usize],
        group: usize,
    ) -> Result<Option<RecordBatch>, RunError> {
        let mask: BooleanArray = match self {
            Self::Ranges(bounds) => {
                let column = integers(batch.column(keys[0]))?;
                column
                    .iter()
                    .map(|k| {
                        let g = k.map_or(0, |k| bounds.partition_point(|&b| b <= k));
                        Some(g == group)
                    })
                    .collect()
            }
            Self::Hash(groups) => {
                let columns: Vec<_> = keys.iter().map(|&k| Arc::clone(batch.column(k))).collect();
                hashes(&columns)?
                    .into_iter()
                    .enumerate()
                    .map(|(row, h)| {
                        let null = columns.iter().any(|c| c.is_null(row));
                        // Bits the partitions (high) and the kernel's shares (low) do
                        // not use, so that each group still spreads over both.
                        let g = if null { 0 } else { (h >> 16) % groups };
                        Some(g == group as u64)
                    })
                    .collect()
            }
        };
        Ok(Some(filter_record_batch(batch, &mask)?))
    }
}

/// An integer column as 64-bit integers.
fn integers(column: &ArrayRef) -> Result<Int64Array, RunError> {
    Ok(cast(column, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}
