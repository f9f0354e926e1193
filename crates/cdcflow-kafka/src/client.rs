//! A client for the brokers a `read_kafka` call names, with its `kafka.*` options: a
//! client id, and SASL (PLAIN or SCRAM) whose password comes from the environment
//! variable `kafka.sasl.password.env` names, never from a file.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::time::Duration;

use cdcflow_plan::read_kafka::ReadKafka;
use cdcflow_runtime::RunError;
use rskafka::BackoffConfig;
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};

/// How long the client retries a broker that does not answer before the read fails
/// (the client's own default is to retry for ever).
const GIVE_UP_AFTER: Duration = Duration::from_secs(20);

/// Connects to the brokers of `rk`.
pub async fn connect(rk: &ReadKafka) -> Result<Client, RunError> {
    let mut builder =
        ClientBuilder::new(rk.bootstrap_servers.clone()).backoff_config(BackoffConfig {
            deadline: Some(GIVE_UP_AFTER),
            ..BackoffConfig::default()
        });
    let option = |k: &str| rk.client.get(k).map(String::as_str);
    builder = builder.client_id(option("kafka.client.id").unwrap_or("cdcflow"));
    if let Some(sasl) = sasl(&rk.client)? {
        builder = builder.sasl_config(sasl);
    }
    builder.build().await.map_err(|e| {
        RunError::input(format!(
            "Kafka source: cannot reach the brokers {}: {e}",
            rk.bootstrap_servers.join(", ")
        ))
        .with_help("check bootstrapServers and that the brokers are up and reachable from here")
    })
}

fn sasl(options: &BTreeMap<String, String>) -> Result<Option<SaslConfig>, RunError> {
    let protocol = options
        .get("kafka.security.protocol")
        .map(|p| p.to_ascii_uppercase());
    if protocol.as_deref() != Some("SASL_PLAINTEXT") {
        return Ok(None);
    }
    let username = options
        .get("kafka.sasl.username")
        .cloned()
        .ok_or_else(|| RunError::input("Kafka source: SASL_PLAINTEXT needs kafka.sasl.username"))?;
    let var = options.get("kafka.sasl.password.env").ok_or_else(|| {
        RunError::input("Kafka source: SASL_PLAINTEXT needs kafka.sasl.password.env")
            .with_help("the name of an environment variable holding the password; the secret is never in the files")
    })?;
    let password = std::env::var(var).map_err(|_| {
        RunError::input(format!(
            "Kafka source: the environment variable `{var}` is not set"
        ))
        .with_help(format!("export {var}=… before running"))
    })?;
    let credentials = Credentials::new(username, password);
    let mechanism = options
        .get("kafka.sasl.mechanism")
        .map_or("PLAIN".to_string(), |m| m.to_ascii_uppercase());
    Ok(Some(match mechanism.as_str() {
        "SCRAM-SHA-256" => SaslConfig::ScramSha256(credentials),
        "SCRAM-SHA-512" => SaslConfig::ScramSha512(credentials),
        _ => SaslConfig::Plain(credentials),
    }))
}
