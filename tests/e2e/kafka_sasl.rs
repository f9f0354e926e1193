//! `read_kafka` with SASL (`kafka.security.protocol` SASL_PLAINTEXT): PLAIN,
//! SCRAM-SHA-256 and SCRAM-SHA-512 logins checked against a user and password, and a
//! wrong password refused. tansu 0.6's own SASL answers no mechanism it shares with a
//! client, so the server side of the login is a proxy this test runs in front of tansu:
//! it answers the SaslHandshake and SaslAuthenticate requests itself (SCRAM as RFC 5802
//! says, salted with PBKDF2), then passes the connection through. Connections that do
//! not log in (the test's own producer) are passed through from their first request.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::kafka::{Broker, assert_read_secure, free_port, produce_secure};
use crate::{query_csv, stderr, stdout};

const USER: &str = "cdcflow";
const PASSWORD: &str = "s3cret-of-the-test";
const ITERATIONS: u32 = 4096;
const SALT: &[u8] = b"cdcflow test salt";

const API_VERSIONS: i16 = 18;
const SASL_HANDSHAKE: i16 = 17;
const SASL_AUTHENTICATE: i16 = 36;
/// Kafka's SASL_AUTHENTICATION_FAILED and UNSUPPORTED_SASL_MECHANISM.
const AUTHENTICATION_FAILED: i16 = 58;
const UNSUPPORTED_MECHANISM: i16 = 33;

/// A proxy that logs clients in before passing them to the broker.
struct SaslProxy {
    _rt: tokio::runtime::Runtime,
    /// Logins that succeeded, and refused ones.
    logins: Arc<AtomicUsize>,
    refusals: Arc<AtomicUsize>,
}

impl SaslProxy {
    fn start(listen: &str, upstream: &str) -> SaslProxy {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = rt
            .block_on(TcpListener::bind(listen))
            .expect("proxy listens");
        let (logins, refusals) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let counts = (Arc::clone(&logins), Arc::clone(&refusals));
        let upstream = upstream.to_string();
        rt.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let counts = (Arc::clone(&counts.0), Arc::clone(&counts.1));
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        serve(client, server, counts).await;
                    }
                });
            }
        });
        SaslProxy {
            _rt: rt,
            logins,
            refusals,
        }
    }
}

async fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let len = s.read_i32().await.ok()?;
    let mut frame = vec![0; usize::try_from(len).ok()?];
    s.read_exact(&mut frame).await.ok()?;
    Some(frame)
}

async fn write_frame(s: &mut TcpStream, body: &[u8]) -> Option<()> {
    s.write_i32(i32::try_from(body.len()).ok()?).await.ok()?;
    s.write_all(body).await.ok()
}

/// A request's key, correlation id and body (request header v1: the SASL requests'
/// versions 0 and 1, the only ones librdkafka sends).
fn request(frame: &[u8]) -> (i16, i32, &[u8]) {
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let client_id = i16::from_be_bytes([frame[8], frame[9]]);
    let body = 10 + usize::try_from(client_id).unwrap_or(0);
    (key, correlation, &frame[body.min(frame.len())..])
}

fn string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.extend((s.len() as i16).to_be_bytes());
            out.extend(s.as_bytes());
        }
        None => out.extend((-1i16).to_be_bytes()),
    }
}

/// SaslAuthenticate's answer (versions 0 and 1 alike but for the session lifetime).
fn authenticate_answer(
    correlation: i32,
    version: i16,
    error: Option<&str>,
    bytes: &[u8],
) -> Vec<u8> {
    let mut out = correlation.to_be_bytes().to_vec();
    let code = if error.is_some() {
        AUTHENTICATION_FAILED
    } else {
        0
    };
    out.extend(code.to_be_bytes());
    string(&mut out, error);
    out.extend((bytes.len() as i32).to_be_bytes());
    out.extend(bytes);
    if version >= 1 {
        out.extend(0i64.to_be_bytes());
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mechanism {
    Plain,
    Scram256,
    Scram512,
}

impl Mechanism {
    fn of(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "SCRAM-SHA-256" => Some(Mechanism::Scram256),
            "SCRAM-SHA-512" => Some(Mechanism::Scram512),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram256 => "SCRAM-SHA-256",
            Mechanism::Scram512 => "SCRAM-SHA-512",
        }
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Scram512 => {
                let mut m = Hmac::<Sha512>::new_from_slice(key).expect("hmac key");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            _ => {
                let mut m = Hmac::<Sha256>::new_from_slice(key).expect("hmac key");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Scram512 => Sha512::digest(data).to_vec(),
            _ => Sha256::digest(data).to_vec(),
        }
    }

    /// PBKDF2 of the password, one block long (the hash's length), as SCRAM's Hi().
    fn salted_password(self, password: &[u8]) -> Vec<u8> {
        let mut u = self.mac(password, &[SALT, &1u32.to_be_bytes()].concat());
        let mut out = u.clone();
        for _ in 1..ITERATIONS {
            u = self.mac(password, &u);
            out.iter_mut().zip(&u).for_each(|(o, x)| *o ^= x);
        }
        out
    }
}

/// What a SCRAM login holds between its two messages.
struct ScramFirst {
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// Logs the client in (or refuses it), then passes the connection through.
async fn serve(
    mut client: TcpStream,
    mut server: TcpStream,
    counts: (Arc<AtomicUsize>, Arc<AtomicUsize>),
) {
    let (logins, refusals) = counts;
    let mut mechanism = None;
    let mut first: Option<ScramFirst> = None;
    loop {
        let Some(frame) = read_frame(&mut client).await else {
            return;
        };
        let (key, correlation, body) = request(&frame);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        match key {
            API_VERSIONS => {
                let answered = async {
                    write_frame(&mut server, &frame).await?;
                    let answer = read_frame(&mut server).await?;
                    write_frame(&mut client, &answer).await
                };
                if answered.await.is_none() {
                    return;
                }
            }
            SASL_HANDSHAKE => {
                let len = usize::try_from(i16::from_be_bytes([body[0], body[1]])).unwrap_or(0);
                let name = String::from_utf8_lossy(&body[2..2 + len]).to_string();
                mechanism = Mechanism::of(&name);
                let mut out = correlation.to_be_bytes().to_vec();
                let code = if mechanism.is_some() {
                    0
                } else {
                    UNSUPPORTED_MECHANISM
                };
                out.extend(code.to_be_bytes());
                out.extend(3i32.to_be_bytes());
                for m in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
                    string(&mut out, Some(m));
                }
                if write_frame(&mut client, &out).await.is_none() || mechanism.is_none() {
                    return;
                }
            }
            SASL_AUTHENTICATE => {
                let len = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                let bytes = &body[4..4 + usize::try_from(len).unwrap_or(0)];
                let message = String::from_utf8_lossy(bytes).to_string();
                let Some(m) = mechanism else { return };
                let step = match (m, first.take()) {
                    (Mechanism::Plain, _) => {
                        let parts: Vec<&str> = message.split('\0').collect();
                        Step::Done(
                            parts.len() == 3 && parts[1] == USER && parts[2] == PASSWORD,
                            Vec::new(),
                        )
                    }
                    (_, None) => {
                        let bare = message.splitn(3, ',').nth(2).unwrap_or("").to_string();
                        let user_ok = bare.split(',').any(|a| a == format!("n={USER}"));
                        let client_nonce = bare
                            .split(',')
                            .find_map(|a| a.strip_prefix("r="))
                            .unwrap_or("");
                        let nonce = format!("{client_nonce}proxy-nonce-{}", free_port());
                        let server_first =
                            format!("r={nonce},s={},i={ITERATIONS}", BASE64.encode(SALT));
                        match user_ok {
                            true => {
                                first = Some(ScramFirst {
                                    client_first_bare: bare,
                                    server_first: server_first.clone(),
                                    nonce,
                                });
                                Step::Challenge(server_first.into_bytes())
                            }
                            false => Step::Done(false, Vec::new()),
                        }
                    }
                    (_, Some(f)) => {
                        let (without_proof, proof) =
                            message.rsplit_once(",p=").unwrap_or((&message, ""));
                        let nonce_ok = without_proof
                            .split(',')
                            .any(|a| a == format!("r={}", f.nonce));
                        let auth =
                            format!("{},{},{without_proof}", f.client_first_bare, f.server_first);
                        let salted = m.salted_password(PASSWORD.as_bytes());
                        let stored_key = m.hash(&m.mac(&salted, b"Client Key"));
                        let signature = m.mac(&stored_key, auth.as_bytes());
                        let client_key: Vec<u8> = BASE64
                            .decode(proof)
                            .unwrap_or_default()
                            .iter()
                            .zip(&signature)
                            .map(|(p, s)| p ^ s)
                            .collect();
                        let ok = nonce_ok && m.hash(&client_key) == stored_key;
                        let server_key = m.mac(&salted, b"Server Key");
                        let verifier =
                            format!("v={}", BASE64.encode(m.mac(&server_key, auth.as_bytes())));
                        Step::Done(ok, verifier.into_bytes())
                    }
                };
                match step {
                    Step::Challenge(bytes) => {
                        let answer = authenticate_answer(correlation, version, None, &bytes);
                        if write_frame(&mut client, &answer).await.is_none() {
                            return;
                        }
                    }
                    Step::Done(true, bytes) => {
                        logins.fetch_add(1, Ordering::SeqCst);
                        let answer = authenticate_answer(correlation, version, None, &bytes);
                        if write_frame(&mut client, &answer).await.is_none() {
                            return;
                        }
                        break;
                    }
                    Step::Done(false, _) => {
                        refusals.fetch_add(1, Ordering::SeqCst);
                        let why = format!(
                            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                            m.name()
                        );
                        let answer = authenticate_answer(correlation, version, Some(&why), &[]);
                        let _ = write_frame(&mut client, &answer).await;
                        return;
                    }
                }
            }
            _ => {
                // A client that does not log in: passed through from here.
                if write_frame(&mut server, &frame).await.is_none() {
                    return;
                }
                break;
            }
        }
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

enum Step {
    Challenge(Vec<u8>),
    Done(bool, Vec<u8>),
}

/// A broker behind the SASL proxy with 5 records in topic `secure`.
fn sasl_broker() -> (Broker, SaslProxy) {
    let (port, proxy_port) = (free_port(), free_port());
    let broker_address = format!("127.0.0.1:{port}");
    let proxy_address = format!("127.0.0.1:{proxy_port}");
    let proxy = SaslProxy::start(&proxy_address, &broker_address);
    let broker = Broker::start_advertising(&broker_address, &proxy_address);
    produce_secure(&broker);
    assert_eq!(
        proxy.logins.load(Ordering::SeqCst),
        0,
        "the test's own client does not log in"
    );
    (broker, proxy)
}

/// A pipeline folder reading `secure` into bronze, logging in with `mechanism`.
fn pipeline(dir: &Path, broker: &Broker, mechanism: &str) -> std::path::PathBuf {
    let p = dir.join(mechanism);
    std::fs::create_dir_all(&p).expect("pipeline dir");
    std::fs::write(p.join("pipeline.yaml"), "name: kafka_sasl\n").expect("yaml");
    std::fs::write(
        p.join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE bronze AS
SELECT CAST(value AS STRING) AS v, offset FROM STREAM read_kafka(bootstrapServers => '{}', subscribe => 'secure', startingOffsets => 'earliest', `kafka.security.protocol` => 'SASL_PLAINTEXT', `kafka.sasl.mechanism` => '{mechanism}', `kafka.sasl.username` => '{USER}', `kafka.sasl.password.env` => 'CDCFLOW_TEST_KAFKA_PASSWORD');\n",
            broker.address
        ),
    )
    .expect("flows.sql");
    p
}

fn run(pipeline: &Path, password: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", pipeline.to_str().expect("utf-8")])
        .env("CDCFLOW_TEST_KAFKA_PASSWORD", password)
        .output()
        .expect("run")
}

#[test]
fn sasl_plain_and_scram_log_in_with_the_password_of_the_variable_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, proxy) = sasl_broker();
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let before = proxy.logins.load(Ordering::SeqCst);
        let p = pipeline(dir.path(), &broker, mechanism);
        let out = run(&p, PASSWORD);
        assert!(
            out.status.success(),
            "{mechanism}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert!(
            stdout(&out).contains("read 5"),
            "{mechanism}: {}",
            stdout(&out)
        );
        assert!(
            proxy.logins.load(Ordering::SeqCst) > before,
            "{mechanism}: cdcflow did not log in"
        );
        assert_read_secure(&p);
    }
    assert_eq!(proxy.refusals.load(Ordering::SeqCst), 0);
}

#[test]
fn a_refused_password_fails_the_run_with_the_brokers_answer_and_commits_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, proxy) = sasl_broker();
    for mechanism in ["PLAIN", "SCRAM-SHA-256"] {
        let p = pipeline(dir.path(), &broker, mechanism);
        let out = run(&p, "not the password");
        assert!(!out.status.success(), "{mechanism}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(
            err.contains("refused this client") && err.contains("Authentication failed"),
            "{mechanism}: {err}"
        );
        assert!(
            !err.contains("not the password"),
            "the password leaked: {err}"
        );
        let got = query_csv(&p, "SELECT count(*) FROM bronze");
        assert!(
            !got.status.success() || stdout(&got).contains("\n0"),
            "{mechanism}: {}",
            stdout(&got)
        );
    }
    assert!(proxy.refusals.load(Ordering::SeqCst) >= 2);
    assert_eq!(proxy.logins.load(Ordering::SeqCst), 0);
}
