//! Fifty tables cost the source a connection, not fifty: a `syncs:` pipeline of fifty
//! PostgreSQL tables polled by `run --continuous` asks the catalog through one SQL
//! connection kept for the run, and a run that stops at a usage error opens a few
//! connections, not one per table. Counted on a server of the test's own
//! (`pg_stat_database.sessions`), which nothing else connects to.

use std::time::Duration;

use super::Db;
use super::restart::OwnServer;
use crate::{ConnectionCount, cdcflow};

const TABLES: usize = 50;

/// Sessions the test's database has had since the server started.
fn sessions(db: &Db) -> u64 {
    db.rows(&format!(
        "SELECT sessions FROM pg_stat_database WHERE datname = '{}'",
        db.name
    ))
    .first()
    .and_then(|n| n.parse().ok())
    .expect("a count")
}

#[test]
fn an_idle_sync_of_fifty_tables_opens_at_most_two_connections_a_poll() {
    let server = OwnServer::start();
    let db = Db::create_on(server.admin(), "many_tables");
    let mut setup = String::new();
    for t in 0..TABLES {
        setup.push_str(&format!(
            "CREATE TABLE t{t} (id int PRIMARY KEY, v int); INSERT INTO t{t} VALUES (1, {t});"
        ));
    }
    db.exec(&setup);
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().to_str().expect("utf-8");
    std::fs::write(
        dir.path().join("pipeline.yaml"),
        format!(
            "name: many\ntrigger_interval_seconds: 0.5\nconnections:\n  src:\n    kind: postgres\n    host: {}\n    port: {}\n    database: {}\n    user: {}\nsyncs:\n  src:\n    connection: src\n    tables: 'public.*'\n",
            db.admin.host, db.admin.port, db.name, db.admin.user
        ),
    )
    .expect("pipeline.yaml");

    // A run that ends at a usage error asks for the tables and their columns.
    let connections = ConnectionCount {
        count: &|| sessions(&db),
        // Each session reports itself to the statistics within a second or so.
        lag: Duration::from_millis(1500),
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
        db.exec("UPDATE t7 SET v = 70 WHERE id = 1")
    });
}
