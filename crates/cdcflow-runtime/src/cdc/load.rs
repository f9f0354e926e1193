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
//! the source per group (docs/benchmarks.md has it).
//!
//! A single integer key is split into key ranges, so that the files keep narrow key
//! ranges that later batches prune by; other keys by hash. Flows with APPLY AS TRUNCATE
//! are read whole: a TRUNCATE has no key, every group would have to see it.

use std::sync::Arc;

use cdcflow_plan::autocdc::AutoCdcSpec;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};

use super::events::event_parts;
use super::kernel::Rules;
use super::keyset::hashes;
use super::partitioned::{Load, PARTITION_ROWS};
use super::streamed::{Streamed, Targets};
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
/// messages) and how many groups.
pub(super) struct GroupedLoad {
    files: Vec<(String, DataFile)>,
    groups: usize,
    /// Rows of the files, as their footers count them.
    pub rows: u64,
}

impl GroupedLoad {
    /// The source files, each named for messages.
    pub(super) fn files(&self) -> &[(String, DataFile)] {
        &self.files
    }

    /// The grouped load of `files`, the first batch of `spec`'s target; `None` when
    /// they fit in one group or the flow has a TRUNCATE.
    pub(super) fn plan(
        spec: &AutoCdcSpec,
        files: &[(String, DataFile)],
        source: &SchemaRef,
    ) -> Result<Option<Self>, RunError> {
        if spec.truncate_when.is_some() || files.is_empty() {
            return Ok(None);
        }
        let data: Vec<DataFile> = files.iter().map(|(_, f)| f.clone()).collect();
        let (rows, bytes) = read::memory_size(&data, source)?;
        let groups = usize::try_from(bytes.div_ceil(group_bytes())).unwrap_or(usize::MAX);
        if groups <= 1 {
            return Ok(None);
        }
        Ok(Some(Self {
            files: files.to_vec(),
            groups,
            rows,
        }))
    }

    /// Applies the load into `targets` a group at a time and stages both tables' files;
    /// `None` when the tables need deltalake's write operation (nothing is written: the
    /// caller reads the source whole instead). Sets `oldest_change` to the oldest
    /// commit time of the events, where the sequence is one.
    pub(super) async fn apply(
        &self,
        spec: &AutoCdcSpec,
        rules: &Rules,
        source: &SchemaRef,
        targets: &Targets<'_>,
        now_micros: i64,
        oldest_change: &mut Option<i64>,
    ) -> Result<Option<Streamed>, RunError> {
        let rows = usize::try_from(self.rows).unwrap_or(usize::MAX);
        let Some(mut load) = Load::new(rules, targets, rows).await? else {
            return Ok(None);
        };
        let keys = source_keys(spec, source)?;
        let grouping = Grouping::of(self, source, &keys)?;
        tracing::info!(
            flow = %spec.flow,
            groups = self.groups,
            rows = self.rows,
            by = grouping.name(),
            "initial load read in key groups"
        );
        for group in 0..self.groups {
            let mut rows = Vec::new();
            for (origin, file) in &self.files {
                let kept = read::read_files_where(std::slice::from_ref(file), source, |b| {
                    grouping.keep(&b, &keys, group)
                })?;
                rows.extend(kept.into_iter().map(|b| (origin.clone(), b)));
            }
            let events = event_parts(spec, rules, source, rows, now_micros).await?;
            let oldest = super::exec::oldest_commit_time(&events);
            if let Some(o) = oldest {
                *oldest_change = Some(oldest_change.map_or(o, |c| c.min(o)));
            }
            load.add(&events, now_micros, PARTITION_ROWS).await?;
        }
        Ok(Some(load.finish().await?))
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
enum Grouping {
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

    fn of(load: &GroupedLoad, source: &SchemaRef, keys: &[usize]) -> Result<Self, RunError> {
        let groups = load.groups as u64;
        let [key] = keys else {
            return Ok(Self::Hash(groups));
        };
        if !source.field(*key).data_type().is_integer() {
            return Ok(Self::Hash(groups));
        }
        // Only the key column is decoded to sample it.
        let key_schema: SchemaRef = Arc::new(Schema::new(vec![source.field(*key).clone()]));
        let data: Vec<DataFile> = load.files.iter().map(|(_, f)| f.clone()).collect();
        let samples = read::read_files_where(&data, &key_schema, |b| {
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
        let mut bounds: Vec<i64> = (1..load.groups)
            .map(|i| sample[i * sample.len() / load.groups])
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
