//! A database of its own for each test, on the server of `PGHOST`/`PGPORT`/`PGUSER`
//! (127.0.0.1:5432, postgres by default); dropped with its slots when the test ends.

use cdcflow_postgres::PgConnection;
use tokio_postgres::Client;

pub struct TestDb {
    pub connection: PgConnection,
    admin: PgConnection,
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.into())
}

impl TestDb {
    /// Creates database `cdcflow_it_<name>` (dropping a leftover of an earlier run).
    pub async fn create(name: &str) -> TestDb {
        let admin = PgConnection {
            host: env("PGHOST", "127.0.0.1"),
            port: env("PGPORT", "5432").parse().expect("PGPORT"),
            database: "postgres".into(),
            user: env("PGUSER", "postgres"),
            password: std::env::var("PGPASSWORD").ok(),
            tls: Default::default(),
        };
        let database = format!("cdcflow_it_{name}");
        let client = admin.connect().await.unwrap_or_else(|e| {
            panic!(
                "these tests need a PostgreSQL server with wal_level = logical at {}:{} (user {}): {e}; run `bash .ci/postgres` (README, \"PostgreSQL for the source's tests\")",
                admin.host, admin.port, admin.user
            )
        });
        drop_database(&client, &database).await;
        client
            .batch_execute(&format!("CREATE DATABASE {database}"))
            .await
            .expect("create database");
        TestDb {
            connection: admin.with_database(&database),
            admin,
        }
    }

    pub async fn client(&self) -> Client {
        self.connection.connect().await.expect("connect")
    }

    pub async fn drop(self) {
        let client = self.admin.connect().await.expect("connect");
        drop_database(&client, &self.connection.database).await;
    }
}

async fn drop_database(client: &Client, database: &str) {
    // A walsender may hold a slot for a moment after its client said goodbye.
    for _ in 0..100 {
        let active = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND active",
                &[&database],
            )
            .await
            .expect("slots")
            .get::<_, i64>(0);
        if active == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    client
        .query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active",
            &[&database],
        )
        .await
        .expect("drop slots");
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
        .await
        .expect("drop database");
}
