//! The Kafka source behind the runtime's source interface
//! ([`cdcflow_runtime::sources`]). A read lists the subscribed topics' partitions, asks
//! each for its offset bounds, and fetches from the position the flow's last committed
//! batch recorded up to the end each partition had when the read began (so `cdcflow
//! run` reads what is available now and stops). The position reached goes into the
//! checkpoint and the Delta commit's txn with the rows (runtime's checkpoint.rs): a
//! crash before the commit reads the same offsets again, and nothing is needed from
//! the broker to be correct: no consumer group is joined, and one named by
//! `kafka.group.id` is only told the position once the batch is durable.
//!
//! The client (librdkafka) fetches every partition of a read at once, each into a
//! queue of its own, reads only committed transactions, and reports a partition's end
//! as an event: a read takes each partition's records up to the end it expected, or
//! to the partition's end when what lies between holds no record to read.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdcflow_plan::read_kafka::{ReadKafka, Subscription};
use cdcflow_plan::{Input, Pipeline};
use cdcflow_runtime::sources::{
    Acknowledge, ExternalSource, PartitionLag, SourceFactory, SourceRead, SourceStatus,
};
use cdcflow_runtime::{ErrorCode, RunError};
use datafusion::arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

use crate::client::{Context, GIVE_UP_AFTER, KafkaConsumer, connect, serve_callbacks};
use crate::offsets::{self, Bounds, Offsets, Partition};
use crate::records::{PartitionRecords, Record, to_batches};

/// Messages taken from one partition's queue before the next partition's turn. Emptied
/// one after another, the other partitions' queues would stay full, and the client
/// stops fetching a partition whose queue is full: each fetch would bring one
/// partition's records. In turns, every queue keeps room and each fetch brings all.
const TURN: usize = 4096;
/// The pause of a read that found every queue empty.
const IDLE: Duration = Duration::from_millis(2);
/// A partition that gives neither a record nor its end for this long, below the end
/// the read expected, ends the read of that partition with what it gave (nothing the
/// broker holds there is skipped: the next read starts after the last record taken).
const STALL: Duration = Duration::from_secs(10);

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
#[derive(Clone)]
pub struct KafkaSource {
    pub rk: ReadKafka,
    /// The pipeline's folder, which relative paths of client options start from.
    pub root: PathBuf,
}

fn kafka_error(what: &str, e: impl std::fmt::Display) -> RunError {
    RunError::user(ErrorCode::Source, format!("Kafka source: {what}: {e}"))
}

fn named((topic, p): &Partition) -> String {
    format!("{topic}-{p}")
}

/// A consumer, the bounds of the subscribed partitions, and warnings of the
/// subscription ([`KafkaSource::begin`]).
type Begun = (Arc<KafkaConsumer>, BTreeMap<Partition, Bounds>, Vec<String>);

impl KafkaSource {
    /// The partitions of the subscribed topics, and the subscribed topics that do not
    /// exist (a name mistyped reads nothing: the run says so every time).
    fn partitions(
        &self,
        consumer: &KafkaConsumer,
    ) -> Result<(Vec<Partition>, Vec<String>), RunError> {
        let metadata = crate::client::metadata(consumer, &self.rk.bootstrap_servers)?;
        let pattern = match &self.rk.subscription {
            Subscription::Topics(_) => None,
            Subscription::Pattern(p) => Some(
                regex::Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| kafka_error("subscribePattern", e))?,
            ),
        };
        let topics = metadata.topics();
        let wanted: Vec<Partition> = topics
            .iter()
            .filter(|t| t.error().is_none())
            .filter(|t| match (&self.rk.subscription, &pattern) {
                (_, Some(re)) => re.is_match(t.name()),
                (Subscription::Topics(names), None) => names.iter().any(|n| n == t.name()),
                _ => false,
            })
            .flat_map(|t| {
                t.partitions()
                    .iter()
                    .map(|p| (t.name().to_string(), p.id()))
            })
            .collect();
        let missing = match &self.rk.subscription {
            Subscription::Topics(names) => names
                .iter()
                .filter(|n| !wanted.iter().any(|(t, _)| t == *n))
                .cloned()
                .collect(),
            Subscription::Pattern(_) => vec![],
        };
        Ok((wanted, missing))
    }

    /// Each partition's offset bounds. The end is the larger of what ListOffsets says
    /// and the offset after the last record a fetch from there to the partition's end
    /// finds: they agree on Kafka (the fetch finds one record), but some brokers answer
    /// ListOffsets with the last record batch's first offset plus one (tansu 0.6).
    fn bounds(
        consumer: &Arc<KafkaConsumer>,
        partitions: &[Partition],
    ) -> Result<BTreeMap<Partition, Bounds>, RunError> {
        let mut out = BTreeMap::new();
        for partition in partitions {
            let (earliest, latest) = consumer
                .fetch_watermarks(&partition.0, partition.1, GIVE_UP_AFTER)
                .map_err(|e| kafka_error(&format!("offsets of {}", named(partition)), e))?;
            out.insert(partition.clone(), Bounds { earliest, latest });
        }
        let last: BTreeMap<Partition, Want> = out
            .iter()
            .filter(|(_, b)| b.latest > b.earliest)
            .map(|(p, b)| (p.clone(), Want::to_the_end(b.latest - 1)))
            .collect();
        for (partition, read) in drain_all(consumer, &last, false)? {
            if let (Some(last), Some(b)) = (read.last_seen, out.get_mut(&partition)) {
                b.latest = b.latest.max(last + 1);
            }
        }
        Ok(out)
    }

    /// A consumer of the brokers, the bounds of every subscribed partition, and what
    /// the user should hear of the subscription (topics that do not exist).
    fn begin(&self) -> Result<Begun, RunError> {
        let consumer = Arc::new(connect(&self.rk, &self.root)?);
        let (partitions, missing) = self.partitions(&consumer)?;
        let bounds = Self::bounds(&consumer, &partitions)?;
        let warnings = match missing.is_empty() {
            true => vec![],
            false => vec![format!(
                "subscribed Kafka topic(s) {} do not exist on the brokers ({}): nothing was read from them; they are read once they appear (is the name mistyped?)",
                missing
                    .iter()
                    .map(|t| format!("`{t}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.rk.bootstrap_servers.join(",")
            )],
        };
        Ok((consumer, bounds, warnings))
    }

    fn read_now(&self, after: Option<&Value>) -> Result<SourceRead, RunError> {
        let committed = after
            .map(|v| {
                offsets::from_json(v).ok_or_else(|| {
                    RunError::input(format!(
                        "Kafka source: the checkpoint's position `{v}` is not one this source wrote"
                    ))
                })
            })
            .transpose()?;
        let (consumer, bounds, mut warnings) = self.begin()?;
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
            warnings.push(format!(
                "Kafka records lost before this flow read them: {loss}; went on past them (failOnDataLoss => 'false')"
            ));
        }
        let ranges = offsets::ranges(&starts, &bounds, self.rk.max_offsets_per_trigger);
        tracing::debug!(?bounds, ?ranges, "Kafka read");
        let wants: BTreeMap<Partition, Want> = ranges
            .iter()
            .map(|(p, r)| {
                let want = Want {
                    start: r.start,
                    end: r.end,
                    // The first record left behind tells how old the backlog is.
                    next_record: r.end < bounds[p].latest,
                    to_the_end: false,
                };
                (p.clone(), want)
            })
            .collect();
        let read = drain_all(&consumer, &wants, self.rk.include_headers)?;
        for (partition, r) in read.iter().filter(|(_, r)| r.stalled) {
            warnings.push(format!(
                "{}: no record arrived for {} s below offset {} that the read expected (the brokers answer); the batch took what it had, up to offset {}, and the next reads on from there",
                named(partition),
                STALL.as_secs(),
                wants[partition].end,
                r.next
            ));
        }
        let mut position = Offsets::new();
        for (partition, r) in &read {
            position.insert(partition.clone(), r.next);
        }
        let parts: Vec<PartitionRecords<'_>> = read
            .iter()
            .map(|((topic, p), r)| PartitionRecords {
                topic,
                partition: *p,
                records: &r.records,
            })
            .collect();
        let batches = to_batches(&parts, self.rk.include_headers)?;
        let all = || read.values().flat_map(|r| r.records.iter());
        let oldest = all()
            .filter_map(|r| r.timestamp_millis)
            .min()
            .map(|t| t.saturating_mul(1_000));
        let tombstones = all().filter(|r| r.value.is_none()).count() as u64;
        // How far this batch leaves the flow behind the ends the read began with: the
        // metrics and the event log show it per partition, as `status` does.
        let now = chrono::Utc::now().timestamp_millis();
        let behind = read
            .iter()
            .map(|(p, r)| {
                lag(
                    p,
                    r.next,
                    &bounds[p],
                    r.after.as_ref().and_then(|a| a.timestamp_millis),
                    now,
                )
            })
            .collect();
        // A position that moved without rows (a first read from `latest`, a new
        // partition, a gap skipped) must be committed, or the next read starts again
        // where this one did.
        let moved = committed.as_ref() != Some(&position);
        let acknowledge: Option<Box<dyn Acknowledge>> = match self.rk.client.get("kafka.group.id") {
            Some(group) if moved => Some(Box::new(GroupCommit {
                consumer: Arc::clone(&consumer),
                group: group.clone(),
                position: position.clone(),
            })),
            _ => None,
        };
        Ok(SourceRead {
            schema: self.rk.schema(),
            rows: batches,
            position: offsets::to_json(&position),
            must_commit: moved,
            more: ranges.values().any(|r| r.cut),
            oldest_change_micros: oldest,
            tombstones,
            lag: behind,
            acknowledge,
            carried: None,
            rejected: vec![],
            warnings,
            defaults: vec![],
        })
    }

    fn status_now(&self, after: Option<&Value>) -> Result<SourceStatus, RunError> {
        let mut status = SourceStatus {
            source: self.rk.key(),
            ..SourceStatus::default()
        };
        let committed = after.and_then(offsets::from_json);
        let (consumer, bounds, missing) = self.begin()?;
        status.warning = missing.into_iter().next();
        if committed.is_none() {
            status.warning = Some("not started: no run has read the topics yet".into());
        }
        let mut froms = BTreeMap::new();
        for (partition, b) in &bounds {
            let from = committed
                .as_ref()
                .and_then(|c| c.get(partition).copied())
                .unwrap_or(b.earliest);
            if committed.is_some() && from < b.earliest {
                status.warning = Some(format!(
                    "{}: offsets {from}..{} were deleted before they were read: the next run fails (failOnDataLoss)",
                    named(partition),
                    b.earliest - 1
                ));
            }
            froms.insert(partition.clone(), from.max(b.earliest));
        }
        // The oldest record behind, for how old the backlog is.
        let peeks: BTreeMap<Partition, Want> = froms
            .iter()
            .filter(|(p, from)| **from < bounds[*p].latest)
            .map(|(p, from)| (p.clone(), Want::peek(*from)))
            .collect();
        let peeked = drain_all(&consumer, &peeks, false)?;
        let now = chrono::Utc::now().timestamp_millis();
        for (partition, from) in &froms {
            let oldest = peeked
                .get(partition)
                .and_then(|r| r.after.as_ref())
                .and_then(|a| a.timestamp_millis);
            status
                .partitions
                .push(lag(partition, *from, &bounds[partition], oldest, now));
        }
        Ok(status)
    }
}

/// What a read wants of one partition: the records `start..end`; with `next_record`,
/// the first record at or after `end` too (not taken: its timestamp); with
/// `to_the_end`, every offset up to the partition's end looked at (not taken).
#[derive(Debug, Clone, Copy)]
struct Want {
    start: i64,
    end: i64,
    next_record: bool,
    to_the_end: bool,
}

impl Want {
    /// No record taken; the first at or after `offset` looked at.
    fn peek(offset: i64) -> Want {
        Want {
            start: offset,
            end: offset,
            next_record: true,
            to_the_end: false,
        }
    }

    /// No record taken; the offsets from `offset` to the partition's end looked at.
    fn to_the_end(offset: i64) -> Want {
        Want {
            to_the_end: true,
            ..Want::peek(offset)
        }
    }
}

/// What one partition gave.
#[derive(Debug, Default)]
struct Drained {
    records: Vec<Record>,
    /// The offset the next read starts at.
    next: i64,
    /// The first record at or after the end wanted, when asked for and there is one.
    after: Option<Record>,
    /// The offset of the last record the partition gave, taken or not.
    last_seen: Option<i64>,
    /// The partition gave nothing for [`STALL`] below the end the read expected (its
    /// brokers answering): the read took what it had.
    stalled: bool,
}

/// Reads what `wants` asks of each partition: all partitions are fetched at once, each
/// into a queue of its own, and the queues are emptied in turns (see [`TURN`]).
fn drain_all(
    consumer: &Arc<KafkaConsumer>,
    wants: &BTreeMap<Partition, Want>,
    with_headers: bool,
) -> Result<BTreeMap<Partition, Drained>, RunError> {
    if wants.is_empty() {
        return Ok(BTreeMap::new());
    }
    let mut assignment = TopicPartitionList::new();
    for ((topic, p), want) in wants {
        assignment
            .add_partition_offset(topic, *p, Offset::Offset(want.start))
            .map_err(|e| kafka_error("assigning partitions", e))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| kafka_error("assigning partitions", e))?;
    let mut draining = Vec::with_capacity(wants.len());
    for (partition, want) in wants {
        let queue = consumer
            .split_partition_queue(&partition.0, partition.1)
            .ok_or_else(|| kafka_error("reading", format!("no queue for {}", named(partition))))?;
        draining.push(Draining::new(partition, *want, queue));
    }
    loop {
        let mut got = 0;
        for d in draining.iter_mut().filter(|d| !d.done()) {
            got += d.turn(consumer, with_headers)?;
        }
        if draining.iter().all(Draining::done) {
            break;
        }
        // Every queue empty: the client's callbacks (errors, logs) are served then,
        // not on every record.
        if got == 0 {
            serve_callbacks(consumer);
            std::thread::sleep(IDLE);
        }
    }
    consumer
        .unassign()
        .map_err(|e| kafka_error("releasing partitions", e))?;
    Ok(draining
        .into_iter()
        .map(|d| (d.partition.clone(), d.out))
        .collect())
}

/// One partition being read: the records of `want.start..want.end` (and the record
/// after, when wanted), until the partition's end, or [`STALL`] without news.
struct Draining<'a> {
    partition: &'a Partition,
    want: Want,
    queue: PartitionQueue<Context>,
    out: Drained,
    news: Instant,
    /// Ended by the partition's end or a stall.
    ended: bool,
}

impl<'a> Draining<'a> {
    fn new(partition: &'a Partition, want: Want, queue: PartitionQueue<Context>) -> Self {
        Draining {
            partition,
            want,
            queue,
            out: Drained {
                next: want.start,
                ..Drained::default()
            },
            news: Instant::now(),
            ended: false,
        }
    }

    fn done(&self) -> bool {
        self.ended
            || (!self.want.to_the_end
                && self.out.next >= self.want.end
                && (!self.want.next_record || self.out.after.is_some()))
    }

    /// Takes what the queue holds now, [`TURN`] messages at most; returns how many
    /// it got.
    fn turn(&mut self, consumer: &KafkaConsumer, with_headers: bool) -> Result<usize, RunError> {
        let mut got = 0;
        while got < TURN && !self.done() {
            match self.queue.poll(Duration::ZERO) {
                Some(Ok(m)) => {
                    got += 1;
                    self.news = Instant::now();
                    take(&mut self.out, self.want, &m, with_headers);
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    // The fetch reached the partition's end (the last stable offset):
                    // no record lies below it that was not delivered before this
                    // event, so offsets left (transaction markers, records of aborted
                    // transactions, compacted away) hold nothing to read.
                    self.out.next = self.out.next.max(self.want.end);
                    self.ended = true;
                }
                Some(Err(e)) => {
                    serve_callbacks(consumer);
                    let why = consumer.context().last_error().unwrap_or_default();
                    return Err(kafka_error(
                        &format!(
                            "reading {} from offset {}",
                            named(self.partition),
                            self.out.next
                        ),
                        format!("{e} {why}"),
                    ));
                }
                None => {
                    if self.news.elapsed() >= STALL {
                        // Brokers that went away give no records either: that is a
                        // read that failed (nothing committed, the next run resumes
                        // from the committed offsets), not the end of the partition.
                        reachable(consumer, self.partition)?;
                        self.out.stalled = true;
                        self.ended = true;
                    }
                    break;
                }
            }
        }
        Ok(got)
    }
}

/// How long a stalled read waits for the brokers to answer before it takes them for
/// gone.
const REACHABLE_WITHIN: Duration = Duration::from_secs(5);

/// Whether the brokers still answer for `partition` (its offsets): an error naming the
/// partition and the broker's last error when they do not.
fn reachable(consumer: &KafkaConsumer, partition: &Partition) -> Result<(), RunError> {
    match consumer.fetch_watermarks(&partition.0, partition.1, REACHABLE_WITHIN) {
        Ok(_) => Ok(()),
        Err(e) => {
            serve_callbacks(consumer);
            let why = consumer.context().last_error().unwrap_or_default();
            Err(RunError::user(
                ErrorCode::SourceUnreachable,
                format!(
                    "Kafka source: the brokers stopped answering while {} was being read ({e} {why}); nothing of this batch was committed",
                    named(partition)
                ),
            )
            .with_help("the next run (or --continuous, after a back-off) resumes from the committed offsets once the brokers answer"))
        }
    }
}

/// Takes message `m` of a partition into `out`, as `want` asks.
fn take(out: &mut Drained, want: Want, m: &impl rdkafka::Message, with_headers: bool) {
    let offset = m.offset();
    out.last_seen = out.last_seen.max(Some(offset));
    if offset < out.next {
        return;
    }
    if offset < want.end {
        out.records.push(Record::of(m, with_headers));
        out.next = offset + 1;
    } else if out.after.is_none() {
        // Nothing the broker holds lies between: the read has all it wanted.
        out.next = out.next.max(want.end);
        out.after = Some(Record::of(m, false));
    }
}

/// How far a flow whose next offset of `partition` is `from` is behind its end
/// `bounds.latest`: records, and seconds from the timestamp of the oldest of them
/// (`oldest_millis`) to `now_millis`.
fn lag(
    partition: &Partition,
    from: i64,
    bounds: &Bounds,
    oldest_millis: Option<i64>,
    now_millis: i64,
) -> PartitionLag {
    let behind = (bounds.latest - from.max(bounds.earliest)).max(0);
    PartitionLag {
        partition: named(partition),
        behind_messages: behind,
        behind_seconds: oldest_millis
            .filter(|_| behind > 0)
            .map(|t| (now_millis - t).max(0) as f64 / 1e3),
    }
}

/// The courtesy commit of `kafka.group.id`: once the batch is durable, the group's
/// offsets are the flow's position, so that broker tools show its lag. The flow's
/// checkpoint, not the group, says where the next read starts.
struct GroupCommit {
    consumer: Arc<KafkaConsumer>,
    group: String,
    position: Offsets,
}

impl Acknowledge for GroupCommit {
    fn acknowledge(self: Box<Self>) -> BoxFuture<'static, Result<(), RunError>> {
        Box::pin(async move {
            let committed = tokio::task::spawn_blocking(move || {
                let mut offsets = TopicPartitionList::new();
                for ((topic, p), next) in &self.position {
                    offsets.add_partition_offset(topic, *p, Offset::Offset(*next))?;
                }
                self.consumer
                    .commit(&offsets, CommitMode::Sync)
                    .map(|()| self.group)
            })
            .await;
            // Not needed to be correct: a failure is only logged.
            match committed {
                Ok(Ok(group)) => tracing::debug!(%group, "Kafka consumer group offsets committed"),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the Kafka consumer group's offsets were not committed (the flow's checkpoint has them)")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the Kafka consumer group's offsets were not committed")
                }
            }
            Ok(())
        })
    }
}

fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, RunError> + Send + 'static,
) -> BoxFuture<'static, Result<T, RunError>> {
    Box::pin(async move {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| kafka_error("the reading thread", e))?
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
        // The client blocks: the read runs on a blocking thread.
        let source = self.clone();
        let after = after.cloned();
        blocking(move || source.read_now(after.as_ref()))
    }

    fn status<'a>(
        &'a self,
        after: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<SourceStatus, RunError>> {
        let source = self.clone();
        let after = after.cloned();
        blocking(move || source.status_now(after.as_ref()))
    }
}
