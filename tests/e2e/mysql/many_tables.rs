//! Fifty tables cost the source a connection, not fifty: a `syncs:` pipeline of fifty
//! tables polled by `run --continuous` opens at most two new server connections a poll
//! (the log's dump and the one the tables' reads take turns on), and a run that stops
//! at a usage error opens a few, not one per table. Counted on a MariaDB server of the
//! test's own (`SHOW GLOBAL STATUS LIKE 'Connections'`), which nothing else connects to.

use std::time::Duration;

use super::query;
use super::restart::BinlogServer;
use crate::{ConnectionCount, cdcflow};

const TABLES: usize = 50;

/// Connections the server has accepted since it started.
fn accepted(server: &BinlogServer) -> u64 {
    server
        .exec("SHOW GLOBAL STATUS LIKE 'Connections'")
        .expect("status")
        .first()
        .and_then(|l| l.split(',').nth(1).and_then(|n| n.parse().ok()))
        .expect("a count")
}

#[test]
fn an_idle_sync_of_fifty_tables_opens_at_most_two_connections_a_poll() {
    let server = BinlogServer::start();
    let mut setup = String::from("CREATE DATABASE shop;");
    for t in 0..TABLES {
        setup.push_str(&format!(
            "CREATE TABLE shop.t{t} (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; INSERT INTO shop.t{t} VALUES (1, {t});"
        ));
    }
    server.exec(&setup).expect("tables");
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().to_str().expect("utf-8");
    std::fs::write(
        dir.path().join("pipeline.yaml"),
        format!(
            "name: many\ntrigger_interval_seconds: 0.5\nconnections:\n  shop:\n    kind: mariadb\n    host: 127.0.0.1\n    port: {}\n    database: shop\n    user: root\nsyncs:\n  shop:\n    connection: shop\n    tables: 'shop.*'\n",
            server.port
        ),
    )
    .expect("pipeline.yaml");

    // A run that ends at a usage error asks the server for the tables and their
    // columns, over one connection.
    let connections = ConnectionCount {
        count: &|| accepted(&server),
        lag: Duration::ZERO,
    };
    let usage = connections.during(|| {
        let out = cdcflow(&["run", "-p", p, "--flow", "no_such_flow"]);
        assert!(!out.status.success());
    });
    assert!(
        usage <= 3,
        "a run that stopped at a usage error opened {usage} connections for {TABLES} tables"
    );
    connections.idle_polls(dir.path(), TABLES, || {
        server
            .exec("UPDATE shop.t7 SET v = 70 WHERE id = 1")
            .expect("a change");
    });
    assert_eq!(query(dir.path(), "SELECT count(*) FROM t0"), ["1"]);
}
