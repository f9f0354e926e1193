//! The Kafka source behind the runtime's source interface
//! ([`cdcflow_runtime::sources`]). A read lists the subscribed topics' partitions, asks
//! each for its offset bounds, and fetches from the position the flow's last committed
//! batch recorded up to the end each partition had when the read began (so `cdcflow
//! run` reads what is available now and stops). The position reached goes into the
//! checkpoint and the Delta commit's txn with the rows (runtime's checkpoint.rs): a
//! crash before the commit reads the same offsets again, and nothing is needed from
//! the broker to be correct (no consumer group is joined or committed).

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use cdcflow_plan::read_kafka::{ReadKafka, Subscription};
use cdcflow_plan::{Input, Pipeline};
use cdcflow_runtime::sources::{
    ExternalSource, PartitionLag, SourceFactory, SourceRead, SourceStatus,
};
use cdcflow_runtime::{ErrorCode, RunError};
use datafusion::arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use rskafka::client::Client;
use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::record::RecordAndOffset;
use serde_json::Value;

use crate::offsets::{self, Bounds, Offsets, Partition};
use crate::records::{PartitionRecords, to_batch};

/// Bytes one fetch asks for at most (the broker returns at least one whole record
/// batch even when it is larger).
const FETCH_BYTES: i32 = 8 << 20;
/// Bytes the fetch of the oldest record behind asks for (lag in seconds): the broker
/// returns at least the first record batch whatever the bound, and a batch cut by
/// `maxOffsetsPerTrigger` must not fetch the next one's records twice.
const LAG_FETCH_BYTES: i32 = 64 << 10;
/// How long a fetch waits for records to arrive; a read asks only for offsets below
/// the end it saw, which are there already.
const FETCH_WAIT_MS: i32 = 100;

/// Opens `read_kafka` inputs.
#[derive(Debug, Default, Clone, Copy)]
pub struct KafkaSources;

impl SourceFactory for KafkaSources {
    fn open(
        &self,
        pipeline: &Pipeline,
        input: &Input,
    ) -> Option<Result<Box<dyn ExternalSource>, RunError>> {
        let Input::Kafka(rk) = input else {
            return None;
        };
        Some(Ok(Box::new(KafkaSource {
            rk: rk.clone(),
            root: pipeline.root.clone(),
        })))
    }
}

/// One `read_kafka` call.
pub struct KafkaSource {
    pub rk: ReadKafka,
    /// The pipeline's folder, which relative paths of client options start from.
    pub root: PathBuf,
}

fn kafka_error(what: &str, e: impl std::fmt::Display) -> RunError {
    RunError::user(ErrorCode::Source, format!("Kafka source: {what}: {e}"))
}

impl KafkaSource {
    /// The partitions of the subscribed topics, each with its client.
    async fn partitions(
        &self,
        client: &Client,
    ) -> Result<BTreeMap<Partition, PartitionClient>, RunError> {
        let topics = client
            .list_topics()
            .await
            .map_err(|e| kafka_error("listing topics", e))?;
        let pattern = match &self.rk.subscription {
            Subscription::Topics(_) => None,
            Subscription::Pattern(p) => Some(
                regex::Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| kafka_error("subscribePattern", e))?,
            ),
        };
        let wanted: Vec<(String, i32)> = topics
            .iter()
            .filter(|t| match (&self.rk.subscription, &pattern) {
                (_, Some(re)) => re.is_match(&t.name),
                (Subscription::Topics(names), None) => names.contains(&t.name),
                _ => false,
            })
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), *p)))
            .collect();
        let mut out = BTreeMap::new();
        for (topic, p) in wanted {
            let pc = client
                .partition_client(topic.clone(), p, UnknownTopicHandling::Retry)
                .await
                .map_err(|e| kafka_error(&format!("partition {topic}-{p}"), e))?;
            out.insert((topic, p), pc);
        }
        if let Subscription::Topics(names) = &self.rk.subscription {
            let missing: Vec<&String> = names
                .iter()
                .filter(|n| !topics.iter().any(|t| &t.name == *n))
                .collect();
            if !missing.is_empty() {
                tracing::warn!(topics = ?missing, "subscribed Kafka topics do not exist (yet); read when they appear");
            }
        }
        Ok(out)
    }

    /// Each partition's offset bounds. The end is the larger of what ListOffsets says
    /// and the high watermark a fetch reports: they agree on Kafka, but some brokers
    /// answer ListOffsets with the last record batch's first offset (tansu 0.6).
    async fn bounds(
        partitions: &BTreeMap<Partition, PartitionClient>,
    ) -> Result<BTreeMap<Partition, Bounds>, RunError> {
        let mut out = BTreeMap::new();
        for ((topic, p), pc) in partitions {
            let what = format!("offsets of {topic}-{p}");
            let earliest = pc
                .get_offset(OffsetAt::Earliest)
                .await
                .map_err(|e| kafka_error(&what, e))?;
            let listed = pc
                .get_offset(OffsetAt::Latest)
                .await
                .map_err(|e| kafka_error(&what, e))?;
            let (_, high_watermark) = pc
                .fetch_records(earliest, 1..2, 0)
                .await
                .map_err(|e| kafka_error(&what, e))?;
            let latest = listed.max(high_watermark);
            out.insert((topic.clone(), *p), Bounds { earliest, latest });
        }
        Ok(out)
    }

    async fn read(&self, after: Option<&Value>) -> Result<SourceRead, RunError> {
        let committed = after
            .map(|v| {
                offsets::from_json(v).ok_or_else(|| {
                    RunError::input(format!(
                        "Kafka source: the checkpoint's position `{v}` is not one this source wrote"
                    ))
                })
            })
            .transpose()?;
        let client = connect(&self.rk, &self.root).await?;
        let partitions = self.partitions(&client).await?;
        let bounds = Self::bounds(&partitions).await?;
        let (starts, lost) = offsets::starts(
            &bounds,
            committed.as_ref(),
            &self.rk.starting_offsets,
            self.rk.fail_on_data_loss,
        )
        .map_err(|lost| {
            let gaps: Vec<String> = lost.iter().map(ToString::to_string).collect();
            RunError::input(format!(
                "Kafka source: records were lost before this flow read them: {}",
                gaps.join("; ")
            ))
            .with_help("nothing was committed; to go on from the oldest records the broker still has, set failOnDataLoss => 'false' (the gap stays lost), or `cdcflow run --full-refresh <table>` to read the topics again")
        })?;
        for loss in &lost {
            tracing::warn!(%loss, "Kafka records lost; going on (failOnDataLoss => false)");
        }
        let ranges = offsets::ranges(&starts, &bounds, self.rk.max_offsets_per_trigger);
        tracing::debug!(?bounds, ?ranges, "Kafka read");
        let mut fetched: Vec<(Partition, Vec<RecordAndOffset>)> = Vec::new();
        let mut position = Offsets::new();
        for (partition, range) in &ranges {
            let (records, reached) =
                fetch(&partitions[partition], partition, range.start, range.end).await?;
            position.insert(partition.clone(), reached);
            fetched.push((partition.clone(), records));
        }
        let parts: Vec<PartitionRecords<'_>> = fetched
            .iter()
            .map(|((topic, p), records)| PartitionRecords {
                topic,
                partition: *p,
                records,
            })
            .collect();
        let batch = to_batch(&parts, self.rk.include_headers)?;
        let oldest = fetched
            .iter()
            .flat_map(|(_, r)| r.iter().map(|r| r.record.timestamp.timestamp_micros()))
            .min();
        let tombstones = fetched
            .iter()
            .flat_map(|(_, r)| r.iter())
            .filter(|r| r.record.value.is_none())
            .count() as u64;
        // How far this batch leaves the flow behind the ends the read began with: the
        // metrics and the event log show it per partition, as `status` does.
        let now = chrono::Utc::now().timestamp_micros();
        let mut behind = Vec::with_capacity(position.len());
        for (partition, &next) in &position {
            behind.push(
                lag(
                    &partitions[partition],
                    partition,
                    next,
                    &bounds[partition],
                    now,
                )
                .await?,
            );
        }
        // A position that moved without rows (a first read from `latest`, a new
        // partition, a gap skipped) must be committed, or the next read starts again
        // where this one did.
        let moved = committed.as_ref() != Some(&position);
        Ok(SourceRead {
            schema: self.rk.schema(),
            rows: vec![batch],
            position: offsets::to_json(&position),
            must_commit: moved,
            more: ranges.values().any(|r| r.cut),
            oldest_change_micros: oldest,
            tombstones,
            lag: behind,
            acknowledge: None,
            carried: None,
        })
    }

    async fn status(&self, after: Option<&Value>) -> Result<SourceStatus, RunError> {
        let mut status = SourceStatus {
            source: self.rk.key(),
            ..SourceStatus::default()
        };
        let committed = after.and_then(offsets::from_json);
        let client = connect(&self.rk, &self.root).await?;
        let partitions = self.partitions(&client).await?;
        let bounds = Self::bounds(&partitions).await?;
        if committed.is_none() {
            status.warning = Some("not started: no run has read the topics yet".into());
        }
        let now = chrono::Utc::now().timestamp_micros();
        for (partition, b) in &bounds {
            let from = committed
                .as_ref()
                .and_then(|c| c.get(partition).copied())
                .unwrap_or(b.earliest);
            let behind = lag(&partitions[partition], partition, from, b, now).await?;
            if committed.is_some() && from < b.earliest {
                status.warning = Some(format!(
                    "{}-{}: offsets {from}..{} were deleted before they were read: the next run fails (failOnDataLoss)",
                    partition.0,
                    partition.1,
                    b.earliest - 1
                ));
            }
            status.partitions.push(behind);
        }
        Ok(status)
    }
}

/// The records of `partition` from `start` up to (not including) `end`, and the offset
/// the next read starts at: `end`, or the offset after the last record when the broker
/// has no record between it and `end` (records of a transaction not committed yet, or
/// offsets compaction or transaction markers left empty), so that nothing the broker may
/// still deliver there is skipped.
async fn fetch(
    pc: &PartitionClient,
    partition: &Partition,
    start: i64,
    end: i64,
) -> Result<(Vec<RecordAndOffset>, i64), RunError> {
    let mut out = Vec::new();
    let mut next = start;
    while next < end {
        let (records, _) = pc
            .fetch_records(next, 1..FETCH_BYTES, FETCH_WAIT_MS)
            .await
            .map_err(|e| kafka_error(&format!("fetching {}-{}", partition.0, partition.1), e))?;
        let before = out.len();
        tracing::debug!(next, end, fetched = records.len(), first = ?records.first().map(|r| r.offset), "Kafka fetch");
        for r in records {
            if r.offset >= next && r.offset < end {
                next = r.offset + 1;
                out.push(r);
            }
        }
        if out.len() == before {
            break;
        }
    }
    Ok((out, next))
}

use crate::client::connect;

/// How far a flow whose next offset of `partition` is `from` is behind its end
/// `bounds.latest`: records, and seconds from the timestamp of the oldest of them to
/// `now_micros` (asked of the broker only when something is behind).
async fn lag(
    pc: &PartitionClient,
    partition: &Partition,
    from: i64,
    bounds: &Bounds,
    now_micros: i64,
) -> Result<PartitionLag, RunError> {
    let from = from.max(bounds.earliest);
    let behind = (bounds.latest - from).max(0);
    let mut behind_seconds = None;
    if behind > 0 {
        let (records, _) = pc
            .fetch_records(from, 1..LAG_FETCH_BYTES, FETCH_WAIT_MS)
            .await
            .map_err(|e| kafka_error("reading the oldest record not committed", e))?;
        behind_seconds = records
            .first()
            .map(|r| (now_micros - r.record.timestamp.timestamp_micros()) as f64 / 1e6);
    }
    Ok(PartitionLag {
        partition: format!("{}-{}", partition.0, partition.1),
        behind_messages: behind,
        behind_seconds,
    })
}

impl ExternalSource for KafkaSource {
    fn checkpoint_key(&self) -> String {
        self.rk.key()
    }

    fn columns(&self) -> BoxFuture<'_, Result<SchemaRef, RunError>> {
        let schema = self.rk.schema();
        Box::pin(async move { Ok(Arc::clone(&schema)) })
    }

    fn read<'a>(&'a self, after: Option<&'a Value>) -> BoxFuture<'a, Result<SourceRead, RunError>> {
        Box::pin(KafkaSource::read(self, after))
    }

    fn status<'a>(
        &'a self,
        after: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<SourceStatus, RunError>> {
        Box::pin(KafkaSource::status(self, after))
    }
}
