//! Kafka to SCD type 1 throughput (a benchmark, not a test): Debezium events
//! (PostgreSQL-shaped, 1e6 by default, over 100,000 keys, keyed into 3 partitions) are
//! produced to a tansu broker on loopback (`.ci/kafka` installs it; `CDCFLOW_TANSU` names
//! another), then one `cdcflow run` of a Kafka → bronze → SCD type 1 pipeline reads them
//! all. Prints the run's time and messages per second; docs/benchmarks.md keeps figures.
//!
//! ```text
//! cargo bench --locked -p cdcflow-cli --bench kafka_debezium
//! CDCFLOW_KAFKA_BENCH_EVENTS=100000 cargo bench --locked -p cdcflow-cli --bench kafka_debezium
//! ```

// A benchmark may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation
)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cdcflow_kafka::rdkafka::ClientConfig;
use cdcflow_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use cdcflow_kafka::rdkafka::client::DefaultClientContext;
use cdcflow_kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use cdcflow_kafka::rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const KEYS: u64 = 100_000;

fn tansu() -> PathBuf {
    std::env::var_os("CDCFLOW_TANSU")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache/cdcflow/tools/tansu-0.6.0/bin/tansu")
        })
}

fn event(i: u64) -> (u64, String) {
    let id = (i * 7_919) % KEYS;
    let op = if i < KEYS { "c" } else { "u" };
    let lsn = 1_000 + i * 10;
    let value = format!(
        r#"{{"before":null,"after":{{"id":{id},"name":"customer {i}","city":"city {}","balance":{}}},"op":"{op}","ts_ms":{},"source":{{"connector":"postgresql","ts_ms":{},"sequence":"[\"{}\",\"{lsn}\"]","lsn":{lsn}}}}}"#,
        i % 97,
        i % 10_000,
        1_700_000_000_000u64 + i,
        1_700_000_000_000u64 + i,
        lsn - 10
    );
    (id, value)
}

fn main() {
    let events: u64 = std::env::var("CDCFLOW_KAFKA_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let url = format!("tcp://{address}");
    let mut broker = Command::new(tansu())
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .args(["--storage-engine", "memory://tansu/"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tansu (bash .ci/kafka installs it)");
    while TcpStream::connect(&address).is_err() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let produced = Instant::now();
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &address);
    let admin: AdminClient<DefaultClientContext> = config.create().expect("admin");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let created = rt
        .block_on(admin.create_topics(
            &[NewTopic::new("bench", 3, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        ))
        .expect("topic");
    for r in created {
        r.expect("topic");
    }
    // Record batches of up to 2,000 records, as a capture tool's producer sends them.
    let producer: BaseProducer = config
        .clone()
        .set("linger.ms", "20")
        .set("batch.num.messages", "2000")
        .set("queue.buffering.max.messages", "200000")
        .create()
        .expect("producer");
    for i in 0..events {
        let (id, value) = event(i);
        let key = format!(r#"{{"id":{id}}}"#);
        let mut record = BaseRecord::to("bench")
            .partition((id % 3) as i32)
            .key(&key)
            .payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    producer.poll(Duration::from_millis(10));
                    record = r;
                }
                Err((e, _)) => panic!("produce: {e}"),
            }
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    eprintln!(
        "produced {events} events in {:.1} s",
        produced.elapsed().as_secs_f64()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pipeline.yaml"), "name: kafka_bench\n").expect("yaml");
    std::fs::write(
        dir.path().join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE events AS
SELECT CAST(key AS STRING) AS key, CAST(value AS STRING) AS value, partition, offset
FROM STREAM read_kafka(bootstrapServers => '{address}', subscribe => 'bench', startingOffsets => 'earliest');
CREATE TEMPORARY VIEW changes AS
SELECT e.id AS id, e.name AS name, e.city AS city, e.balance AS balance, e._op AS op, e._position AS position
FROM (SELECT debezium(value, 'id BIGINT, name STRING, city STRING, balance BIGINT', key) AS e FROM STREAM(events))
WHERE e IS NOT NULL;
CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(changes)
  KEYS (id) APPLY AS DELETE WHEN op = 'd' SEQUENCE BY position
  COLUMNS * EXCEPT (op, position) STORED AS SCD TYPE 1;
"
        ),
    )
    .expect("flows.sql");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.path().to_str().expect("utf-8")])
        .output()
        .expect("run");
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));
    println!(
        "kafka -> bronze -> SCD1: {events} events in {seconds:.1} s = {:.0} messages/s",
        events as f64 / seconds
    );
    let _ = broker.kill();
    let _ = broker.wait();
}
