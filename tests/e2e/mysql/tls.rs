//! `read_mysql` over TLS with a client certificate: the local MariaDB (as `bash
//! .ci/mariadb` sets it up) lets the user `cdcflow_cert` in only with a certificate of
//! its test CA, so a run that copies the table and then streams a change through
//! `verify-full` proves both of the source's connections (the queries and the binary
//! log dump) encrypted, verified and authenticated by the certificate.

use std::path::Path;

use super::{Maria, SEQUENCE, query, run};

#[test]
fn read_mysql_copies_and_streams_over_verified_tls_with_a_client_certificate() {
    let db = Maria::create("binlog_tls");
    let ca = db.rows("SELECT @@have_ssl, COALESCE(@@ssl_ca, '')");
    let (on, ca) = ca[0].split_once(',').expect("two values");
    assert!(
        on == "YES" && !ca.is_empty(),
        "this test needs TLS on the server: run `bash .ci/mariadb` (have_ssl {on}, ssl_ca `{ca}`)"
    );
    let certs = Path::new(ca).parent().expect("a folder");
    db.exec(
        Some(&db.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("pipeline.yaml"),
        format!(
            "name: mysql_tls\nconnections:\n  shop:\n    kind: mysql\n    host: localhost\n    port: {}\n    database: {}\n    user: cdcflow_cert\n    sslmode: verify-full\n    sslrootcert: {}\n    sslcert: {}\n    sslkey: {}\n",
            db.port,
            db.name,
            certs.join("ca.pem").display(),
            certs.join("client.pem").display(),
            certs.join("client.key").display()
        ),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.path().join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'customers');
CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customers_changes)
  KEYS (id) APPLY AS DELETE WHEN _change_type = 'delete' {SEQUENCE};"
        ),
    )
    .expect("flows.sql");
    run(dir.path());
    db.exec(
        Some(&db.name),
        "INSERT INTO customers VALUES (2, 'bob', 'rome')",
    );
    run(dir.path());
    assert_eq!(
        query(
            dir.path(),
            "SELECT id, name, city, _change_type FROM customers_changes ORDER BY id"
        ),
        vec!["1,ann,oslo,snapshot", "2,bob,rome,insert"]
    );
}
