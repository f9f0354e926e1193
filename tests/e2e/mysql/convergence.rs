//! Convergence under a random workload: four writers insert, update, change keys (alone,
//! and right after an update in the same transaction), delete, roll back whole
//! transactions and parts of them (savepoints), and one TRUNCATE re-inserts some rows,
//! while `cdcflow run --continuous` follows the table through the binary log and is
//! killed with SIGKILL twice. Afterwards the SCD type 1 table equals the source and so
//! do the SCD type 2 table's open versions, except keys that only the TRUNCATE removed
//! (an SCD type 2 flow leaves truncates out, as for PostgreSQL). The SCD type 2 table
//! is the one a `syncs:` declaration generates for the same table, with a current table
//! of its own beside the hand-written one: generated flows converge through the
//! truncate too.
//!
//! A second table, `accounts`, is written alone and in the same transactions as
//! `customers` by a fifth writer and read through the same connection, so one reader of
//! the log serves both tables (each in batches of its own size) through the kills.
//!
//! Short in CI; `CDCFLOW_MYSQL_RANDOM_KEYS`, `…_OPS` and `…_SEED` run it longer.

use mysql_async::prelude::Queryable;

use super::{Lcg, Maria, assert_no_doubles, pipeline, query, run, spawn_continuous, stop};
use crate::{query_csv, stderr};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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
        match self.rng.below(11) {
            0 => {
                let new = self.new_id();
                format!(
                    "INSERT INTO customers VALUES ({new}, 'new{new}', 'c', REPEAT('n{new}', 300))"
                )
            }
            // A deleted one of the first ids comes back.
            1 => format!("INSERT IGNORE INTO customers VALUES ({id}, 'back{id}', 'c{r}', NULL)"),
            2 | 3 => format!("UPDATE customers SET city = 'city{r}' WHERE id = {id}"),
            4 => format!("UPDATE customers SET notes = REPEAT('{id}-{r}', 500) WHERE id = {id}"),
            5 => {
                let new = self.new_id();
                format!("UPDATE customers SET id = {new} WHERE id = {id}")
            }
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
                "BEGIN; UPDATE customers SET name = 'a' WHERE id = {id}; UPDATE customers SET name = 'b{r}' WHERE id = {id}; COMMIT"
            ),
        }
    }
}

/// Runs `ops` random statements; one the server refuses (a deadlock between writers)
/// is rolled back, as an application would.
fn write(db: &Maria, writer: &mut Writer, ops: u64) {
    execute(db, ops, || writer.statement());
}

/// Runs `ops` statements of `next` on one connection, rolling back those the server
/// refuses.
fn execute(db: &Maria, ops: u64, mut next: impl FnMut() -> String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut conn = mysql_async::Conn::new(db.opts(Some(&db.name)))
            .await
            .expect("connect");
        for _ in 0..ops {
            let sql = next();
            if conn.query_drop(&sql).await.is_err() {
                conn.query_drop("ROLLBACK").await.expect("rollback");
            }
        }
        let _ = conn.disconnect().await;
    });
}

/// The second table of the connection: its bronze and SCD type 1 tables, in batches of
/// 50 changes (the first table's are of 400).
const ACCOUNTS: &str = "CREATE OR REFRESH STREAMING TABLE accounts_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'accounts', max_changes_per_batch => 50);
CREATE OR REFRESH STREAMING TABLE accounts;
CREATE FLOW accounts_cdc AS AUTO CDC INTO accounts FROM STREAM(accounts_changes)
  KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete'
  SEQUENCE BY struct(_binlog_position, _change_seq)
  COLUMNS * EXCEPT (_change_type, _binlog_position, _change_seq, _commit_timestamp, _binlog_file);
";

/// `ops` transactions on `accounts`, half of them also changing a customer.
fn write_accounts(db: &Maria, rng: &mut Lcg, ops: u64, keys: u64) {
    execute(db, ops, || {
        let (account, amount, customer) = (1 + rng.below(50), rng.below(100), 1 + rng.below(keys));
        match rng.below(2) {
            0 => format!("UPDATE accounts SET balance = balance + {amount} WHERE id = {account}"),
            _ => format!(
                "BEGIN; UPDATE accounts SET balance = balance - {amount} WHERE id = {account}; \
                 UPDATE customers SET city = 'paid{amount}' WHERE id = {customer}; COMMIT"
            ),
        }
    });
}

/// The current rows, the same text in MariaDB and in cdcflow.
const CURRENT: &str = "SELECT id, name, city, md5(coalesce(notes, '-')) FROM customers ORDER BY id";

/// `customers` once more through a sync: its SCD type 1 table `synced_customers` and its
/// history `synced_customers_history`, flows generated as for any synced table.
fn synced(db: &Maria) -> String {
    format!(
        "syncs:
  mirror:
    connection: shop
    tables: '{}.customers'
    scd_type: [1, 2]
    bronze_table: 'synced_{{table}}_changes'
    target: 'synced_{{table}}'
    history_target: 'synced_{{table}}_history'
",
        db.name
    )
}

/// The synced SCD type 1 table's rows, as `CURRENT` reads the source.
const SYNCED_CURRENT: &str =
    "SELECT id, name, city, md5(coalesce(notes, '-')) FROM synced_customers ORDER BY id";

#[test]
fn a_random_workload_with_a_truncate_and_two_kills_converges() {
    let keys = setting("CDCFLOW_MYSQL_RANDOM_KEYS", 300);
    let ops = setting("CDCFLOW_MYSQL_RANDOM_OPS", 400);
    let seed = setting("CDCFLOW_MYSQL_RANDOM_SEED", 42);
    let db = Maria::create("binlog_random");
    db.exec(
        Some(&db.name),
        &format!(
            "CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, city VARCHAR(40) NOT NULL, notes MEDIUMTEXT) ENGINE=InnoDB;
             INSERT INTO customers SELECT seq, concat('n', seq), concat('c', seq % 7),
               IF(seq % 3 <> 0, REPEAT(md5(seq), 100), NULL) FROM seq_1_to_{keys};
             CREATE TABLE truncated (id BIGINT) ENGINE=InnoDB;
             CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB;
             INSERT INTO accounts SELECT seq, 0 FROM seq_1_to_50;"
        ),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(dir.path(), &db, ACCOUNTS);
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(
        &yaml,
        format!("{text}trigger_interval_seconds: 0.2\n{}", synced(&db)),
    )
    .expect("yaml");
    // The snapshot first, so that the writers' changes all come through the log.
    run(dir.path());

    let mut writers: Vec<Writer> = (0..4).map(|t| Writer::new(t, seed, keys)).collect();
    let mut accounts_rng = Lcg(seed.wrapping_add(5));
    let mut child = spawn_continuous(dir.path());
    for round in 0..3 {
        std::thread::scope(|s| {
            for writer in writers.iter_mut() {
                let db = &db;
                s.spawn(move || write(db, writer, ops));
            }
            let (db, rng) = (&db, &mut accounts_rng);
            s.spawn(move || write_accounts(db, rng, ops, keys));
            if round == 1 {
                // The keys the truncate removes, kept beside the table (not captured),
                // under a lock so that no writer commits in between.
                s.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    let again: Vec<String> = (1..=keys)
                        .step_by(5)
                        .map(|i| format!("({i}, 'again{i}', 'c', REPEAT('again', 300))"))
                        .collect();
                    db.exec(
                        Some(&db.name),
                        &format!(
                            "LOCK TABLES customers WRITE, truncated WRITE;
                             INSERT INTO truncated SELECT id FROM customers; TRUNCATE customers;
                             INSERT INTO customers VALUES {}; UNLOCK TABLES;",
                            again.join(", ")
                        ),
                    );
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
    let balances = "SELECT id, balance FROM accounts ORDER BY id";
    let accounts = db.rows(balances);
    let (mut seen, mut seen_accounts, mut seen_synced) = (vec![], vec![], vec![]);
    let lines = |out: &std::process::Output| -> Vec<String> {
        crate::stdout(out)
            .lines()
            .skip(1)
            .map(String::from)
            .collect()
    };
    for _ in 0..setting("CDCFLOW_MYSQL_RANDOM_WAIT_SECONDS", 150) * 4 {
        let (out, out_accounts, out_synced) = (
            query_csv(dir.path(), CURRENT),
            query_csv(dir.path(), balances),
            query_csv(dir.path(), SYNCED_CURRENT),
        );
        (seen, seen_accounts, seen_synced) =
            (lines(&out), lines(&out_accounts), lines(&out_synced));
        if out.status.success()
            && seen == source
            && seen_accounts == accounts
            && seen_synced == source
        {
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
        seen_accounts, accounts,
        "seed {seed}: the second table of the connection, read by the same reader of the log"
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
