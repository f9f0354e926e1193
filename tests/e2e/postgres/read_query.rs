//! High-watermark extraction (`read_query`) end to end, against MariaDB (127.0.0.1:3306,
//! root without a password; MYSQL_HOST/MYSQL_PORT/MYSQL_USER) and PostgreSQL: rows above
//! the last watermark flow into a bronze table and an SCD type 1 table; a row that
//! committed late with a watermark inside the overlap is caught; nothing is stored
//! twice; a run with nothing new commits nothing; a hard delete is not seen (the
//! documented blind spot). Each test has a database of its own, dropped at the end.

use std::path::Path;

use mysql_async::prelude::Queryable;

use super::{Db, query, run};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.into())
}

/// A MariaDB database of the test's own.
pub(crate) struct Maria {
    pub(crate) name: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) rt: tokio::runtime::Runtime,
}

impl Maria {
    pub(crate) fn create(test: &str) -> Maria {
        let m = Maria {
            name: format!("cdcflow_e2e_{test}"),
            host: env("MYSQL_HOST", "127.0.0.1"),
            port: env("MYSQL_PORT", "3306").parse().expect("MYSQL_PORT"),
            user: env("MYSQL_USER", "root"),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        };
        m.exec(
            None,
            &format!("DROP DATABASE IF EXISTS {0}; CREATE DATABASE {0}", m.name),
        );
        m
    }

    /// Where the server is, for a connection made on another runtime than this one's
    /// (a connection belongs to the runtime it was made on).
    pub(crate) fn opts(&self, database: Option<&str>) -> mysql_async::OptsBuilder {
        mysql_async::OptsBuilder::default()
            .ip_or_hostname(self.host.clone())
            .tcp_port(self.port)
            .user(Some(self.user.clone()))
            .pass(std::env::var("MYSQL_PASSWORD").ok())
            .db_name(database.map(String::from))
            .prefer_socket(false)
    }

    fn connect(&self, database: Option<&str>) -> mysql_async::Conn {
        let opts = self.opts(database);
        self.rt
            .block_on(mysql_async::Conn::new(opts))
            .unwrap_or_else(|e| {
                panic!(
                    "these tests need a MariaDB or MySQL server at {}:{} (user {}): {e}",
                    self.host, self.port, self.user
                )
            })
    }

    pub(crate) fn exec(&self, database: Option<&str>, sql: &str) {
        let mut conn = self.connect(database);
        self.rt
            .block_on(conn.query_drop(sql))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let _ = self.rt.block_on(conn.disconnect());
    }

    pub(crate) fn rows(&self, sql: &str) -> Vec<String> {
        let mut conn = self.connect(Some(&self.name));
        let rows: Vec<mysql_async::Row> = self.rt.block_on(conn.query(sql)).expect(sql);
        let _ = self.rt.block_on(conn.disconnect());
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| match r.as_ref(i) {
                        Some(mysql_async::Value::Bytes(b)) => {
                            String::from_utf8_lossy(b).into_owned()
                        }
                        Some(mysql_async::Value::NULL) | None => String::new(),
                        Some(v) => format!("{v:?}"),
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect()
    }
}

impl Drop for Maria {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.exec(None, &format!("DROP DATABASE IF EXISTS {}", self.name));
        }
    }
}

/// A pipeline reading `customers` through `connection` (YAML) with read_query into
/// `customers_raw` and an SCD type 1 table `customers`.
fn pipeline(dir: &Path, name: &str, connection: &str) {
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!("name: {name}\nconnections:\n  shop:\n{connection}"),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE customers_raw AS
SELECT * FROM STREAM read_query(connection => 'shop',
  query => 'SELECT id, name, city, updated_at FROM customers', watermark => 'updated_at',
  overlap_seconds => 60);

CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(customers_raw)
  KEYS (id)
  SEQUENCE BY updated_at
  STORED AS SCD TYPE 1;
",
    )
    .expect("flows.sql");
}

/// The same steps against either server: `exec` runs SQL there, `source` reads its
/// `customers` as `id,name,city` lines.
fn watermark_steps(dir: &Path, exec: &dyn Fn(&str), source: &dyn Fn() -> Vec<String>) {
    let silver = || query(dir, "SELECT id, name, city FROM customers ORDER BY id");
    let bronze = || query(dir, "SELECT count(*) FROM customers_raw")[0].clone();
    run(dir);
    assert_eq!(silver(), source(), "after the first read");
    assert_eq!(bronze(), "3");

    // A newer change, a new row, and a change that committed late with a watermark
    // inside the overlap (30 s below the highest value read).
    exec("UPDATE customers SET city = 'bergen', updated_at = '2024-05-01 12:00:00' WHERE id = 1");
    exec("INSERT INTO customers VALUES (4, 'dee', 'kyiv', '2024-05-01 12:00:01')");
    exec("UPDATE customers SET city = 'late', updated_at = '2024-05-01 10:59:30' WHERE id = 2");
    run(dir);
    assert_eq!(silver(), source(), "after the changes");
    assert_eq!(bronze(), "6", "three new row versions, none read twice");

    // Nothing new: nothing committed.
    run(dir);
    assert_eq!(bronze(), "6");
    assert_eq!(
        query(
            dir,
            "SELECT count(*) FROM (SELECT DISTINCT id, updated_at FROM customers_raw)"
        ),
        vec!["6"]
    );

    // The blind spot: a hard delete is not seen.
    exec("DELETE FROM customers WHERE id = 3");
    run(dir);
    let kept = silver();
    assert!(kept.iter().any(|r| r.starts_with("3,")), "{kept:?}");
    assert_eq!(kept.len(), source().len() + 1);
}

const SOURCE: &str = "CREATE TABLE customers (id int PRIMARY KEY, name varchar(40) NOT NULL, city varchar(40), updated_at datetime(6));
     INSERT INTO customers VALUES (1, 'ann', 'oslo', '2024-05-01 09:00:00'), (2, 'bob', 'rome', '2024-05-01 10:00:00'), (3, 'cy', 'lima', '2024-05-01 11:00:00');";

#[test]
fn read_query_on_mariadb_takes_rows_above_the_watermark_once() {
    let maria = Maria::create("read_query");
    maria.exec(Some(&maria.name), SOURCE);
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(
        dir.path(),
        &maria.name,
        &format!(
            "    kind: mariadb\n    host: {}\n    port: {}\n    database: {}\n    user: {}\n",
            maria.host, maria.port, maria.name, maria.user
        ),
    );
    watermark_steps(
        dir.path(),
        &|sql| maria.exec(Some(&maria.name), sql),
        &|| maria.rows("SELECT id, name, city FROM customers ORDER BY id"),
    );
    // read_postgres cannot read a MariaDB connection: named where it is written.
    std::fs::write(
        dir.path().join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE x AS SELECT * FROM STREAM read_postgres(connection => 'shop', table => 'customers');\n",
    )
    .expect("flows.sql");
    let out = crate::cdcflow(&["validate", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(
        crate::stdout(&out).contains("is a mysql connection")
            || crate::stderr(&out).contains("is a mysql connection"),
        "{}{}",
        crate::stdout(&out),
        crate::stderr(&out)
    );
}

#[test]
fn read_query_on_postgres_takes_rows_above_the_watermark_once() {
    let db = Db::create("read_query");
    db.exec(
        &SOURCE
            .replace("datetime(6)", "timestamp")
            .replace("varchar(40)", "text"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(
        dir.path(),
        &db.name,
        &format!(
            "    kind: postgres\n    host: {}\n    port: {}\n    database: {}\n    user: {}\n",
            db.admin.host, db.admin.port, db.name, db.admin.user
        ),
    );
    watermark_steps(dir.path(), &|sql| db.exec(sql), &|| {
        db.rows("SELECT id, name, city FROM customers ORDER BY id")
    });
}
