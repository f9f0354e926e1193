//! The Kafka source end to end, against a real Kafka-protocol broker (tansu, installed
//! by `.ci/kafka`; README, "Tests") that each test starts on a free loopback port and
//! stops: records land in a bronze streaming table through `read_kafka`, an AUTO CDC
//! flow folds them into SCD type 1; runs killed at any point lose and double nothing.
//! Without the broker binary the tests fail, naming the script that installs it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cdcflow_kafka::rdkafka::ClientConfig;
use cdcflow_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use cdcflow_kafka::rdkafka::client::{ClientContext, DefaultClientContext};
use cdcflow_kafka::rdkafka::message::{Header, OwnedHeaders};
use cdcflow_kafka::rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext,
};

use crate::{cdcflow, query_csv, stderr, stdout};

/// A tansu broker on loopback, with its storage in memory; stopped when dropped.
pub struct Broker {
    child: Child,
    pub address: String,
    admin: AdminClient<DefaultClientContext>,
    producer: BaseProducer<Deliveries>,
}

/// Keeps the errors of records the broker did not take, so that a test fails on them.
#[derive(Default)]
pub struct Deliveries(Mutex<Vec<String>>);

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.0.lock().expect("deliveries").push(e.to_string());
        }
    }
}

/// The broker binary: `CDCFLOW_TANSU`, else where `.ci/kafka` installs it.
fn tansu() -> PathBuf {
    if let Some(p) = std::env::var_os("CDCFLOW_TANSU") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let path = home.join(".cache/cdcflow/tools/tansu-0.6.0/bin/tansu");
    assert!(
        path.exists(),
        "these tests need the tansu broker at {} (or CDCFLOW_TANSU): run `bash .ci/kafka`",
        path.display()
    );
    path
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Broker {
    pub fn start() -> Broker {
        let address = format!("127.0.0.1:{}", free_port());
        Broker::start_advertising(&address, &address)
    }

    /// A broker listening on `address` that tells clients to reach it at `advertised`
    /// (a proxy in front of it); the broker's own client connects through `advertised`.
    pub fn start_advertising(address: &str, advertised: &str) -> Broker {
        let url = format!("tcp://{address}");
        let advertised_url = format!("tcp://{advertised}");
        let args = [
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &advertised_url,
            "--storage-engine",
            "memory://tansu/",
        ];
        let child = Command::new(tansu())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        let started = Instant::now();
        while TcpStream::connect(address).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "tansu did not listen on {address}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", advertised);
        let admin = config.create().expect("admin client");
        // One record per request, each in a record batch of its own (see `produce`).
        let producer = config
            .clone()
            .set("linger.ms", "0")
            .set("batch.num.messages", "1")
            .set("enable.idempotence", "false")
            .create_with_context(Deliveries::default())
            .expect("producer");
        Broker {
            child,
            address: advertised.to_string(),
            admin,
            producer,
        }
    }

    fn admin<T>(&self, work: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(work)
    }

    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let done = self.admin(self.admin.create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        ));
        for r in done.expect("create topic") {
            r.expect("create topic");
        }
    }

    pub fn delete_topic(&self, topic: &str) {
        let done = self.admin(self.admin.delete_topics(&[topic], &AdminOptions::new()));
        for r in done.expect("delete topic") {
            r.expect("delete topic");
        }
    }

    /// Appends `(key, value)` records to one partition, in order, each in a record batch
    /// of its own: tansu 0.6 finds no record when a fetch starts inside a batch (Kafka
    /// returns the batch), which a read cut by maxOffsetsPerTrigger does.
    pub fn produce(&self, topic: &str, partition: i32, records: &[(String, Option<String>)]) {
        let records: Vec<(String, Option<Vec<u8>>)> = records
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref().map(|v| v.as_bytes().to_vec())))
            .collect();
        self.produce_bytes(topic, partition, &records);
    }

    /// [`Broker::produce`] of values that are not text (Avro).
    pub fn produce_bytes(
        &self,
        topic: &str,
        partition: i32,
        records: &[(String, Option<Vec<u8>>)],
    ) {
        for (k, v) in records {
            let headers = OwnedHeaders::new().insert(Header {
                key: "source",
                value: Some("test"),
            });
            let mut record = BaseRecord::to(topic)
                .partition(partition)
                .key(k.as_str())
                .headers(headers);
            if let Some(v) = v {
                record = record.payload(v.as_slice());
            }
            self.producer
                .send(record)
                .map_err(|(e, _)| e)
                .expect("produce");
        }
        // One flush for all: the client pipelines the requests in order on one
        // connection (a flush per record waits a poll interval each).
        self.producer
            .flush(Duration::from_secs(60))
            .expect("the broker took the records");
        let failed = std::mem::take(&mut *self.producer.context().0.lock().expect("deliveries"));
        assert!(failed.is_empty(), "records not delivered: {failed:?}");
    }
}

/// The TLS and SASL tests' data: topic `secure` (one partition) with the records `v0`
/// to `v4`, produced by the test's own plain client.
pub fn produce_secure(broker: &Broker) {
    broker.create_topic("secure", 1);
    let records: Vec<(String, Option<String>)> = (0..5)
        .map(|i| (i.to_string(), Some(format!("v{i}"))))
        .collect();
    broker.produce("secure", 0, &records);
}

/// The pipeline at `pipeline` read all of `secure` into `bronze (v, offset)`.
pub fn assert_read_secure(pipeline: &Path) {
    let got = query_csv(pipeline, "SELECT v FROM bronze ORDER BY offset");
    assert_eq!(
        stdout(&got).lines().collect::<Vec<_>>(),
        ["v", "v0", "v1", "v2", "v3", "v4"],
        "{}",
        stderr(&got)
    );
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pipeline reading `topic` into `bronze` (the records as Databricks gives them)
/// and folding the JSON values `{"id":…,"name":…,"seq":…}` into SCD type 1 `current`.
fn pipeline(dir: &Path, broker: &Broker, topic: &str, extra: &str) {
    std::fs::write(dir.join("pipeline.yaml"), "name: kafka_e2e\n").expect("pipeline.yaml");
    std::fs::write(
        dir.join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE bronze AS
SELECT topic, partition, offset, timestamp, timestampType, CAST(key AS STRING) AS k, CAST(value AS STRING) AS v, headers
FROM STREAM read_kafka(bootstrapServers => '{}', subscribe => '{topic}', startingOffsets => 'earliest', includeHeaders => 'true'{extra});

CREATE OR REFRESH STREAMING TABLE current;
CREATE FLOW current_cdc AS AUTO CDC INTO current
FROM (SELECT CAST(get_json_object(v, '$.id') AS INT) AS id, get_json_object(v, '$.name') AS name,
             CAST(get_json_object(v, '$.seq') AS BIGINT) AS seq FROM STREAM(bronze) WHERE v IS NOT NULL)
  KEYS (id)
  SEQUENCE BY seq
  STORED AS SCD TYPE 1;
",
            broker.address
        ),
    )
    .expect("flows.sql");
}

fn run(dir: &Path) -> String {
    let out = cdcflow(&["run", "-p", dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // Shown with a failing test's output (RUST_LOG=cdcflow_kafka=debug shows the reads).
    eprint!("{}", stderr(&out));
    stdout(&out)
}

fn query(dir: &Path, sql: &str) -> Vec<String> {
    let out = query_csv(dir, sql);
    assert!(out.status.success(), "{sql}: {}", stderr(&out));
    stdout(&out).lines().skip(1).map(String::from).collect()
}

/// The offsets the consumer group `group` has committed for `topic`'s partitions.
fn group_offsets(broker: &Broker, group: &str, topic: &str, partitions: i32) -> Vec<String> {
    use cdcflow_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
    use cdcflow_kafka::rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut asked = TopicPartitionList::new();
    for p in 0..partitions {
        asked.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(asked, Duration::from_secs(20))
        .expect("committed offsets");
    committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => format!("{}:{o}", e.partition()),
            other => format!("{}:{other:?}", e.partition()),
        })
        .collect()
}

/// `n` events for keys `0..keys`, key `k`'s events all in partition `k % partitions`
/// (keys interleave across partitions), each event `{"id","name","seq"}`.
fn events(from: u64, n: u64, keys: u64, partitions: i32) -> Vec<Vec<(String, Option<String>)>> {
    let mut out = vec![Vec::new(); partitions as usize];
    for seq in from..from + n {
        let id = seq % keys;
        let value = format!(r#"{{"id":{id},"name":"n{seq}","seq":{seq}}}"#);
        out[(id % partitions as u64) as usize].push((id.to_string(), Some(value)));
    }
    out
}

fn produce_events(broker: &Broker, topic: &str, from: u64, n: u64, keys: u64) {
    for (p, records) in events(from, n, keys, 3).iter().enumerate() {
        broker.produce(topic, p as i32, records);
    }
}

/// Each key's latest event, as `id,name` lines in key order.
fn expected_current(upto: u64, keys: u64) -> Vec<String> {
    let mut latest = std::collections::BTreeMap::new();
    for seq in 0..upto {
        latest.insert(seq % keys, seq);
    }
    latest
        .iter()
        .map(|(id, seq)| format!("{id},n{seq}"))
        .collect()
}

/// No record is in bronze twice.
fn assert_no_doubles(dir: &Path) {
    let all = query(dir, "SELECT count(*) FROM bronze");
    let distinct = query(
        dir,
        "SELECT count(*) FROM (SELECT DISTINCT topic, partition, offset FROM bronze)",
    );
    assert_eq!(all, distinct, "a record was stored twice");
}

#[test]
fn records_of_three_partitions_land_in_bronze_and_fold_into_scd1() {
    let broker = Broker::start();
    broker.create_topic("orders", 3);
    produce_events(&broker, "orders", 0, 60, 10);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &broker, "orders", "");

    let out = run(dir.path());
    assert!(out.contains("read 60"), "{out}");
    assert_eq!(
        query(dir.path(), "SELECT id, name FROM current ORDER BY id"),
        expected_current(60, 10)
    );
    assert_eq!(
        query(
            dir.path(),
            "SELECT partition, count(*), min(offset), max(offset) FROM bronze GROUP BY partition ORDER BY partition"
        ),
        ["0,24,0,23", "1,18,0,17", "2,18,0,17"]
    );
    assert_eq!(
        query(
            dir.path(),
            "SELECT headers[1]['key'], CAST(headers[1]['value'] AS STRING) FROM bronze LIMIT 1"
        ),
        ["source,test"]
    );
    // The producer's timestamps (CreateTime, 0), within the test's time.
    assert_eq!(
        query(
            dir.path(),
            "SELECT timestampType, count(*) FROM bronze WHERE timestamp > TIMESTAMP '2026-01-01' AND timestamp <= now() GROUP BY timestampType"
        ),
        ["0,60"]
    );

    // Nothing new: nothing read. Then only the new records, with three tombstones
    // (records without a value), counted in the summary and the event log.
    let again = run(dir.path());
    assert!(!again.contains("read 60"), "{again}");
    produce_events(&broker, "orders", 60, 30, 10);
    broker.produce("orders", 0, &vec![("3".to_string(), None); 3]);
    let out = run(dir.path());
    assert!(out.contains("read 33 (3 tombstones)"), "{out}");
    assert!(
        out.contains(
            "lag per partition: orders-0: 0 behind; orders-1: 0 behind; orders-2: 0 behind"
        ),
        "{out}"
    );
    assert_eq!(
        query(
            dir.path(),
            "SELECT flow, batch, rows_read, tombstones, message FROM event_log WHERE event = 'flow_completed' AND batch = 1 ORDER BY flow"
        ),
        [
            "bronze,1,33,3,lag per partition: orders-0: 0 behind; orders-1: 0 behind; orders-2: 0 behind",
            "current_cdc,1,30,,",
        ]
    );
    assert_no_doubles(dir.path());
    assert_eq!(
        query(dir.path(), "SELECT id, name FROM current ORDER BY id"),
        expected_current(90, 10)
    );

    // status: per partition, nothing behind; then 5 records behind on partition 1.
    let late = (
        "1".to_string(),
        Some(r#"{"id":1,"name":"late","seq":1000}"#.to_string()),
    );
    broker.produce("orders", 1, &vec![late; 5]);
    let status = cdcflow(&["status", "-p", dir.path().to_str().expect("utf-8")]);
    let text = stdout(&status);
    assert!(text.contains("orders-0: 0 behind"), "{text}");
    assert!(text.contains("orders-1: 5 behind"), "{text}");
}

#[test]
fn a_named_consumer_group_is_told_the_position_once_each_batch_is_durable() {
    let broker = Broker::start();
    broker.create_topic("orders", 3);
    produce_events(&broker, "orders", 0, 30, 6);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(
        dir.path(),
        &broker,
        "orders",
        ", `kafka.group.id` => 'cdcflow-e2e'",
    );
    run(dir.path());
    assert_eq!(
        group_offsets(&broker, "cdcflow-e2e", "orders", 3),
        ["0:10", "1:10", "2:10"]
    );
    produce_events(&broker, "orders", 30, 6, 6);
    run(dir.path());
    assert_eq!(
        group_offsets(&broker, "cdcflow-e2e", "orders", 3),
        ["0:12", "1:12", "2:12"]
    );
    // Each record once in bronze: the checkpoint, not the group, says where reads start.
    assert_eq!(query(dir.path(), "SELECT count(*) FROM bronze"), ["36"]);
    // A read that names no group commits to none.
    assert_eq!(
        group_offsets(&broker, "cdcflow", "orders", 3),
        ["0:Invalid", "1:Invalid", "2:Invalid"]
    );
}

#[test]
fn a_run_killed_at_any_point_reads_exactly_the_uncommitted_offsets_again() {
    for point in ["offsets:bronze", "before-commit:bronze", "committed:bronze"] {
        let broker = Broker::start();
        broker.create_topic("orders", 3);
        produce_events(&broker, "orders", 0, 30, 7);
        let dir = tempfile::tempdir().expect("tempdir");
        pipeline(dir.path(), &broker, "orders", "");
        run(dir.path());

        produce_events(&broker, "orders", 30, 30, 7);
        let died = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["run", "-p", dir.path().to_str().expect("utf-8")])
            .env("CDCFLOW_FAILPOINT", point)
            .output()
            .expect("run");
        assert!(
            !died.status.success() && stderr(&died).contains("failpoint"),
            "{point}: the run did not reach its failpoint: {}{}",
            stdout(&died),
            stderr(&died)
        );
        produce_events(&broker, "orders", 60, 10, 7);
        run(dir.path());
        assert_no_doubles(dir.path());
        assert_eq!(
            query(dir.path(), "SELECT count(*) FROM bronze"),
            ["70"],
            "{point}"
        );
        assert_eq!(
            query(dir.path(), "SELECT id, name FROM current ORDER BY id"),
            expected_current(70, 7),
            "{point}"
        );
    }
}

#[test]
fn a_backlog_is_read_in_batches_of_max_offsets_per_trigger_and_new_partitions_are_read() {
    let broker = Broker::start();
    broker.create_topic("a", 3);
    produce_events(&broker, "a", 0, 90, 9);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pipeline.yaml"), "name: kafka_batches\n").expect("yaml");
    std::fs::write(
        dir.path().join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE bronze AS SELECT topic, partition, offset FROM STREAM read_kafka(bootstrapServers => '{}', subscribePattern => '[ab]', startingOffsets => 'earliest', maxOffsetsPerTrigger => '25');\n",
            broker.address
        ),
    )
    .expect("flows.sql");
    let out = run(dir.path());
    assert!(out.contains("batch 3"), "four batches of at most 25: {out}");
    assert_eq!(query(dir.path(), "SELECT count(*) FROM bronze"), ["90"]);
    // The run's batches make one row in the event log, with the lag the last one left.
    assert_eq!(
        query(
            dir.path(),
            "SELECT rows_read, tombstones, message FROM event_log WHERE event = 'flow_completed'",
        ),
        ["90,0,lag per partition: a-0: 0 behind; a-1: 0 behind; a-2: 0 behind"]
    );
    assert_eq!(
        query(
            dir.path(),
            "SELECT count(*) FROM (SELECT DISTINCT partition, offset FROM bronze)"
        ),
        ["90"]
    );
    // A topic that appears later and matches the pattern is read from its start.
    broker.create_topic("b", 1);
    broker.produce(
        "b",
        0,
        &[("x".into(), Some("1".into())), ("y".into(), None)],
    );
    run(dir.path());
    assert_eq!(
        query(
            dir.path(),
            "SELECT topic, count(*) FROM bronze GROUP BY topic ORDER BY topic"
        ),
        ["a,90", "b,2"]
    );
}

#[test]
fn offsets_the_broker_no_longer_has_fail_loudly_unless_data_loss_is_allowed() {
    let broker = Broker::start();
    broker.create_topic("t", 1);
    broker.produce("t", 0, &events(0, 10, 5, 1)[0]);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &broker, "t", "");
    run(dir.path());
    // The topic is deleted and made again: the committed offset 10 is past its end.
    broker.delete_topic("t");
    broker.create_topic("t", 1);
    broker.produce("t", 0, &events(10, 3, 5, 1)[0]);
    let out = cdcflow(&["run", "-p", dir.path().to_str().expect("utf-8")]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("t-0: the committed offset 10 is past the partition's end 3"),
        "{text}"
    );
    assert!(text.contains("failOnDataLoss"), "{text}");
    assert_eq!(query(dir.path(), "SELECT count(*) FROM bronze"), ["10"]);

    pipeline(dir.path(), &broker, "t", ", failOnDataLoss => 'false'");
    let said = run(dir.path());
    assert!(
        said.contains("warning: Kafka records lost before this flow read them: t-0"),
        "the gap is said in the summary: {said}"
    );
    assert_eq!(query(dir.path(), "SELECT count(*) FROM bronze"), ["13"]);
}

#[test]
fn brokers_that_go_away_mid_run_fail_the_run_instead_of_ending_it_as_done() {
    let mut broker = Broker::start();
    broker.create_topic("t", 1);
    broker.produce("t", 0, &events(0, 3000, 50, 1)[0]);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &broker, "t", ", maxOffsetsPerTrigger => 100");
    let run = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.path().to_str().expect("utf-8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Gone once the run has committed two of its 30 batches.
    let second = dir
        .path()
        .join("_storage/tables/bronze/_delta_log/00000000000000000001.json");
    let began = Instant::now();
    while !second.exists() && began.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = broker.child.kill();
    let _ = broker.child.wait();
    let out = run.wait_with_output().expect("wait");
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        second.exists(),
        "the run never committed a second batch: {said}"
    );
    assert!(!out.status.success(), "the run ended as done: {said}");
    assert!(
        said.contains("cdcflow::run::source_unreachable"),
        "the failure says the brokers are out of reach: {said}"
    );
    let read: u64 = query(dir.path(), "SELECT count(*) FROM bronze")[0]
        .parse()
        .expect("a count");
    assert!(read < 3000, "{read} of 3000 records read");
}

#[test]
fn a_subscribed_topic_that_does_not_exist_is_named_in_the_run_summary() {
    let broker = Broker::start();
    broker.create_topic("crm.public.customers", 1);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &broker, "crm.public.not_there_yet", "");
    // validate says it too, at the call, while the brokers answer.
    let out = cdcflow(&["validate", "-p", dir.path().to_str().expect("utf-8")]);
    let checked = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{checked}");
    assert!(
        checked.contains("flows.sql:3:")
            && checked.contains(
                "subscribed Kafka topic `crm.public.not_there_yet` does not exist on the brokers"
            )
            && checked.contains("crm.public.customers"),
        "{checked}"
    );
    let said = run(dir.path());
    assert!(
        said.contains(
            "subscribed Kafka topic(s) `crm.public.not_there_yet` do not exist on the brokers"
        ),
        "{said}"
    );
    // Said on every run while it reads nothing, not only the first.
    assert!(run(dir.path()).contains("`crm.public.not_there_yet`"));
}

/// Waits until `current` holds each key's latest of the first `upto` events.
fn wait_for_events(dir: &Path, upto: u64, keys: u64) -> bool {
    let want = expected_current(upto, keys);
    for _ in 0..300 {
        let out = query_csv(dir, "SELECT id, name FROM current ORDER BY id");
        let got: Vec<String> = stdout(&out).lines().skip(1).map(String::from).collect();
        if out.status.success() && got == want {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

#[test]
fn continuous_mode_follows_records_as_they_are_produced() {
    let broker = Broker::start();
    broker.create_topic("orders", 3);
    produce_events(&broker, "orders", 0, 30, 5);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &broker, "orders", "");
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(&yaml, format!("{text}trigger_interval_seconds: 0.5\n")).expect("yaml");
    let metrics = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args([
            "run",
            "-p",
            dir.path().to_str().expect("utf-8"),
            "--continuous",
            "--metrics-addr",
            &metrics,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let first = wait_for_events(dir.path(), 30, 5);
    broker.produce("orders", 2, &[("2".to_string(), None)]);
    produce_events(&broker, "orders", 30, 12, 5);
    let later = wait_for_events(dir.path(), 42, 5);
    // The metrics: the tombstone, and each partition caught up (its lag after the
    // last batch).
    let scraped = crate::metrics_endpoint::scrape_until(
        &metrics,
        r#"cdcflow_tombstones_total{pipeline="kafka_e2e",flow="bronze"} 1"#,
        Duration::from_secs(10),
    )
    .unwrap_or_default();
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    let out = child.wait_with_output().expect("wait");
    assert!(first, "the first records did not arrive: {}", stderr(&out));
    assert!(later, "the later records did not arrive: {}", stderr(&out));
    assert!(term.success() && out.status.success(), "{}", stderr(&out));
    assert_no_doubles(dir.path());
    let label = r#"{pipeline="kafka_e2e",flow="bronze""#;
    for want in [
        format!("cdcflow_tombstones_total{label}}} 1"),
        format!(r#"cdcflow_partition_lag_messages{label},partition="orders-0"}} 0"#),
        format!(r#"cdcflow_partition_lag_messages{label},partition="orders-2"}} 0"#),
        format!(r#"cdcflow_partition_lag_seconds{label},partition="orders-1"}} 0"#),
    ] {
        assert!(scraped.contains(&want), "{want}\n{scraped}");
    }
}

/// Key and partition (of 3) for a Debezium event line: the row's `id`, as Debezium keys
/// a table's events by its primary key; tombstones (no id) go to partition 0.
fn keyed(line: &str) -> (i32, Option<String>) {
    let v: serde_json::Value = serde_json::from_str(line).expect("json");
    let v = match v.get("payload") {
        Some(p) => p.clone(),
        None => v,
    };
    let id = ["after", "before"].iter().find_map(|side| {
        v.get(side)
            .and_then(|r| r.get("id"))
            .and_then(|i| i.as_i64())
    });
    match id {
        Some(id) => ((id % 3) as i32, Some(format!(r#"{{"id":{id}}}"#))),
        None => (0, None),
    }
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    let header = lines.remove(0);
    lines.sort();
    lines.insert(0, header);
    lines
}

#[test]
fn the_example_pipeline_gives_the_tables_the_same_events_landed_as_files_give() {
    let broker = Broker::start();
    let topic = "crm.public.customers";
    broker.create_topic(topic, 3);
    let dir = crate::example_copy("crm_kafka");
    let conf = format!("kafka_servers={}", broker.address);
    let steps = crate::repo().join("tests/run/debezium_envelopes/steps");
    for step in ["1", "2", "3", "4"] {
        let landing = steps.join(step).join("files/landing/customers");
        for file in std::fs::read_dir(&landing).expect("landing") {
            let text = std::fs::read_to_string(file.expect("file").path()).expect("read");
            for line in text.lines() {
                let (partition, key) = keyed(line);
                let value = (line != "null" && !line.contains(r#""payload":null"#))
                    .then(|| line.to_string());
                let key = key.unwrap_or_default();
                broker.produce(topic, partition, &[(key, value)]);
            }
        }
        let out = cdcflow(&[
            "run",
            "-p",
            dir.path().to_str().expect("utf-8"),
            "--conf",
            &conf,
        ]);
        assert!(
            out.status.success(),
            "step {step}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        for table in ["customers", "customers_history"] {
            let expected =
                std::fs::read_to_string(steps.join(step).join(format!("expect/{table}.csv")))
                    .expect("expected table");
            let got = query_csv(dir.path(), &format!("SELECT * FROM {table}"));
            assert_eq!(
                sorted(stdout(&got).lines().map(String::from).collect()),
                sorted(expected.lines().map(String::from).collect()),
                "step {step}: {table}"
            );
        }
    }
}

/// Debezium events (PostgreSQL-shaped, no wrapper) for `keys` customers: each created,
/// then updated, some deleted and created again; keyed by id into 3 partitions, so a
/// key's events are in one partition and keys interleave across partitions.
fn debezium_events(n: u64, keys: u64) -> Vec<Vec<(String, Option<String>)>> {
    let mut out = vec![Vec::new(); 3];
    let mut alive = vec![false; keys as usize];
    let mut lsn = 1000u64;
    for i in 0..n {
        let id = (i * 7 + i / keys) % keys;
        let prev = lsn;
        lsn += 10;
        let row = |v: u64| format!(r#"{{"id":{id},"name":"n{v}","city":"c{}"}}"#, v % 5);
        let (op, before, after) = match (alive[id as usize], i % 11 == 5) {
            (false, _) => ("c", "null".to_string(), row(i)),
            (true, true) => ("d", row(i), "null".to_string()),
            (true, false) => ("u", "null".to_string(), row(i)),
        };
        alive[id as usize] = op != "d";
        let value = format!(
            r#"{{"before":{before},"after":{after},"op":"{op}","ts_ms":{},"source":{{"ts_ms":{},"sequence":"[\"{prev}\",\"{lsn}\"]","lsn":{lsn}}}}}"#,
            1_700_000_000_000u64 + i,
            1_700_000_000_000u64 + i
        );
        let key = format!(r#"{{"id":{id}}}"#);
        let p = (id % 3) as usize;
        out[p].push((key.clone(), Some(value)));
        if op == "d" {
            out[p].push((key, None));
        }
    }
    out
}

/// The number of commits in a table's Delta log.
fn commits(dir: &Path, table: &str) -> usize {
    std::fs::read_dir(dir.join("_storage/tables").join(table).join("_delta_log"))
        .map(|r| {
            r.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                .count()
        })
        .unwrap_or(0)
}

/// Starts `cdcflow run` and kills it (SIGKILL) once `table` has more than `after`
/// commits; false when the run ended before that.
fn kill_when(dir: &Path, conf: &str, table: &str, after: usize) -> bool {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.to_str().expect("utf-8"), "--conf", conf])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run");
    loop {
        if commits(dir, table) > after {
            let _ = child.kill();
            let _ = child.wait();
            return true;
        }
        if child.try_wait().expect("wait").is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn three_partitions_and_two_kills_mid_run_give_the_tables_of_an_uninterrupted_run() {
    let broker = Broker::start();
    let topic = "crm.public.customers";
    broker.create_topic(topic, 3);
    let events = debezium_events(3000, 40);
    let total: usize = events.iter().map(Vec::len).sum();
    for (p, records) in events.iter().enumerate() {
        broker.produce(topic, p as i32, records);
    }
    let conf = format!("kafka_servers={}", broker.address);
    let limited = |dir: &Path| {
        let sql = dir.join("customers.sql");
        let text = std::fs::read_to_string(&sql).expect("sql");
        let text = text.replace(
            "startingOffsets => 'earliest'",
            "startingOffsets => 'earliest', maxOffsetsPerTrigger => 250",
        );
        std::fs::write(&sql, text).expect("sql");
    };
    let whole = crate::example_copy("crm_kafka");
    limited(whole.path());
    let out = cdcflow(&[
        "run",
        "-p",
        whole.path().to_str().expect("utf-8"),
        "--conf",
        &conf,
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));

    let killed = crate::example_copy("crm_kafka");
    limited(killed.path());
    // Killed (SIGKILL) twice mid-way through bronze's batches, then aborted between the
    // SCD type 1 commit and the SCD type 2 flow.
    assert!(
        kill_when(killed.path(), &conf, "customer_events", 3),
        "bronze finished before the kill"
    );
    let bronze = commits(killed.path(), "customer_events");
    assert!(
        kill_when(killed.path(), &conf, "customer_events", bronze + 2),
        "bronze finished before the second kill"
    );
    let died = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args([
            "run",
            "-p",
            killed.path().to_str().expect("utf-8"),
            "--conf",
            &conf,
        ])
        .env("CDCFLOW_FAILPOINT", "committed:customers")
        .output()
        .expect("run");
    assert!(stderr(&died).contains("failpoint"), "{}", stderr(&died));
    let out = cdcflow(&[
        "run",
        "-p",
        killed.path().to_str().expect("utf-8"),
        "--conf",
        &conf,
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));

    let tables = [
        "SELECT count(*), count(DISTINCT concat(partition, '/', offset)) FROM customer_events",
        "SELECT * FROM customers ORDER BY id",
        "SELECT * FROM customers_history ORDER BY id, __START_AT",
    ];
    let a = crate::snapshot(whole.path(), &tables);
    let b = crate::snapshot(killed.path(), &tables);
    assert_eq!(a, b);
    assert!(a[0].contains(&format!("{total},{total}")), "{}", a[0]);
    assert!(a[1].lines().count() > 20, "{}", a[1]);
}
