//! `read_kafka` over TLS (`kafka.security.protocol` SSL), against a real TLS endpoint: a
//! proxy this test runs in front of a tansu broker (tansu 0.6 has no TLS listener of its
//! own) with a CA and a certificate for `localhost` made by `openssl` for the test. The
//! proxy terminates TLS for connections that open with a TLS handshake and passes the
//! others through, so the test's own plain client produces through the same address
//! the broker advertises. SASL logins are kafka_sasl.rs's; here only that SASL_SSL
//! takes its password from the variable named.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::kafka::{Broker, assert_read_secure, free_port, produce_secure};
use crate::{cdcflow, stderr, stdout};

/// Runs `openssl` with `args` in `dir`; fails the test naming what did not work.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("these tests need the openssl command to make a test CA");
    assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
}

/// A CA (`ca.pem`) and a certificate it signed for `localhost` and 127.0.0.1
/// (`server.pem`, `server.key`), in `dir`.
fn make_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec![
        "req", "-x509", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
    ];
    ca.extend(ec);
    ca.extend([
        "-subj",
        "/CN=cdcflow test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-keyout", "server.key", "-out", "server.csr"];
    csr.extend(ec);
    csr.extend(["-subj", "/CN=localhost"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("server.ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

/// The proxy: listening on `listen`, forwarding to `upstream`; counts the TLS sessions
/// it terminated. Stops with its runtime.
struct TlsProxy {
    _rt: tokio::runtime::Runtime,
    tls_sessions: Arc<AtomicUsize>,
}

impl TlsProxy {
    fn start(certs: &Path, listen: &str, upstream: &str) -> TlsProxy {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(certs.join("server.pem"))
                .expect("server.pem")
                .collect::<Result<_, _>>()
                .expect("certificates");
        let key = PrivateKeyDer::from_pem_file(certs.join("server.key")).expect("server.key");
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server certificate");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = rt
            .block_on(TcpListener::bind(listen))
            .expect("proxy listens");
        let tls_sessions = Arc::new(AtomicUsize::new(0));
        let (sessions, upstream) = (Arc::clone(&tls_sessions), upstream.to_string());
        rt.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
                let sessions = Arc::clone(&sessions);
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let mut first = [0u8; 1];
                    // 0x16 opens a TLS handshake; a Kafka request opens with its length,
                    // whose first byte is that large only past 350 MB.
                    if client.peek(&mut first).await.is_ok() && first[0] == 0x16 {
                        if let Ok(mut tls) = acceptor.accept(client).await {
                            sessions.fetch_add(1, Ordering::SeqCst);
                            let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                        }
                    } else {
                        let mut client = client;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        TlsProxy {
            _rt: rt,
            tls_sessions,
        }
    }
}

/// A broker behind the TLS proxy, with 5 records in topic `secure`, and a pipeline
/// folder `p` holding the CA as `ca.pem`.
fn secure_broker(dir: &Path) -> (Broker, TlsProxy) {
    make_certificates(dir);
    let (port, proxy_port) = (free_port(), free_port());
    let broker_address = format!("127.0.0.1:{port}");
    let proxy = TlsProxy::start(dir, &format!("127.0.0.1:{proxy_port}"), &broker_address);
    let broker = Broker::start_advertising(&broker_address, &format!("localhost:{proxy_port}"));
    produce_secure(&broker);
    assert_eq!(
        proxy.tls_sessions.load(Ordering::SeqCst),
        0,
        "the test's own client is plain"
    );
    let pipeline = dir.join("p");
    std::fs::create_dir_all(&pipeline).expect("pipeline dir");
    std::fs::copy(dir.join("ca.pem"), pipeline.join("ca.pem")).expect("ca.pem");
    std::fs::write(pipeline.join("pipeline.yaml"), "name: kafka_tls\n").expect("yaml");
    (broker, proxy)
}

/// The bronze table of `secure`, with these client options.
fn flows(broker: &Broker, options: &str) -> String {
    format!(
        "CREATE OR REFRESH STREAMING TABLE bronze AS
SELECT CAST(value AS STRING) AS v, offset FROM STREAM read_kafka(bootstrapServers => '{}', subscribe => 'secure', startingOffsets => 'earliest', {options});\n",
        broker.address
    )
}

#[test]
fn sasl_ssl_takes_its_password_from_the_variable_named_and_fails_naming_it_when_unset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, _proxy) = secure_broker(dir.path());
    let pipeline = dir.path().join("p");
    std::fs::write(
        pipeline.join("flows.sql"),
        flows(&broker, "`kafka.security.protocol` => 'SASL_SSL', `kafka.ssl.truststore.location` => 'ca.pem', `kafka.sasl.mechanism` => 'SCRAM-SHA-256', `kafka.sasl.username` => 'cdcflow', `kafka.sasl.password.env` => 'CDCFLOW_TEST_KAFKA_PASSWORD'"),
    )
    .expect("flows.sql");
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", pipeline.to_str().expect("utf-8")])
        .env_remove("CDCFLOW_TEST_KAFKA_PASSWORD")
        .output()
        .expect("run");
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("the environment variable `CDCFLOW_TEST_KAFKA_PASSWORD` is not set"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn ssl_reads_through_a_tls_endpoint_verified_against_the_truststore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, proxy) = secure_broker(dir.path());
    let pipeline = dir.path().join("p");
    // Trusting the test's CA (a path relative to the pipeline folder): read over TLS.
    std::fs::write(
        pipeline.join("flows.sql"),
        flows(&broker, "`kafka.security.protocol` => 'SSL', `kafka.ssl.truststore.location` => 'ca.pem', `kafka.ssl.truststore.type` => 'PEM'"),
    )
    .expect("flows.sql");
    let out = cdcflow(&["run", "-p", pipeline.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("read 5"), "{}", stdout(&out));
    assert!(
        proxy.tls_sessions.load(Ordering::SeqCst) > 0,
        "cdcflow did not read over TLS"
    );
    assert_read_secure(&pipeline);
}
