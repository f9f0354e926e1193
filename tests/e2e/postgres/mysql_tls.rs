//! TLS for `read_query` on MySQL/MariaDB (`sslmode:`, `sslrootcert:`, the client
//! certificate), against the local MariaDB as `bash .ci/mariadb` sets it up: TLS on with
//! a certificate for `localhost` (not for 127.0.0.1) signed by a test CA, and a user
//! `cdcflow_cert` that must present a client certificate of that CA. The query reads
//! the session's TLS version beside the rows, so each run shows whether it was
//! encrypted.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::query;
use super::read_query::Maria;
use crate::{stderr, stdout};

/// Runs a read_query pipeline on `maria`'s `customers` through a connection to `host`
/// as `user` with `tls` (YAML lines) and `env`: the rows read (`id,name,tls version`),
/// or the error output.
fn run_with(
    maria: &Maria,
    case: &str,
    (host, user): (&str, &str),
    tls: &str,
    env: &[(&str, &str)],
) -> Result<Vec<String>, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    write_pipeline(dir.path(), maria, case, (host, user), tls);
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", dir.path().to_str().expect("utf-8")])
        .envs(env.iter().copied())
        .output()
        .expect("run");
    match out.status.success() {
        true => Ok(query(
            dir.path(),
            "SELECT id, name, tls FROM customers_raw ORDER BY id",
        )),
        false => Err(format!("{}{}", stdout(&out), stderr(&out))),
    }
}

fn write_pipeline(dir: &Path, maria: &Maria, case: &str, (host, user): (&str, &str), tls: &str) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: {}_{case}\nconnections:\n  shop:\n    kind: mariadb\n    host: {host}\n    port: {}\n    database: {}\n    user: {user}\n{tls}",
            maria.name, maria.port, maria.name
        ),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE customers_raw AS
SELECT * FROM STREAM read_query(connection => 'shop',
  query => 'SELECT id, name, (SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = ''SSL_VERSION'') AS tls, updated_at FROM customers',
  watermark => 'updated_at');
",
    )
    .expect("flows.sql");
}

/// Where `.ci/mariadb` left the CA and the client certificate: beside the CA the
/// server trusts.
fn tls_dir(maria: &Maria) -> PathBuf {
    let ca = maria.rows("SELECT @@have_ssl, COALESCE(@@ssl_ca, '')");
    let (on, ca) = ca[0].split_once(',').expect("two values");
    assert!(
        on == "YES" && !ca.is_empty(),
        "the MariaDB TLS test needs TLS on the server: run `bash .ci/mariadb` (have_ssl {on}, ssl_ca `{ca}`)"
    );
    let dir = Path::new(ca).parent().expect("a folder").to_path_buf();
    assert!(
        dir.join("client.pem").is_file(),
        "no client certificate in {}: run `bash .ci/mariadb`",
        dir.display()
    );
    dir
}

#[test]
fn read_query_on_mariadb_connects_in_every_sslmode_and_with_a_client_certificate() {
    let maria = Maria::create("mysql_tls");
    maria.exec(
        Some(&maria.name),
        "CREATE TABLE customers (id int PRIMARY KEY, name varchar(40), updated_at datetime(6));
         INSERT INTO customers VALUES (1, 'ann', '2024-05-01 09:00:00'), (2, 'bob', '2024-05-01 10:00:00')",
    );
    let dir = tls_dir(&maria);
    let ca = dir.join("ca.pem");
    let root = (maria.host.as_str(), maria.user.as_str());
    let encrypted = |rows: Result<Vec<String>, String>, what: &str| {
        let rows = rows.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(rows.len(), 2, "{what}: {rows:?}");
        assert!(
            rows.iter().all(|r| r.contains(",TLSv1.")),
            "{what}: not encrypted: {rows:?}"
        );
    };

    let plain = run_with(&maria, "disable", root, "    sslmode: disable\n", &[]).expect("disable");
    assert_eq!(plain, vec!["1,ann,", "2,bob,"], "disable: in the clear");
    // The default is prefer: TLS when the server offers it.
    encrypted(run_with(&maria, "prefer", root, "", &[]), "prefer");
    encrypted(
        run_with(&maria, "require", root, "    sslmode: require\n", &[]),
        "require",
    );
    let trusted = |mode: &str| format!("    sslmode: {mode}\n    sslrootcert: {}\n", ca.display());
    let local = ("localhost", maria.user.as_str());
    encrypted(
        run_with(&maria, "verify_ca", local, &trusted("verify-ca"), &[]),
        "verify-ca",
    );
    encrypted(
        run_with(&maria, "verify_full", local, &trusted("verify-full"), &[]),
        "verify-full at localhost",
    );
    if maria.host != "localhost" {
        // The certificate is for localhost only.
        let e = run_with(&maria, "wrong_host", root, &trusted("verify-full"), &[])
            .expect_err("verify-full for another host name");
        assert!(
            e.contains("read_query on connection `shop`") && e.contains("sslmode verify-full"),
            "{e}"
        );
        // mysql_async 0.37.1 checks the host name under verify-ca too (it lets pass
        // only rustls' older form of the name error), as pgwire-replication does:
        // docs/sources.md, "TLS to MySQL and MariaDB".
        let e = run_with(&maria, "verify_ca_ip", root, &trusted("verify-ca"), &[])
            .expect_err("verify-ca for another host name");
        assert!(
            e.contains("sslmode verify-ca") && e.contains("not valid for name"),
            "{e}"
        );
    }
    // Without sslrootcert, the test CA is not trusted.
    let e = run_with(&maria, "untrusted", local, "    sslmode: verify-ca\n", &[])
        .expect_err("an untrusted certificate");
    assert!(e.contains("read_query on connection `shop`"), "{e}");

    // cdcflow_cert must present a certificate of the CA: from files, or the key's PEM
    // from the environment.
    let cert_user = ("localhost", "cdcflow_cert");
    let e = run_with(&maria, "no_cert", cert_user, "    sslmode: require\n", &[])
        .expect_err("no client certificate");
    assert!(e.contains("Access denied"), "{e}");
    let client = |key: &str| {
        format!(
            "    sslmode: verify-ca\n    sslrootcert: {}\n    sslcert: {}\n{key}",
            ca.display(),
            dir.join("client.pem").display()
        )
    };
    let key_file = format!("    sslkey: {}\n", dir.join("client.key").display());
    encrypted(
        run_with(&maria, "cert_files", cert_user, &client(&key_file), &[]),
        "client certificate from files",
    );
    let key_pem = std::fs::read_to_string(dir.join("client.key")).expect("client.key");
    encrypted(
        run_with(
            &maria,
            "cert_env",
            cert_user,
            &client("    sslkey_env: CDCFLOW_TEST_MYSQL_KEY\n"),
            &[("CDCFLOW_TEST_MYSQL_KEY", &key_pem)],
        ),
        "client key from the environment",
    );
}

/// A MariaDB server of the test's own, without TLS: an empty data folder, no grant
/// tables (anyone logs in), on a free port of 127.0.0.1; stopped when dropped. The
/// server program is CDCFLOW_MARIADBD, else /usr/sbin/mariadbd.
struct PlainServer {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl PlainServer {
    fn start() -> PlainServer {
        let program =
            std::env::var("CDCFLOW_MARIADBD").unwrap_or_else(|_| "/usr/sbin/mariadbd".into());
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("data folder");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&program)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.path().join("sock").display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg(format!("--log-error={}", dir.path().join("err").display()))
            .args([
                &format!("--port={port}"),
                "--bind-address=127.0.0.1",
                "--skip-grant-tables",
                "--user=root",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("this test starts a MariaDB server of its own with `{program}` (CDCFLOW_MARIADBD): {e}")
            });
        let server = PlainServer {
            child,
            port,
            _dir: dir,
        };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the test's own MariaDB server did not start on port {port}");
    }
}

impl Drop for PlainServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn read_query_on_a_mariadb_without_tls_prefers_plain_and_refuses_require() {
    let server = PlainServer::start();
    let maria = Maria {
        name: "cdcflow_e2e_plain".into(),
        host: "127.0.0.1".into(),
        port: server.port,
        user: "root".into(),
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime"),
    };
    maria.exec(
        None,
        "CREATE DATABASE cdcflow_e2e_plain;
         CREATE TABLE cdcflow_e2e_plain.customers (id int PRIMARY KEY, name varchar(40), updated_at datetime(6));
         INSERT INTO cdcflow_e2e_plain.customers VALUES (1, 'ann', '2024-05-01 09:00:00')",
    );
    let root = ("127.0.0.1", "root");
    // prefer (the default): in the clear.
    assert_eq!(
        run_with(&maria, "plain_prefer", root, "", &[]),
        Ok(vec!["1,ann,".to_string()])
    );
    let e = run_with(&maria, "plain_require", root, "    sslmode: require\n", &[])
        .expect_err("require against a server without TLS");
    assert!(
        e.contains("read_query on connection `shop`") && e.contains("sslmode require"),
        "{e}"
    );
}
