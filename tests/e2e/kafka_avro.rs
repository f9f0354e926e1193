//! Avro values in Confluent's schema-registry framing (what Confluent's serializer and
//! Debezium's Avro converter write), from a real broker (tansu) through `from_avro` with
//! `schemaRegistryAddress`, into an SCD type 1 table. The registry is a stub of its REST
//! API that the test runs on loopback (`GET /schemas/ids/{id}`, Confluent's answers):
//! the registries one can install here (Confluent's, Karapace) need Kafka's JVM or
//! Python services this machine does not have.
//!
//! The producer's schema evolves mid-topic (a field added with a default); the flow's
//! reader schema reads both versions. A value that is not Avro fails the flow by default,
//! naming it; with `PERMISSIVE` it is left out. A registry that does not answer fails the
//! flow naming it, and the next run, with the registry back, reads on with nothing lost.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::kafka::Broker;
use crate::{cdcflow, query_csv, stderr, stdout};

const V1: &str = r#"{"type": "record", "name": "customer", "namespace": "crm", "fields": [
  {"name": "id", "type": "long"},
  {"name": "name", "type": "string"},
  {"name": "seq", "type": "long"}]}"#;

/// V1 and a field the producer added later, with its default.
const V2: &str = r#"{"type": "record", "name": "customer", "namespace": "crm", "fields": [
  {"name": "id", "type": "long"},
  {"name": "name", "type": "string"},
  {"name": "seq", "type": "long"},
  {"name": "tier", "type": "string", "default": "basic"}]}"#;

/// Avro's `long`: zig-zag, then 7 bits a byte, low first.
fn long(n: i64) -> Vec<u8> {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = vec![];
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
    out
}

fn string(s: &str) -> Vec<u8> {
    let mut out = long(s.len() as i64);
    out.extend_from_slice(s.as_bytes());
    out
}

/// A customer event in the registry's framing: a zero byte, the schema id (4 bytes,
/// big-endian), then the record (`tier` only in schema 2's).
fn event(schema_id: u32, id: i64, name: &str, seq: i64, tier: Option<&str>) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend(long(id));
    out.extend(string(name));
    out.extend(long(seq));
    if let Some(t) = tier {
        out.extend(string(t));
    }
    out
}

/// The stub registry: ids 1 (V1) and 2 (V2), Confluent's 404 for others; stops when
/// dropped.
struct Registry {
    address: String,
    stop: Arc<AtomicBool>,
}

impl Registry {
    fn start(port: u16) -> Registry {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("registry port");
        let address = format!("http://{}", listener.local_addr().expect("address"));
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().expect("stream"));
                let mut request = String::new();
                let _ = reader.read_line(&mut request);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let path = request.split_whitespace().nth(1).unwrap_or("");
                let (status, body) = match path {
                    "/schemas/ids/1" => ("200 OK", serde_json::json!({ "schema": V1 }).to_string()),
                    "/schemas/ids/2" => ("200 OK", serde_json::json!({ "schema": V2 }).to_string()),
                    _ => (
                        "404 Not Found",
                        r#"{"error_code":40403,"message":"Schema not found"}"#.to_string(),
                    ),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Registry { address, stop }
    }

    fn port(&self) -> u16 {
        self.address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag and closes the listener.
        let _ = std::net::TcpStream::connect(self.address.trim_start_matches("http://"));
    }
}

fn pipeline(dir: &Path, broker: &Broker, registry: &str, mode: &str) {
    std::fs::write(dir.join("pipeline.yaml"), "name: kafka_avro\n").expect("pipeline.yaml");
    std::fs::write(
        dir.join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE bronze AS
SELECT partition, offset, value
FROM STREAM read_kafka(bootstrapServers => '{}', subscribe => 'customers', startingOffsets => 'earliest');

CREATE TEMPORARY VIEW changes AS
SELECT c.id, c.name, c.tier, c.seq
FROM (SELECT from_avro(value, '{V2}', map('schemaRegistryAddress', '{registry}'{mode})) AS c
      FROM STREAM(bronze))
WHERE c IS NOT NULL;

CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(changes)
  KEYS (id)
  SEQUENCE BY seq
  STORED AS SCD TYPE 1;
",
            broker.address
        ),
    )
    .expect("flows.sql");
}

fn run(dir: &Path) -> std::process::Output {
    cdcflow(&["run", "-p", dir.to_str().expect("utf-8")])
}

fn customers(dir: &Path) -> Vec<String> {
    let out = query_csv(dir, "SELECT id, name, tier, seq FROM customers ORDER BY id");
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).lines().skip(1).map(String::from).collect()
}

fn produce(broker: &Broker, values: Vec<Vec<u8>>) {
    let records: Vec<(String, Option<Vec<u8>>)> = values
        .into_iter()
        .map(|v| ("k".to_string(), Some(v)))
        .collect();
    broker.produce_bytes("customers", 0, &records);
}

#[test]
fn registry_framed_avro_of_an_evolving_schema_folds_into_scd1() {
    let broker = Broker::start();
    broker.create_topic("customers", 1);
    let registry = Registry::start(0);
    // Written with schema 1, then with schema 2 (which adds `tier`).
    produce(
        &broker,
        vec![
            event(1, 1, "ada", 1, None),
            event(1, 2, "bob", 2, None),
            event(2, 1, "ada l.", 3, Some("gold")),
            event(2, 3, "cy", 4, Some("silver")),
        ],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    pipeline(p, &broker, &registry.address, "");
    let out = run(p);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // bob was written before `tier` existed: the reader schema's default.
    assert_eq!(
        customers(p),
        ["1,ada l.,gold,3", "2,bob,basic,2", "3,cy,silver,4"]
    );

    // A value that is not in the registry's framing fails the flow by default, naming it,
    // and commits nothing of the batch; nothing is lost once the flow leaves it out.
    produce(
        &broker,
        vec![event(1, 2, "bob b.", 5, None), b"not avro".to_vec()],
    );
    let out = run(p);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("value 2 of the batch (`not avro`, 8 bytes) is not an Avro record")
            && said.contains("schema registry's framing"),
        "{said}"
    );
    assert_eq!(
        customers(p),
        ["1,ada l.,gold,3", "2,bob,basic,2", "3,cy,silver,4"]
    );
    pipeline(p, &broker, &registry.address, ", 'mode', 'PERMISSIVE'");
    let out = run(p);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        customers(p),
        ["1,ada l.,gold,3", "2,bob b.,basic,5", "3,cy,silver,4"]
    );

    // The registry goes away: the flow fails naming it (the run's new process must ask
    // it), then reads on once it is back.
    let port = registry.port();
    drop(registry);
    produce(&broker, vec![event(2, 4, "dee", 6, Some("gold"))]);
    let out = run(p);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "the schema registry at http://127.0.0.1:{port} did not give schema id 2"
        )),
        "{said}"
    );
    let registry = Registry::start(port);
    let out = run(p);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        customers(p),
        [
            "1,ada l.,gold,3",
            "2,bob b.,basic,5",
            "3,cy,silver,4",
            "4,dee,gold,6"
        ]
    );
    drop(registry);
}
