//! The pipeline's storage in Azure Blob Storage (`az://container/prefix`), against
//! Azurite, Microsoft's emulator (`.ci/azure`), which each test starts on a free
//! loopback port. The store and its credentials come from the environment
//! (`AZURE_STORAGE_USE_EMULATOR`, `AZURITE_BLOB_STORAGE_URL`), as a user's
//! `AZURE_STORAGE_ACCOUNT_NAME` and `AZURE_STORAGE_ACCOUNT_KEY` would. Without Azurite
//! the tests fail saying how to get it.

use std::path::Path;
use std::process::{Command, Output};

use crate::crash::SNAPSHOT;
use crate::object_store::{Loopback, assert_nothing_stored_in, orders_staged_at, path};
use crate::run_examples::python_with_deltalake;
use crate::{repo, stderr, stdout};

/// Azurite's Blob service on loopback, stopped when dropped.
struct Azurite {
    server: Loopback,
    _data: tempfile::TempDir,
}

impl Azurite {
    fn start() -> Self {
        let program = std::env::var("CDCFLOW_AZURITE").unwrap_or_else(|_| {
            let home = std::env::var("HOME").unwrap_or_default();
            format!("{home}/.cache/cdcflow/tools/azurite-3.35.0/node_modules/.bin/azurite-blob")
        });
        let data = tempfile::tempdir().expect("tempdir");
        let location = path(data.path()).to_string();
        let server = Loopback::start(
            &program,
            "run `bash .ci/azure` once (or set CDCFLOW_AZURITE to azurite-blob)",
            |port| {
                [
                    "--blobHost",
                    "127.0.0.1",
                    "--blobPort",
                    port,
                    "--location",
                    &location,
                    "--silent",
                    "--skipApiVersionCheck",
                ]
                .map(String::from)
                .to_vec()
            },
        );
        Self {
            server,
            _data: data,
        }
    }

    /// The environment a process finds the emulator and its account in.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AZURE_STORAGE_USE_EMULATOR", "true".into()),
            ("AZURITE_BLOB_STORAGE_URL", self.server.endpoint.clone()),
        ]
    }

    fn create_container(&self, name: &str) {
        let script = repo().join("tests/e2e/azurite_container.py");
        let out = Command::new(python_with_deltalake())
            .args([path(&script), &self.server.endpoint, name])
            .output()
            .expect("python");
        assert!(out.status.success(), "{}", stderr(&out));
    }

    fn cdcflow(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(args)
            .envs(self.env())
            .output()
            .expect("run cdcflow")
    }

    fn run(&self, dir: &Path) -> String {
        let out = self.cdcflow(&["run", "-p", path(dir)]);
        assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
        stdout(&out)
    }

    fn snapshot(&self, dir: &Path) -> Vec<String> {
        SNAPSHOT
            .iter()
            .map(|sql| {
                let out = self.cdcflow(&["query", "-p", path(dir), sql, "--format", "csv"]);
                assert!(out.status.success(), "{sql}: {}", stderr(&out));
                stdout(&out)
            })
            .collect()
    }
}

#[test]
fn a_pipeline_stored_in_azure_blob_storage_runs_is_maintained_and_reads_as_one_in_a_folder() {
    let azurite = Azurite::start();
    azurite.create_container("lake");
    let (folder, held) = orders_staged_at("_storage");
    let (container, _) = orders_staged_at("az://lake/pipelines/orders");

    let out = azurite.cdcflow(&["validate", "-p", path(container.path())]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    for dir in [folder.path(), container.path()] {
        azurite.run(dir);
        std::fs::write(dir.join("landing/orders/0002.json"), &held).expect("land");
        azurite.run(dir);
    }
    assert_nothing_stored_in(container.path());
    let before = azurite.snapshot(container.path());
    assert_eq!(before, azurite.snapshot(folder.path()));

    // The run's lease was released: the next run takes it at once and finds nothing new.
    let again = azurite.run(container.path());
    assert!(!again.contains("took over"), "{again}");
    assert_eq!(again.matches("up to date").count(), 3, "{again}");

    let out = azurite.cdcflow(&["optimize", "-p", path(container.path())]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("`bronze_order_changes`: 2 of 2 files rewritten into 1"),
        "{}",
        stdout(&out)
    );
    let out = azurite.cdcflow(&[
        "vacuum",
        "-p",
        path(container.path()),
        "--retain",
        "0",
        "--force",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(azurite.snapshot(container.path()), before);
    let status = azurite.cdcflow(&["status", "-p", path(container.path())]);
    assert!(status.status.success(), "{}", stderr(&status));
    assert!(
        stdout(&status).contains("orders_changes"),
        "{}",
        stdout(&status)
    );

    // Another Delta reader (delta-rs' Python package) reads the table from the container.
    let script = "import os\n\
        import pyarrow as pa\n\
        from deltalake import DeltaTable, QueryBuilder\n\
        t = DeltaTable('az://lake/pipelines/orders/tables/silver_orders_history', storage_options={'use_emulator': 'true'})\n\
        q = QueryBuilder().register('history', t)\n\
        rows = [(r['order_id'], r['status']) for r in pa.table(q.execute('SELECT order_id, status FROM history ORDER BY order_id, status')).to_pylist()]\n\
        assert rows == [(100, 'paid'), (100, 'placed'), (100, 'shipped'), (101, 'cancelled'), (101, 'placed'), (102, 'placed')], rows\n\
        os._exit(0)";
    let out = Command::new(python_with_deltalake())
        .args(["-c", script])
        .envs(azurite.env())
        .output()
        .expect("python");
    assert!(out.status.success(), "{}", stderr(&out));
}
