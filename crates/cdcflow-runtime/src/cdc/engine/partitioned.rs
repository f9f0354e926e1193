//! The first batch of a target (an initial load) applied a share of its keys at a time,
//! each share's rows encoded into the tables' files as soon as it is decided.
//!
//! A target without tables has no stored rows to stream through (`streamed.rs`), and
//! applied in one piece its kernel would hold every event's keys, sequence values and
//! decisions, and then the whole new state and published table, at once. But the rules
//! are per key: the events are split by key hash into partitions of about
//! [`PARTITION_ROWS`] rows, and each is decided by the kernel on its own, its output
//! handed to one file writer per core and table ([`Sink`]) and let go before the next.
//! What is held beyond the events is one partition's worth, whatever the batch's size.
//!
//! A TRUNCATE has no key: every partition sees it (as every share does in `shares.rs`),
//! and of the markers the partitions write back, the newest of each kind is kept. The
//! state rows and published rows are those of one in-memory apply; only their order in
//! the files differs.

use std::sync::Arc;

use crate::cdc::apply_error::ApplyError;
use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use datafusion::arrow::compute::{cast, interleave_record_batch};
use datafusion::arrow::datatypes::{DataType, Int8Type, Int64Type, SchemaRef};

use super::keyset::hashes;
use super::keyset::key_columns;
use super::shares::{newest_markers, without_markers};
use super::streamed::{Streamed, Targets};
use crate::RunError;
use crate::cdc::kernel::is_keyed;
use crate::cdc::kernel::{ApplyMetrics, Rules, Visible};
use crate::delta::{Mode, Sink};

/// Events per partition: a partition's kernel holds several times its rows, and the
/// shares it is decided in on every core need some tens of thousands to pay.
pub const PARTITION_ROWS: usize = 128 * 1024;

/// Rows hashed at a time while the events are split.
const HASH_ROWS: usize = 64 * 1024;

/// Applies `events` to a target whose state and published table do not exist yet,
/// [`PARTITION_ROWS`] events at a time, staging both tables' files; `None` when the
/// target has tables, or tables only deltalake's write operation writes (known before
/// anything is written).
pub async fn apply(
    rules: &Rules,
    targets: &Targets<'_>,
    events: &[RecordBatch],
    now_micros: i64,
) -> Result<Option<Streamed>, RunError> {
    apply_in_partitions(rules, targets, events, now_micros, PARTITION_ROWS).await
}

/// [`apply`] with partitions of at most about `partition_rows` events (tests force many
/// small partitions).
#[doc(hidden)]
pub async fn apply_in_partitions(
    rules: &Rules,
    targets: &Targets<'_>,
    events: &[RecordBatch],
    now_micros: i64,
    partition_rows: usize,
) -> Result<Option<Streamed>, RunError> {
    let rows: usize = events.iter().map(RecordBatch::num_rows).sum();
    let Some(mut load) = Load::new(rules, targets, rows).await? else {
        return Ok(None);
    };
    load.add(events, now_micros, partition_rows).await?;
    Ok(Some(load.finish().await?))
}

/// A first batch being written: events are added in groups that share no key (each
/// group's partitions decided and written as they come), and both tables' files are
/// staged at the end.
pub struct Load<'r> {
    rules: &'r Rules,
    public: Sink,
    state: Sink,
    metrics: ApplyMetrics,
    /// TRUNCATE markers the partitions wrote back: the newest of each kind is kept.
    markers: Vec<RecordBatch>,
    public_rows: usize,
    events: u64,
}

impl<'r> Load<'r> {
    /// A first batch of about `rows` events into `targets`; `None` when the target has
    /// tables, or tables only deltalake's write operation writes (known before anything
    /// is written).
    pub async fn new(
        rules: &'r Rules,
        targets: &Targets<'_>,
        rows: usize,
    ) -> Result<Option<Self>, RunError> {
        if targets.state.exists() || targets.public.exists() {
            return Ok(None);
        }
        let (public_schema, state_schema) = (rules.public_schema(), rules.state_schema());
        let Some(public) =
            Sink::new(targets.public, &public_schema, targets.public_commit, rows).await?
        else {
            return Ok(None);
        };
        let Some(state) =
            Sink::new(targets.state, &state_schema, targets.state_commit, rows).await?
        else {
            return Ok(None);
        };
        Ok(Some(Self {
            rules,
            public,
            state,
            metrics: ApplyMetrics::default(),
            markers: Vec::new(),
            public_rows: 0,
            events: 0,
        }))
    }

    /// Decides `events` (which share no key with the events added before, unless they
    /// are TRUNCATEs, which every group must see) in partitions of about
    /// `partition_rows`, and writes their rows.
    pub async fn add(
        &mut self,
        events: &[RecordBatch],
        now_micros: i64,
        partition_rows: usize,
    ) -> Result<(), RunError> {
        let rules = self.rules;
        let rows: usize = events.iter().map(RecordBatch::num_rows).sum();
        let event_schema = rules.event_schema();
        let starts = part_starts(events);
        for part in partitions(rules, events, rows.div_ceil(partition_rows.max(1)))? {
            let part = gather(&event_schema, events, &starts, &part)?;
            let applied = super::apply(rules, vec![], Visible::Rows(vec![]), &part, now_micros)?;
            drop(part);
            self.metrics.add(&applied.metrics);
            self.public_rows += applied.public_rows();
            let mut keyed = Vec::with_capacity(applied.state.len());
            for batch in &applied.state {
                let (k, m) = without_markers(batch)?;
                keyed.extend(k);
                self.markers.extend(m);
            }
            drop(applied.state);
            tokio::try_join!(self.public.write(applied.public), self.state.write(keyed))?;
        }
        self.events += rows as u64;
        Ok(())
    }

    /// Writes the newest TRUNCATE markers and stages both tables' files.
    pub async fn finish(mut self) -> Result<Streamed, RunError> {
        let markers = newest_markers(&self.rules.state_schema(), &self.markers)?;
        self.state.write(markers).await?;
        // Every partition counted the TRUNCATE events it was given.
        self.metrics.events = self.events;
        let (public, state) = tokio::try_join!(self.public.finish(), self.state.finish())?;
        Ok(Streamed {
            public,
            state,
            metrics: self.metrics,
            public_rows: self.public_rows,
            mode: Mode::Overwrite,
        })
    }
}

/// Where each of the `events` parts starts, counting rows over all of them.
fn part_starts(events: &[RecordBatch]) -> Vec<usize> {
    let mut starts = Vec::with_capacity(events.len());
    let mut at = 0;
    for part in events {
        starts.push(at);
        at += part.num_rows();
    }
    starts
}

/// The rows `rows` (ascending, counted over all the `events` parts from `starts`) as
/// one batch.
fn gather(
    schema: &SchemaRef,
    events: &[RecordBatch],
    starts: &[usize],
    rows: &[u32],
) -> Result<RecordBatch, ApplyError> {
    if events.is_empty() {
        return Ok(RecordBatch::new_empty(Arc::clone(schema)));
    }
    let mut part = 0;
    let indices: Vec<(usize, usize)> = rows
        .iter()
        .map(|&row| {
            let row = row as usize;
            while part + 1 < starts.len() && starts[part + 1] <= row {
                part += 1;
            }
            (part, row - starts[part])
        })
        .collect();
    let parts: Vec<&RecordBatch> = events.iter().collect();
    Ok(interleave_record_batch(&parts, &indices)?)
}

/// The rows of the `events` parts (counted over all of them) in `count` partitions (at
/// least one): each keyed row in the partition of its key's hash, each TRUNCATE in
/// every partition; partitions without a keyed row are left out, unless all are.
fn partitions(
    rules: &Rules,
    events: &[RecordBatch],
    count: usize,
) -> Result<Vec<Vec<u32>>, ApplyError> {
    let count = count.max(1);
    let mut parts: Vec<Vec<u32>> = vec![Vec::new(); count];
    let mut keyed = vec![false; count];
    let mut row = 0u32;
    let bounds = range_bounds(rules, events, count)?;
    for events in events {
        let ops = events.column(rules.op_col()).as_primitive::<Int8Type>();
        for start in (0..events.num_rows()).step_by(HASH_ROWS) {
            let len = HASH_ROWS.min(events.num_rows() - start);
            let slice = events.slice(start, len);
            // The kernel's shares take the low bits of the same hash: a partition
            // takes the high ones, so each partition still spreads over every share.
            let hashes = hashes(&key_columns(&slice, &rules.keys))?;
            let ranged = bounds
                .as_ref()
                .map(|b| Ok::<_, ApplyError>((b, integer_keys(rules, &slice)?)))
                .transpose()?;
            for (i, hash) in hashes.into_iter().enumerate() {
                match is_keyed(ops.value(start + i)) {
                    true => {
                        let p = match &ranged {
                            // Key ranges: each partition's rows, and so the row groups
                            // written from them, hold a narrow range of keys, which
                            // later batches skip by their statistics.
                            Some((bounds, keys)) => bounds.partition_point(|&b| b <= keys.value(i)),
                            None => ((hash >> 32) % count as u64) as usize,
                        };
                        parts[p].push(row);
                        keyed[p] = true;
                    }
                    false => parts.iter_mut().for_each(|part| part.push(row)),
                }
                row = row.checked_add(1).ok_or_else(overflow)?;
            }
        }
    }
    if !keyed.iter().any(|&k| k) {
        parts.truncate(1);
        return Ok(parts);
    }
    Ok(parts
        .into_iter()
        .zip(keyed)
        .filter_map(|(part, keyed)| keyed.then_some(part))
        .collect())
}

/// For a single integer key, the `count - 1` keys that split the events into ranges of
/// about equal rows (from a sample of the keys); `None` for other keys, which are
/// split by hash.
fn range_bounds(
    rules: &Rules,
    events: &[RecordBatch],
    count: usize,
) -> Result<Option<Vec<i64>>, ApplyError> {
    if rules.keys.len() != 1 || count <= 1 {
        return Ok(None);
    }
    let mut sample = Vec::new();
    for batch in events {
        if !batch.column(rules.keys[0]).data_type().is_integer() {
            return Ok(None);
        }
        let keys = integer_keys(rules, batch)?;
        sample.extend(keys.iter().step_by(RANGE_SAMPLE_STEP).flatten());
    }
    sample.sort_unstable();
    if sample.is_empty() {
        return Ok(None);
    }
    let mut bounds: Vec<i64> = (1..count)
        .map(|i| sample[i * sample.len() / count])
        .collect();
    bounds.dedup();
    Ok(Some(bounds))
}

/// Keys sampled to find the ranges: one in this many.
const RANGE_SAMPLE_STEP: usize = 64;

/// The single integer key column of `batch`, as 64-bit integers.
fn integer_keys(rules: &Rules, batch: &RecordBatch) -> Result<Int64Array, ApplyError> {
    let keys = cast(batch.column(rules.keys[0]), &DataType::Int64)?;
    Ok(keys.as_primitive::<Int64Type>().clone())
}

fn overflow() -> ApplyError {
    ApplyError::too_many("events")
}
