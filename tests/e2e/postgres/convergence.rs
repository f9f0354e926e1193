//! Convergence under a random workload: four writers insert, update (TOASTed values
//! changed and left alone), change keys (alone, and right after an update in the same
//! transaction), delete, roll back whole transactions and parts of them (savepoints),
//! and one TRUNCATE re-inserts some rows, while `cdcflow run --continuous` follows the
//! table and is killed with SIGKILL twice. Afterwards the SCD type 1 table equals the
//! source and so do the SCD type 2 table's open versions, except keys that only the
//! TRUNCATE removed: an SCD type 2 flow leaves truncates out (docs/sources.md), so
//! those keep their open version.
//!
//! The SCD type 2 table is the one a `syncs:` declaration generates for the same table
//! (with a current table of its own beside the hand-written one): the flows a user
//! cannot edit must converge through the truncate too.
//!
//! Short in CI; `just soak-postgres` runs it long (`CDCFLOW_PG_RANDOM_KEYS`,
//! `CDCFLOW_PG_RANDOM_OPS`, `CDCFLOW_PG_RANDOM_SEED`).

use std::path::Path;

use super::{Db, Lcg, assert_no_doubles, pipeline, query, run, spawn_continuous, stop};
use crate::{query_csv, stderr};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A value PostgreSQL stores out of line (the column is `STORAGE EXTERNAL`), so an
/// update that leaves it alone leaves it out of the change stream.
fn toasted(seed: &str) -> String {
    format!("(SELECT string_agg(md5(g::text || '{seed}'), '') FROM generate_series(1, 100) g)")
}

/// One writer's statements: each call one transaction (or a rolled-back one).
struct Writer {
    rng: Lcg,
    keys: u64,
    /// Ids this writer inserted or moved rows to (no other writer makes these).
    own: Vec<u64>,
    next: u64,
}

impl Writer {
    fn new(thread: u64, seed: u64, keys: u64) -> Writer {
        Writer {
            rng: Lcg(seed.wrapping_mul(31).wrapping_add(thread * 7919 + 1)),
            keys,
            own: vec![],
            next: 1_000_000_000 * (thread + 1),
        }
    }

    /// An id likely to exist: one of the table's first ids, or one this writer made.
    fn some_id(&mut self) -> u64 {
        match (self.own.is_empty(), self.rng.below(2)) {
            (false, 0) => {
                let at = usize::try_from(self.rng.below(self.own.len() as u64)).unwrap_or(0);
                self.own[at]
            }
            _ => 1 + self.rng.below(self.keys),
        }
    }

    fn new_id(&mut self) -> u64 {
        self.next += 1;
        self.own.push(self.next);
        self.next
    }

    fn statement(&mut self) -> String {
        let id = self.some_id();
        let r = self.rng.below(1000);
        match self.rng.below(12) {
            0 => {
                let new = self.new_id();
                format!(
                    "INSERT INTO customers VALUES ({new}, 'new{new}', 'c', {})",
                    toasted(&new.to_string())
                )
            }
            // A deleted one of the first ids comes back.
            1 => format!(
                "INSERT INTO customers VALUES ({id}, 'back{id}', 'c{r}', {}) ON CONFLICT DO NOTHING",
                toasted(&format!("back{r}"))
            ),
            2 | 3 => format!("UPDATE customers SET city = 'city{r}' WHERE id = {id}"),
            4 => format!(
                "UPDATE customers SET notes = {} WHERE id = {id}",
                toasted(&format!("{id}-{r}"))
            ),
            5 => {
                let new = self.new_id();
                format!("UPDATE customers SET id = {new} WHERE id = {id}")
            }
            // The TOASTed value carried across a key change in one transaction.
            6 => {
                let new = self.new_id();
                format!(
                    "BEGIN; UPDATE customers SET name = 'v{r}' WHERE id = {id}; UPDATE customers SET id = {new} WHERE id = {id}; COMMIT"
                )
            }
            7 => format!("DELETE FROM customers WHERE id = {id}"),
            8 => format!(
                "BEGIN; UPDATE customers SET city = 'gone' WHERE id = {id}; DELETE FROM customers WHERE id = {id}; ROLLBACK"
            ),
            9 => {
                let new = self.new_id();
                format!(
                    "BEGIN; UPDATE customers SET city = 's{r}' WHERE id = {id}; SAVEPOINT s; \
                     UPDATE customers SET id = {new} WHERE id = {id}; DELETE FROM customers WHERE id = {new}; \
                     ROLLBACK TO SAVEPOINT s; UPDATE customers SET name = 't{r}' WHERE id = {id}; COMMIT"
                )
            }
            _ => format!(
                "BEGIN; UPDATE customers SET name = 'a' WHERE id = {id}; UPDATE customers SET name = 'b{r}', notes = CASE WHEN {r} % 2 = 0 THEN notes ELSE 'short{r}' END WHERE id = {id}; COMMIT"
            ),
        }
    }
}

/// Runs `ops` random statements; a statement the server refuses (a deadlock between
/// writers) is rolled back, as an application would.
fn write(db: &Db, writer: &mut Writer, ops: u64) {
    let connection = db.admin.with_database(&db.name);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = connection.connect().await.expect("connect");
        for _ in 0..ops {
            let sql = writer.statement();
            if client.batch_execute(&sql).await.is_err() {
                client.batch_execute("ROLLBACK").await.expect("rollback");
            }
        }
    });
}

/// An SCD type 2 history of `customers_changes` through a view that leaves truncates
/// out (an SCD type 2 flow takes none), beside the pipeline's other flows.
pub(super) fn history(dir: &Path) {
    std::fs::write(
        dir.join("history.sql"),
        "CREATE TEMPORARY VIEW kept_changes AS
  SELECT * FROM STREAM(customers_changes) WHERE _change_type <> 'truncate';
CREATE OR REFRESH STREAMING TABLE customers_history;
CREATE FLOW customers_history_cdc AS AUTO CDC INTO customers_history FROM STREAM(kept_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  SEQUENCE BY struct(_commit_lsn, _change_seq)
  COLUMNS * EXCEPT (_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid)
  STORED AS SCD TYPE 2;
",
    )
    .expect("history.sql");
}

const CURRENT: &str = "SELECT id, name, city, md5(coalesce(notes, '-')) FROM customers ORDER BY id";

/// The same table once more through a sync: its SCD type 1 table `synced_customers`
/// and its history `synced_customers_history`, flows generated as for any synced table.
const SYNCED: &str = "syncs:
  mirror:
    connection: src
    tables: public.customers
    scd_type: [1, 2]
    bronze_table: 'synced_{table}_changes'
    target: 'synced_{table}'
    history_target: 'synced_{table}_history'
";

/// The synced SCD type 1 table's rows, as `CURRENT` reads the source.
const SYNCED_CURRENT: &str =
    "SELECT id, name, city, md5(coalesce(notes, '-')) FROM synced_customers ORDER BY id";

#[test]
fn a_random_workload_with_a_truncate_and_two_kills_converges() {
    let keys = setting("CDCFLOW_PG_RANDOM_KEYS", 300);
    let ops = setting("CDCFLOW_PG_RANDOM_OPS", 150);
    let seed = setting("CDCFLOW_PG_RANDOM_SEED", 42);
    let db = Db::create("random_workload");
    db.exec(&format!(
        "CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, city text NOT NULL, notes text);
         ALTER TABLE customers ALTER COLUMN notes SET STORAGE EXTERNAL;
         INSERT INTO customers SELECT i, 'n' || i, 'c' || (i % 7),
           CASE WHEN i % 3 <> 0 THEN (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 100) g) END
         FROM generate_series(1, {keys}) i;"
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, false);
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(
        &yaml,
        format!("{text}trigger_interval_seconds: 0.2\n{SYNCED}"),
    )
    .expect("yaml");
    // The snapshot first, so that the writers' changes all come through the stream.
    run(dir.path());

    let mut writers: Vec<Writer> = (0..4).map(|t| Writer::new(t, seed, keys)).collect();
    let mut child = spawn_continuous(dir.path());
    for round in 0..3 {
        std::thread::scope(|s| {
            for writer in writers.iter_mut() {
                let db = &db;
                s.spawn(move || write(db, writer, ops));
            }
            if round == 1 {
                // The keys the truncate removes, kept beside the table (not published).
                s.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    db.exec(&format!(
                        "BEGIN; LOCK TABLE customers IN ACCESS EXCLUSIVE MODE;
                         CREATE TABLE truncated AS SELECT id FROM customers; TRUNCATE customers;
                         INSERT INTO customers SELECT i, 'again' || i, 'c', {} FROM generate_series(1, {keys}, 5) i;
                         COMMIT",
                        toasted("again")
                    ));
                });
            }
        });
        if round < 2 {
            // Killed at whatever it is doing, then started again.
            let _ = child.kill();
            let _ = child.wait();
            child = spawn_continuous(dir.path());
        }
    }
    let source = db.rows(CURRENT);
    let (mut seen, mut seen_synced) = (vec![], vec![]);
    let lines = |out: &std::process::Output| -> Vec<String> {
        crate::stdout(out)
            .lines()
            .skip(1)
            .map(String::from)
            .collect()
    };
    // Four polls a second, for CDCFLOW_PG_RANDOM_WAIT_SECONDS (150 by default).
    for _ in 0..setting("CDCFLOW_PG_RANDOM_WAIT_SECONDS", 150) * 4 {
        let (out, synced) = (
            query_csv(dir.path(), CURRENT),
            query_csv(dir.path(), SYNCED_CURRENT),
        );
        (seen, seen_synced) = (lines(&out), lines(&synced));
        if out.status.success() && seen == source && seen_synced == source {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let (term, out) = stop(child);
    assert!(
        seen == source,
        "seed {seed}: the SCD type 1 table did not reach the source ({} rows against {}); the continuous run said: {}",
        seen.len(),
        source.len(),
        stderr(&out)
    );
    assert_eq!(
        seen_synced, source,
        "seed {seed}: the synced SCD type 1 table"
    );
    assert!(
        term.success() && out.status.success(),
        "seed {seed}: kill -TERM: {term}; the continuous run: {}; its stderr: {}",
        out.status,
        stderr(&out)
    );
    // The synced SCD type 2 table's open versions: the source's rows, and beside them
    // only keys the truncate removed.
    let open = query(
        dir.path(),
        "SELECT id, name, city, md5(coalesce(notes, '-')) FROM synced_customers_history WHERE __END_AT IS NULL ORDER BY id",
    );
    let ids: std::collections::BTreeSet<String> = source
        .iter()
        .filter_map(|r| r.split(',').next().map(String::from))
        .collect();
    let (kept, extra): (Vec<String>, Vec<String>) = open
        .into_iter()
        .partition(|r| r.split(',').next().is_some_and(|id| ids.contains(id)));
    assert_eq!(kept, source, "seed {seed}: SCD type 2 open versions");
    let truncated: std::collections::BTreeSet<String> =
        db.rows("SELECT id FROM truncated").into_iter().collect();
    let stray: Vec<&String> = extra
        .iter()
        .filter(|r| !r.split(',').next().is_some_and(|id| truncated.contains(id)))
        .collect();
    assert!(
        stray.is_empty(),
        "seed {seed}: open versions of keys neither in the source nor truncated: {stray:?}"
    );
    assert_no_doubles(dir.path());
}
