//! A client for the brokers a `read_kafka` call names, with its `kafka.*` options: a
//! client id; `kafka.security.protocol` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; TLS
//! through rustls (ring, already in the build) trusting the CAs of the PEM file
//! `kafka.ssl.truststore.location` names, else Mozilla's (webpki-roots); and SASL (PLAIN
//! or SCRAM) whose password comes from the environment variable
//! `kafka.sasl.password.env` names, never from a file.

// The runtime's interface returns its own error type, whatever its size.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cdcflow_plan::read_kafka::ReadKafka;
use cdcflow_runtime::RunError;
use rskafka::BackoffConfig;
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

/// How long the client retries a broker that does not answer before the read fails
/// (the client's own default is to retry for ever).
const GIVE_UP_AFTER: Duration = Duration::from_secs(20);

/// Connects to the brokers of `rk`; a relative truststore path is taken from `root`,
/// the pipeline's folder.
pub async fn connect(rk: &ReadKafka, root: &Path) -> Result<Client, RunError> {
    let mut builder =
        ClientBuilder::new(rk.bootstrap_servers.clone()).backoff_config(BackoffConfig {
            deadline: Some(GIVE_UP_AFTER),
            ..BackoffConfig::default()
        });
    let option = |k: &str| rk.client.get(k).map(String::as_str);
    builder = builder.client_id(option("kafka.client.id").unwrap_or("cdcflow"));
    let protocol = Protocol::of(&rk.client)?;
    if protocol.sasl {
        builder = builder.sasl_config(sasl(&rk.client)?);
    }
    if protocol.tls {
        builder = builder.tls_config(Arc::new(tls_config(&rk.client, root)?));
    }
    builder.build().await.map_err(|e| {
        RunError::input(format!(
            "Kafka source: cannot reach the brokers {}: {e}",
            rk.bootstrap_servers.join(", ")
        ))
        .with_help("check bootstrapServers and that the brokers are up and reachable from here")
    })
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
}

/// The rustls configuration of SSL and SASL_SSL: the server's certificate verified
/// against the truststore's CAs (else Mozilla's), its name against the broker's host.
fn tls_config(options: &BTreeMap<String, String>, root: &Path) -> Result<ClientConfig, RunError> {
    let mut roots = RootCertStore::empty();
    match options.get("kafka.ssl.truststore.location") {
        Some(location) => {
            let path = root.join(location);
            for cert in read_pem(&path)? {
                roots.add(cert).map_err(|e| {
                    RunError::input(format!(
                        "Kafka source: kafka.ssl.truststore.location `{}`: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| RunError::input(format!("Kafka source: TLS cannot be set up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The certificates of a PEM file (Kafka's truststore type PEM).
fn read_pem(path: &Path) -> Result<Vec<CertificateDer<'static>>, RunError> {
    let bad = |why: String| {
        RunError::input(format!(
            "Kafka source: kafka.ssl.truststore.location `{}` {why}",
            path.display()
        ))
        .with_help("a PEM file of the CA certificates that signed the brokers' certificates (a JKS truststore converts with `keytool -exportcert -rfc`)")
    };
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(format!("cannot be read: {e}")))?
        .collect();
    let certs = certs.map_err(|e| bad(format!("is not a PEM file of certificates: {e}")))?;
    match certs.is_empty() {
        true => Err(bad("holds no certificate".into())),
        false => Ok(certs),
    }
}

/// SASL_PLAINTEXT and SASL_SSL: the mechanism, the user, and the password from the
/// environment variable named.
fn sasl(options: &BTreeMap<String, String>) -> Result<SaslConfig, RunError> {
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
    let credentials = Credentials::new(username, password);
    let mechanism = options
        .get("kafka.sasl.mechanism")
        .map_or("PLAIN".to_string(), |m| m.to_ascii_uppercase());
    Ok(match mechanism.as_str() {
        "SCRAM-SHA-256" => SaslConfig::ScramSha256(credentials),
        "SCRAM-SHA-512" => SaslConfig::ScramSha512(credentials),
        _ => SaslConfig::Plain(credentials),
    })
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
        assert_eq!(
            of("ssl"),
            Protocol {
                tls: true,
                sasl: false
            }
        );
        assert_eq!(
            of("SASL_SSL"),
            Protocol {
                tls: true,
                sasl: true
            }
        );
        assert_eq!(
            of("SASL_PLAINTEXT"),
            Protocol {
                tls: false,
                sasl: true
            }
        );
        assert!(Protocol::of(&options(&[("kafka.security.protocol", "TLS")])).is_err());
    }

    #[test]
    fn a_truststore_that_is_missing_or_no_pem_is_named() {
        let dir = std::env::temp_dir();
        let missing = options(&[("kafka.ssl.truststore.location", "no-such-ca.pem")]);
        let e = tls_config(&missing, &dir).unwrap_err().to_string();
        assert!(
            e.contains("no-such-ca.pem") && e.contains("cannot be read"),
            "{e}"
        );
        let empty = dir.join(format!("cdcflow-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = tls_config(
            &options(&[("kafka.ssl.truststore.location", empty.to_str().unwrap())]),
            &dir,
        )
        .unwrap_err()
        .to_string();
        let _ = std::fs::remove_file(&empty);
        assert!(e.contains("holds no certificate"), "{e}");
        // Without a truststore, Mozilla's CAs.
        assert!(tls_config(&options(&[]), &dir).is_ok());
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
}
