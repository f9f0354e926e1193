//! TLS to the server (`sslmode:`, `sslrootcert:` on the connection), against the local
//! server. Debian's PostgreSQL has TLS on with a self-signed certificate for
//! `localhost` (`ssl_cert_file`): then every mode is tried, with that certificate as
//! the trusted CA for the verifying ones (the SQL connection alone is checked to be
//! encrypted; the replication connection's modes are pgwire-replication's). Without TLS on the server, `require` must fail
//! naming the connection, and `disable` and `prefer` work.

use std::path::Path;

use super::{Db, query};
use crate::{cdcflow, stderr, stdout};

/// A pipeline named `name` reading `customers` of `db` through connection `src` at
/// `host`, with `tls` (YAML lines) on the connection.
fn pipeline(dir: &Path, db: &Db, name: &str, host: &str, tls: &str) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "name: {name}\nconnections:\n  src:\n    kind: postgres\n    host: {host}\n    port: {}\n    database: {}\n    user: {}\n{tls}",
            db.admin.port, db.name, db.admin.user
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

/// Runs a pipeline with connection settings `tls`; `Ok` with the rows read, or the
/// error output.
fn run_with(db: &Db, case: &str, host: &str, tls: &str) -> Result<Vec<String>, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), db, &format!("{}_{case}", db.name), host, tls);
    let out = cdcflow(&["run", "-p", dir.path().to_str().expect("utf-8")]);
    match out.status.success() {
        true => Ok(query(
            dir.path(),
            "SELECT id, name FROM customers_changes ORDER BY id",
        )),
        false => Err(format!("{}{}", stdout(&out), stderr(&out))),
    }
}

#[test]
fn sslmodes_connect_encrypted_or_fail_naming_the_connection() {
    let db = Db::create("tls");
    db.exec("CREATE TABLE customers (id int PRIMARY KEY, name text); INSERT INTO customers VALUES (1, 'ann'), (2, 'bob');");
    let rows = vec!["1,ann".to_string(), "2,bob".to_string()];
    let host = db.admin.host.clone();
    let server_tls = db.rows("SHOW ssl") == vec!["on"];
    for mode in ["disable", "prefer"] {
        assert_eq!(
            run_with(&db, mode, &host, &format!("    sslmode: {mode}\n")),
            Ok(rows.clone()),
            "{mode}"
        );
    }
    let required = run_with(&db, "require", &host, "    sslmode: require\n");
    if !server_tls {
        let e = required.expect_err("require against a server without TLS");
        assert!(
            e.contains("PostgreSQL connection `src`") && e.contains("sslmode require"),
            "{e}"
        );
        return;
    }
    assert_eq!(required, Ok(rows.clone()), "require");

    // The server's certificate (self-signed, for `localhost`) as the trusted CA.
    let cert = db.rows("SHOW ssl_cert_file").concat();
    assert!(
        std::fs::read(&cert).is_ok(),
        "the server's certificate `{cert}` must be readable for the verifying modes"
    );
    let trusted = |mode: &str| format!("    sslmode: {mode}\n    sslrootcert: {cert}\n");
    assert_eq!(
        run_with(&db, "verify_ca", "localhost", &trusted("verify-ca")),
        Ok(rows.clone()),
        "verify-ca"
    );
    // pgwire-replication 0.5.0 checks the host name under verify-ca too (it lets pass
    // only rustls' older form of the name error): the replication connection fails,
    // saying why. docs/sources.md, "TLS".
    if host != "localhost" {
        let e = run_with(&db, "verify_ca_ip", &host, &trusted("verify-ca"))
            .expect_err("verify-ca for another host name, on the replication connection");
        assert!(
            e.contains("PostgreSQL connection `src`") && e.contains("not valid for name"),
            "{e}"
        );
    }
    assert_eq!(
        run_with(&db, "verify_full", "localhost", &trusted("verify-full")),
        Ok(rows.clone()),
        "verify-full for the certificate's host"
    );
    if host != "localhost" {
        let e = run_with(&db, "wrong_host", &host, &trusted("verify-full"))
            .expect_err("verify-full for another host name");
        assert!(
            e.contains("PostgreSQL connection `src`") && e.contains("sslmode verify-full"),
            "{e}"
        );
    }
    // Without sslrootcert, the self-signed certificate is not trusted.
    let e = run_with(&db, "untrusted", "localhost", "    sslmode: verify-full\n")
        .expect_err("an untrusted certificate");
    assert!(e.contains("PostgreSQL connection `src`"), "{e}");
    // And the connection really is encrypted.
    let mut tls = db.admin.with_database(&db.name);
    tls.tls.mode = cdcflow_plan::connections::SslMode::Require;
    let encrypted = db.rt.block_on(async {
        let client = tls.connect().await.expect("connect");
        let row = client
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .expect("pg_stat_ssl");
        row.get::<_, bool>(0)
    });
    assert!(encrypted, "sslmode require must encrypt");
}
