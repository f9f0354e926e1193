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

use cdcflow_kafka::rskafka::chrono::Utc;
use cdcflow_kafka::rskafka::client::ClientBuilder;
use cdcflow_kafka::rskafka::client::partition::{Compression, UnknownTopicHandling};
use cdcflow_kafka::rskafka::record::Record;

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
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let produced = Instant::now();
    rt.block_on(async {
        let client = ClientBuilder::new(vec![address.clone()])
            .build()
            .await
            .expect("client");
        client
            .controller_client()
            .expect("controller")
            .create_topic("bench", 3, 1, 5_000)
            .await
            .expect("topic");
        let mut parts = Vec::new();
        for p in 0..3 {
            parts.push(
                client
                    .partition_client("bench", p, UnknownTopicHandling::Retry)
                    .await
                    .expect("partition"),
            );
        }
        let mut pending: Vec<Vec<Record>> = vec![Vec::new(), Vec::new(), Vec::new()];
        for i in 0..events {
            let (id, value) = event(i);
            let p = (id % 3) as usize;
            pending[p].push(Record {
                key: Some(format!(r#"{{"id":{id}}}"#).into_bytes()),
                value: Some(value.into_bytes()),
                headers: Default::default(),
                timestamp: Utc::now(),
            });
            if pending[p].len() == 2_000 || i + 1 == events {
                for (q, batch) in pending.iter_mut().enumerate() {
                    if !batch.is_empty() {
                        parts[q]
                            .produce(std::mem::take(batch), Compression::NoCompression)
                            .await
                            .expect("produce");
                    }
                }
            }
        }
    });
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
