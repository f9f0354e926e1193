//! A connection by the server's Unix-domain socket: `host:` the socket's directory, as
//! in libpq (`/var/run/postgresql`). The snapshot's SQL connection and the replication
//! connection both go over the socket, never TCP; the server sees no client address.

use super::{
    Db, assert_no_doubles, assert_silver_is_source, pipeline, run, spawn_continuous, stop,
    wait_for_source,
};
use crate::stderr;

#[test]
fn a_socket_directory_as_host_carries_the_snapshot_and_the_stream() {
    let db = Db::create("socket");
    let socket = db
        .rows("SELECT trim(split_part(current_setting('unix_socket_directories'), ',', 1))")
        .concat();
    assert!(
        socket.starts_with('/'),
        "the server listens on no Unix-domain socket (unix_socket_directories = '{socket}')"
    );
    db.exec(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL);
         INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome');",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, true);
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    let by_socket = text.replacen(
        &format!("host: {}\n", db.admin.host),
        &format!("host: {socket}\n"),
        1,
    );
    assert_ne!(by_socket, text, "the pipeline names its host");
    std::fs::write(&yaml, format!("{by_socket}trigger_interval_seconds: 0.5\n")).expect("yaml");

    // One run: the snapshot, then changes through the stream.
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the snapshot");
    db.exec("INSERT INTO customers VALUES (3, 'cy', 'lima'); UPDATE customers SET city = 'bern' WHERE id = 1; DELETE FROM customers WHERE id = 2;");
    run(dir.path());
    assert_silver_is_source(dir.path(), &db, "after the changes");

    // While `--continuous` streams, its walsender has no client address: a socket.
    let child = spawn_continuous(dir.path());
    db.exec("INSERT INTO customers VALUES (4, 'di', 'kyiv')");
    let followed = wait_for_source(dir.path(), &db);
    let senders_sql = format!(
        "SELECT coalesce(host(client_addr), 'socket') FROM pg_stat_activity WHERE datname = '{}' AND backend_type = 'walsender'",
        db.name
    );
    let mut senders = db.rows(&senders_sql);
    for _ in 0..50 {
        if !senders.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        senders = db.rows(&senders_sql);
    }
    let (term, out) = stop(child);
    assert!(followed, "the change did not arrive: {}", stderr(&out));
    assert_eq!(senders, vec!["socket"], "{}", stderr(&out));
    assert!(term.success() && out.status.success(), "{}", stderr(&out));
    assert_no_doubles(dir.path());
}
