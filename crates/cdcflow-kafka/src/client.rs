//! A consumer for the brokers a `read_kafka` call names, with its `kafka.*` options: a
//! client id; a consumer group (`kafka.group.id`: committed to after each durable
//! batch, so that broker tools show the lag); `kafka.security.protocol` PLAINTEXT, SSL,
//! SASL_PLAINTEXT or SASL_SSL; TLS trusting the CAs of the PEM file
//! `kafka.ssl.truststore.location` names, else the system's; and SASL (PLAIN or SCRAM)
//! whose password comes from the environment variable `kafka.sasl.password.env` names,
//! never from a file.
//!
//! The consumer only ever reads partitions it is given (no group membership, no
//! rebalance), from offsets it is given; what it has read is recorded by the flow's
//! checkpoint, not by the broker.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cdcflow_plan::read_kafka::{self, ReadKafka};
use cdcflow_runtime::RunError;
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::metadata::Metadata;

/// How long the client tries brokers that do not answer before the read fails (the
/// client's own default is to try for ever).
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(20);

/// The group id of a read that names none (`kafka.group.id`).
pub const UNNAMED_GROUP: &str = "cdcflow";

/// The consumer of one read.
pub type KafkaConsumer = BaseConsumer<Context>;

/// Keeps the last error the client reported on its own threads (a refused password, a
/// certificate not trusted), so that a read that cannot go on says why, and sends the
/// client's log to `tracing` under the target `librdkafka`.
#[derive(Default)]
pub struct Context {
    last_error: Mutex<Option<String>>,
}

impl Context {
    /// The last error the client reported, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }
}

impl ClientContext for Context {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        // The client logs every failed attempt to reach a broker (each 50 ms at first):
        // the read's own error names the cause, so these stay at debug.
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
                tracing::warn!(target: "librdkafka", facility, "{message}")
            }
            _ => tracing::debug!(target: "librdkafka", facility, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, "{reason}");
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(format!("{error}: {reason}"));
        }
    }
}

impl ConsumerContext for Context {}

/// A consumer of the brokers of `rk` (it connects on its first request: [`metadata`]
/// says whether they answer); a relative truststore path is taken from `root`, the
/// pipeline's folder.
pub fn connect(rk: &ReadKafka, root: &Path) -> Result<KafkaConsumer, RunError> {
    let config = config(&rk.bootstrap_servers, &rk.client, root)?;
    let consumer: KafkaConsumer = config
        .create_with_context(Context::default())
        .map_err(|e| {
            RunError::input(format!("Kafka source: the client cannot be set up: {e}"))
                .with_help("check the kafka.* options of read_kafka")
        })?;
    Ok(consumer)
}

/// The cluster's topics and partitions. Asked in short waits so that an error the
/// client reports meanwhile (a refused password) ends the wait at once.
pub fn metadata(consumer: &KafkaConsumer, servers: &[String]) -> Result<Metadata, RunError> {
    let started = Instant::now();
    loop {
        let answer = consumer.fetch_metadata(None, Duration::from_secs(1));
        // The client's errors arrive through its callbacks.
        serve_callbacks(consumer);
        let reported = consumer.context().last_error();
        match answer {
            Ok(m) => return Ok(m),
            Err(e) => {
                let refused = reported.as_deref().is_some_and(is_refusal);
                if refused {
                    return Err(RunError::input(format!(
                        "Kafka source: the brokers {} refused this client: {}",
                        servers.join(", "),
                        reported.unwrap_or_default()
                    ))
                    .with_help(
                        "check kafka.sasl.username, kafka.sasl.mechanism and the password in the variable kafka.sasl.password.env names, or the TLS options (kafka.ssl.truststore.location)",
                    ));
                }
                if started.elapsed() >= GIVE_UP_AFTER {
                    let why = reported.unwrap_or_else(|| e.to_string());
                    return Err(RunError::user(
                        cdcflow_runtime::ErrorCode::SourceUnreachable,
                        format!(
                            "Kafka source: cannot reach the brokers {}: {why}",
                            servers.join(", ")
                        ),
                    )
                    .with_help(
                        "check bootstrapServers, that the brokers are up and reachable from here, and the kafka.security/ssl/sasl options",
                    ));
                }
            }
        }
    }
}

/// Serves the client's callbacks (errors, logs), which its main queue carries.
pub fn serve_callbacks(consumer: &KafkaConsumer) {
    let _ = consumer.poll(Duration::ZERO);
}

/// Errors that trying again does not mend: the broker refused the credentials or the
/// TLS handshake failed.
fn is_refusal(error: &str) -> bool {
    let e = error.to_ascii_lowercase();
    ["authentication", "ssl handshake", "certificate verify"]
        .iter()
        .any(|w| e.contains(w))
}

/// The client's configuration for a read of `servers` with the `kafka.*` options.
fn config(
    servers: &[String],
    options: &BTreeMap<String, String>,
    root: &Path,
) -> Result<ClientConfig, RunError> {
    let option = |k: &str| options.get(k).map(String::as_str);
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", servers.join(","))
        .set("client.id", option("kafka.client.id").unwrap_or("cdcflow"))
        // Offsets live in the flow's checkpoint; the group, when named, is only told.
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // Records of aborted transactions are never read; reads end at the last
        // stable offset.
        .set("isolation.level", "read_committed")
        // The end of a partition is an event, so a read knows when it has all; the
        // broker answers a fetch at the end after this long without new records (the
        // client's default, 500 ms, would be added to every read).
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "20")
        // Each partition has a queue of its own, which the client fills ahead of the
        // read up to this many KiB (its default, 64 MiB, is per partition here).
        .set("queued.max.messages.kbytes", "8192")
        // An offset the broker no longer has is an error, never a silent jump (the
        // source checks for data loss itself, failOnDataLoss).
        .set("auto.offset.reset", "error");
    // The client assigns partitions only with a group id; without one named, the
    // group is never joined and nothing is committed to it.
    c.set(
        "group.id",
        option("kafka.group.id").unwrap_or(UNNAMED_GROUP),
    );
    for (key, value) in options {
        if let Some(name) = key.strip_prefix("kafka.")
            && read_kafka::PASSED_OPTIONS.contains(&key.as_str())
        {
            c.set(name, value.trim());
        }
        if let Some((_, name)) = read_kafka::RENAMED_OPTIONS.iter().find(|(k, _)| k == key) {
            c.set(*name, value.trim());
        }
    }
    let protocol = Protocol::of(options)?;
    c.set("security.protocol", protocol.name());
    if protocol.tls {
        if let Some(location) = option("kafka.ssl.truststore.location") {
            let path = root.join(location);
            check_pem(&path)?;
            c.set("ssl.ca.location", path.to_string_lossy());
        }
        // The broker's name is checked against its certificate (the client's default
        // too; said so that it stays) unless the option is set empty, as Kafka's Java
        // client has it.
        let check = option("kafka.ssl.endpoint.identification.algorithm")
            .is_none_or(|a| !a.trim().is_empty());
        c.set(
            "ssl.endpoint.identification.algorithm",
            if check { "https" } else { "none" },
        );
    }
    if protocol.sasl {
        let (mechanism, username, password) = sasl(options)?;
        c.set("sasl.mechanism", mechanism)
            .set("sasl.username", username)
            .set("sasl.password", password);
    }
    Ok(c)
}

/// What `kafka.security.protocol` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Protocol {
    tls: bool,
    sasl: bool,
}

impl Protocol {
    fn of(options: &BTreeMap<String, String>) -> Result<Self, RunError> {
        let name = options
            .get("kafka.security.protocol")
            .map_or("PLAINTEXT".to_string(), |p| p.to_ascii_uppercase());
        let (tls, sasl) = match name.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => {
                return Err(RunError::input(format!(
                    "Kafka source: kafka.security.protocol `{other}` is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
                )));
            }
        };
        Ok(Self { tls, sasl })
    }

    fn name(self) -> &'static str {
        match (self.tls, self.sasl) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        }
    }
}

/// A truststore must be a readable PEM file holding certificates (Kafka's truststore
/// type PEM): said here, naming the file, rather than by the client's TLS library.
fn check_pem(path: &Path) -> Result<(), RunError> {
    let bad = |why: String| {
        RunError::input(format!(
            "Kafka source: kafka.ssl.truststore.location `{}` {why}",
            path.display()
        ))
        .with_help("a PEM file of the CA certificates that signed the brokers' certificates (a JKS truststore converts with `keytool -exportcert -rfc`)")
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
    match text.contains("-----BEGIN CERTIFICATE-----") {
        true => Ok(()),
        false => Err(bad("holds no certificate".into())),
    }
}

/// SASL_PLAINTEXT and SASL_SSL: the mechanism, the user, and the password from the
/// environment variable named.
fn sasl(options: &BTreeMap<String, String>) -> Result<(String, String, String), RunError> {
    let username = options
        .get("kafka.sasl.username")
        .cloned()
        .ok_or_else(|| RunError::input("Kafka source: SASL needs kafka.sasl.username"))?;
    let var = options.get("kafka.sasl.password.env").ok_or_else(|| {
        RunError::input("Kafka source: SASL needs kafka.sasl.password.env")
            .with_help("the name of an environment variable holding the password; the secret is never in the files")
    })?;
    let password = std::env::var(var).map_err(|_| {
        RunError::input(format!(
            "Kafka source: the environment variable `{var}` is not set"
        ))
        .with_help(format!("export {var}=… before running"))
    })?;
    let mechanism = options
        .get("kafka.sasl.mechanism")
        .map_or("PLAIN".to_string(), |m| m.to_ascii_uppercase());
    Ok((mechanism, username, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_protocol_says_whether_tls_and_sasl_are_used() {
        let of = |p: &str| Protocol::of(&options(&[("kafka.security.protocol", p)])).unwrap();
        assert_eq!(Protocol::of(&options(&[])).unwrap(), of("PLAINTEXT"));
        assert_eq!(of("ssl").name(), "ssl");
        assert_eq!(of("SASL_SSL").name(), "sasl_ssl");
        assert_eq!(of("SASL_PLAINTEXT").name(), "sasl_plaintext");
        assert!(Protocol::of(&options(&[("kafka.security.protocol", "TLS")])).is_err());
    }

    #[test]
    fn a_truststore_that_is_missing_or_no_pem_is_named() {
        let dir = std::env::temp_dir();
        let servers = ["b:9092".to_string()];
        let ssl = |location: &str| {
            options(&[
                ("kafka.security.protocol", "SSL"),
                ("kafka.ssl.truststore.location", location),
            ])
        };
        let e = config(&servers, &ssl("no-such-ca.pem"), &dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no-such-ca.pem") && e.contains("cannot be read"),
            "{e}"
        );
        let empty = dir.join(format!("cdcflow-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = config(&servers, &ssl(empty.to_str().unwrap()), &dir)
            .unwrap_err()
            .to_string();
        let _ = std::fs::remove_file(&empty);
        assert!(e.contains("holds no certificate"), "{e}");
        // Without a truststore, the system's CAs.
        let c = config(
            &servers,
            &options(&[("kafka.security.protocol", "SSL")]),
            &dir,
        )
        .unwrap();
        assert_eq!(c.get("security.protocol"), Some("ssl"));
        assert_eq!(c.get("ssl.ca.location"), None);
    }

    #[test]
    fn the_sasl_password_comes_from_the_variable_named() {
        let base = [
            ("kafka.sasl.username", "u"),
            (
                "kafka.sasl.password.env",
                "CDCFLOW_TEST_UNSET_KAFKA_PASSWORD",
            ),
        ];
        let e = sasl(&options(&base)).unwrap_err().to_string();
        assert!(e.contains("CDCFLOW_TEST_UNSET_KAFKA_PASSWORD"), "{e}");
        let e = sasl(&options(&base[..1])).unwrap_err().to_string();
        assert!(e.contains("kafka.sasl.password.env"), "{e}");
    }

    #[test]
    fn reads_never_commit_on_their_own_and_never_jump() {
        let c = config(
            &["a:1".into(), "b:2".into()],
            &options(&[("kafka.group.id", "g")]),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(c.get("bootstrap.servers"), Some("a:1,b:2"));
        assert_eq!(c.get("enable.auto.commit"), Some("false"));
        assert_eq!(c.get("auto.offset.reset"), Some("error"));
        assert_eq!(c.get("isolation.level"), Some("read_committed"));
        assert_eq!(c.get("group.id"), Some("g"));
    }

    #[test]
    fn java_client_options_reach_the_client_under_its_names() {
        let c = config(
            &["a:1".into()],
            &options(&[
                ("kafka.fetch.max.bytes", " 1048576"),
                ("kafka.client.rack", "eu-1a"),
                ("kafka.receive.buffer.bytes", "65536"),
                ("kafka.security.protocol", "SSL"),
                ("kafka.ssl.endpoint.identification.algorithm", ""),
            ]),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(c.get("fetch.max.bytes"), Some("1048576"));
        assert_eq!(c.get("client.rack"), Some("eu-1a"));
        assert_eq!(c.get("socket.receive.buffer.bytes"), Some("65536"));
        assert_eq!(c.get("ssl.endpoint.identification.algorithm"), Some("none"));
        assert_eq!(c.get("receive.buffer.bytes"), None);
    }
}
