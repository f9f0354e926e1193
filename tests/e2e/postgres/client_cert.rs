//! TLS client certificates (`sslcert:`/`sslcert_env:` with `sslkey:`/`sslkey_env:`),
//! against the local server as `bash .ci/postgres` sets it up: the role `cdcflow_cert`
//! logs in only over TLS with a certificate of the test CA (`hostssl … cert`), and that
//! certificate with its key is in CDCFLOW_PG_CLIENT_CERTS (~/.cache/cdcflow/pg-client-cert).
//! Both connections of a run must present it: the SQL one for the snapshot, the
//! replication one for the slot and the stream.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::{Db, query};
use crate::{stderr, stdout};

/// Where `.ci/postgres` left the client certificate and its key.
fn certs() -> PathBuf {
    let dir = std::env::var("CDCFLOW_PG_CLIENT_CERTS").map_or_else(
        |_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/cdcflow/pg-client-cert")
        },
        PathBuf::from,
    );
    assert!(
        dir.join("client.pem").is_file() && dir.join("client.key").is_file(),
        "the client-certificate test needs the server set up by `bash .ci/postgres` (role cdcflow_cert, certificates in {})",
        dir.display()
    );
    dir
}

/// A pipeline named after `db` and `case`, reading `customers` of `db` as
/// `cdcflow_cert` over TLS, with `tls` (YAML lines) on the connection.
fn pipeline(dir: &Path, db: &Db, case: &str, tls: &str) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: {}_{}\nconnections:\n  src:\n    kind: postgres\n    host: {}\n    port: {}\n    database: {}\n    user: cdcflow_cert\n    sslmode: require\n{tls}",
            db.name,
            case,
            db.admin.host,
            db.admin.port,
            db.name
        ),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_postgres(connection => 'src', table => 'public.customers', schema => 'id INT NOT NULL, name STRING');
",
    )
    .expect("flows.sql");
}

fn run(dir: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.to_str().expect("utf-8")])
        .envs(env.iter().copied())
        .output()
        .expect("run")
}

fn ok(out: &Output) -> Result<(), String> {
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("{}{}", stdout(out), stderr(out))),
    }
}

fn rows(dir: &Path) -> Vec<String> {
    query(dir, "SELECT id, name FROM customers_changes ORDER BY id")
}

#[test]
fn a_client_certificate_from_a_file_or_the_environment_logs_both_connections_in() {
    let certs = certs();
    let db = Db::create("client_cert");
    db.exec("CREATE TABLE customers (id int PRIMARY KEY, name text); INSERT INTO customers VALUES (1, 'ann'), (2, 'bob');");
    let cert = certs.join("client.pem");
    let key = certs.join("client.key");

    // Without a certificate the server refuses the role.
    let none = tempfile::tempdir().expect("tempdir");
    pipeline(none.path(), &db, "none", "");
    let e = ok(&run(none.path(), &[])).expect_err("no client certificate");
    assert!(
        e.contains("PostgreSQL connection `src`") && e.contains("certificate"),
        "{e}"
    );

    // Certificate and key from files: the snapshot, then a change through the stream.
    let files = tempfile::tempdir().expect("tempdir");
    pipeline(
        files.path(),
        &db,
        "files",
        &format!(
            "    sslcert: {}\n    sslkey: {}\n",
            cert.display(),
            key.display()
        ),
    );
    ok(&run(files.path(), &[])).expect("files");
    assert_eq!(rows(files.path()), vec!["1,ann", "2,bob"]);
    db.exec("INSERT INTO customers VALUES (3, 'cy')");
    ok(&run(files.path(), &[])).expect("files, the stream");
    assert_eq!(rows(files.path()), vec!["1,ann", "2,bob", "3,cy"]);

    // The key (and the certificate) as PEM text in environment variables.
    let key_pem = std::fs::read_to_string(&key).expect("client.key");
    let cert_pem = std::fs::read_to_string(&cert).expect("client.pem");
    let env = tempfile::tempdir().expect("tempdir");
    pipeline(
        env.path(),
        &db,
        "env",
        "    sslcert_env: CDCFLOW_TEST_CLIENT_CERT\n    sslkey_env: CDCFLOW_TEST_CLIENT_KEY\n",
    );
    let vars = [
        ("CDCFLOW_TEST_CLIENT_CERT", cert_pem.as_str()),
        ("CDCFLOW_TEST_CLIENT_KEY", key_pem.as_str()),
    ];
    ok(&run(env.path(), &vars)).expect("environment");
    db.exec("UPDATE customers SET name = 'cy2' WHERE id = 3");
    ok(&run(env.path(), &vars)).expect("environment, the stream");
    assert_eq!(
        query(
            env.path(),
            "SELECT id, name, _change_type FROM customers_changes ORDER BY _commit_lsn, _change_seq, id"
        ),
        vec![
            "1,ann,snapshot",
            "2,bob,snapshot",
            "3,cy,snapshot",
            "3,cy2,update"
        ]
    );

    // Mistakes are named: an unset variable, a key that is not PEM, a key of another
    // certificate.
    let e = ok(&run(env.path(), &vars[..1])).expect_err("the key's variable unset");
    assert!(
        e.contains("connection `src`") && e.contains("`CDCFLOW_TEST_CLIENT_KEY` is not set"),
        "{e}"
    );
    let bad = [vars[0], ("CDCFLOW_TEST_CLIENT_KEY", "not a key")];
    let e = ok(&run(env.path(), &bad)).expect_err("a key that is not PEM");
    assert!(
        e.contains("`CDCFLOW_TEST_CLIENT_KEY` holds no private key"),
        "{e}"
    );
    let other = tempfile::tempdir().expect("tempdir");
    pipeline(
        other.path(),
        &db,
        "other",
        &format!(
            "    sslcert: {}\n    sslkey: {}\n",
            cert.display(),
            certs.join("ca.key").display()
        ),
    );
    let e = ok(&run(other.path(), &[])).expect_err("the CA's key with the client's certificate");
    assert!(e.contains("PostgreSQL connection `src`"), "{e}");
}
