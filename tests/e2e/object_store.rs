//! Tables on object storage, against an S3-compatible server (moto, `.ci/s3`) that each
//! test starts on a free loopback port: external Delta tables at `s3://` URLs, written
//! by delta-rs' Python package or copied from a cdcflow table with deletion vectors,
//! are read whole, as a stream and as snapshots; credentials come from the
//! environment. Without moto the tests fail saying how to get it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::run_examples::python_with_deltalake;
use crate::{copy_dir, repo, stderr, stdout};

/// A server process on a free loopback port (an object store's emulator), killed when
/// dropped.
pub(crate) struct Loopback {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) endpoint: String,
}

impl Loopback {
    /// Starts `program` with the arguments `args` gives for the port, and waits until it
    /// listens; `how` says how to install it when it is missing. A free port found by
    /// binding port 0 may be taken by another test's server before this one binds it:
    /// then this one exits, and it is started again on another port, rather than taken
    /// for listening because the other answers.
    pub(crate) fn start(program: &str, how: &str, args: impl Fn(&str) -> Vec<String>) -> Self {
        assert!(Path::new(program).exists(), "no server at {program}: {how}");
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let child = Command::new(program)
                .args(args(&port.to_string()))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{program} starts: {e}"));
            let mut server = Self {
                child,
                endpoint: format!("http://127.0.0.1:{port}"),
            };
            if server.listens(port) {
                return server;
            }
        }
        panic!("{program} exited at start five times (its port taken each time?)")
    }

    /// Whether the server listens on `port` and is still running a moment later (a
    /// server that could not bind exits at once); panics after 30 s of neither.
    fn listens(&mut self, port: u16) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                std::thread::sleep(Duration::from_millis(300));
                return self.child.try_wait().ok().flatten().is_none();
            }
            assert!(
                Instant::now() < deadline,
                "the server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An S3-compatible server on loopback, stopped when dropped.
pub(crate) struct Moto {
    server: Loopback,
}

impl Moto {
    pub(crate) fn start() -> Self {
        let server = Loopback::start(
            &moto_server(),
            "run `bash .ci/s3` once (or set CDCFLOW_MOTO to moto_server)",
            |port| ["-H", "127.0.0.1", "-p", port].map(String::from).to_vec(),
        );
        Self { server }
    }

    /// The environment a process reads the server's credentials and endpoint from.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.server.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// Runs `script` with delta-rs' Python, `STORE` its storage options for this server.
    fn python(&self, script: &str) {
        let options = format!(
            "STORE = {{'AWS_ENDPOINT_URL': '{}', 'AWS_ACCESS_KEY_ID': 'test', 'AWS_SECRET_ACCESS_KEY': 'test', 'AWS_REGION': 'us-east-1', 'AWS_ALLOW_HTTP': 'true', 'aws_conditional_put': 'etag'}}\n",
            self.server.endpoint
        );
        let out = Command::new(python_with_deltalake())
            .args(["-c", &format!("{options}{script}")])
            .output()
            .expect("python");
        assert!(out.status.success(), "{}", stderr(&out));
    }

    /// The same settings as object_store options, for a store opened in this process
    /// ([`as_str_pairs`] makes them what `Storage::remote` takes).
    pub(crate) fn options(&self) -> Vec<(&'static str, String)> {
        let mut options = self.env();
        options.push(("aws_conditional_put", "etag".to_string()));
        options
    }

    pub(crate) fn create_bucket(&self, bucket: &str) {
        self.python(&format!(
            "import urllib.request\nurllib.request.urlopen(urllib.request.Request(STORE['AWS_ENDPOINT_URL'] + '/{bucket}', method='PUT'))"
        ));
    }

    /// Copies the local folder `dir` to `s3://bucket/prefix/`, file by file.
    fn upload(&self, dir: &Path, bucket: &str, prefix: &str) {
        let python = PathBuf::from(std::env::var("CDCFLOW_MOTO").unwrap_or_else(|_| {
            let home = std::env::var("HOME").unwrap_or_default();
            format!("{home}/.cache/cdcflow/s3venv/bin/moto_server")
        }))
        .with_file_name("python");
        let script = format!(
            "import boto3, os, sys\ns3 = boto3.client('s3', endpoint_url='{}', aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1')\nroot = sys.argv[1]\nfor d, _, files in os.walk(root):\n    for f in files:\n        path = os.path.join(d, f)\n        s3.upload_file(path, '{bucket}', '{prefix}/' + os.path.relpath(path, root))",
            self.server.endpoint
        );
        let out = Command::new(python)
            .args(["-c", &script, dir.to_str().expect("utf-8")])
            .output()
            .expect("boto3");
        assert!(out.status.success(), "{}", stderr(&out));
    }

    pub(crate) fn cdcflow(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(args)
            .envs(self.env())
            .output()
            .expect("run cdcflow")
    }

    pub(crate) fn query(&self, dir: &Path, sql: &str) -> String {
        let out = self.cdcflow(&["query", "-p", path(dir), sql, "--format", "csv"]);
        assert!(out.status.success(), "{sql}: {}", stderr(&out));
        stdout(&out)
    }

    /// The CSV answers to `queries` on the pipeline in `dir`.
    fn snapshot(&self, dir: &Path, queries: &[&str]) -> Vec<String> {
        queries.iter().map(|sql| self.query(dir, sql)).collect()
    }

    pub(crate) fn run(&self, dir: &Path) -> String {
        let out = self.cdcflow(&["run", "-p", path(dir)]);
        assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
        stdout(&out)
    }
}

/// The settings of [`Moto::options`] as `Storage::remote` takes them.
pub(crate) fn as_str_pairs<'a>(
    owned: &'a [(&'static str, String)],
) -> Vec<(&'static str, &'a str)> {
    owned.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Points the pipeline in `dir` at `storage` (appended to its pipeline.yaml).
pub(crate) fn store_at(dir: &Path, storage: &str) {
    let yaml = dir.join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("pipeline.yaml");
    std::fs::write(&yaml, format!("{}\nstorage: {storage}\n", text.trim_end()))
        .expect("pipeline.yaml");
}

/// Fails when the pipeline folder `dir` holds a storage folder: a bucket storage writes
/// none (`_storage` is the default's name; `s3:` and the like the folder a URL taken
/// for a path would make).
pub(crate) fn assert_nothing_stored_in(dir: &Path) {
    for folder in ["_storage", "s3:", "s3a:", "gs:", "az:", "abfss:"] {
        assert!(
            !dir.join(folder).exists(),
            "a bucket storage writes nothing into the pipeline folder, yet {folder} is there"
        );
    }
}

/// `CDCFLOW_MOTO`, else where `.ci/s3` installs it.
fn moto_server() -> String {
    std::env::var("CDCFLOW_MOTO").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/cdcflow/s3venv/bin/moto_server")
    })
}

pub(crate) fn path(dir: &Path) -> &str {
    dir.to_str().expect("utf-8")
}

fn pipeline(dir: &Path, yaml: &str, sql: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(dir.join("pipeline.yaml"), yaml).expect("pipeline.yaml");
    std::fs::write(dir.join("flows.sql"), sql).expect("flows.sql");
}

#[test]
fn external_delta_tables_in_a_bucket_are_read_whole_as_streams_and_as_snapshots() {
    let moto = Moto::start();
    moto.create_bucket("lake");
    moto.python(
        "import pyarrow as pa\nfrom deltalake import write_deltalake\n\
         write_deltalake('s3://lake/crm/customers', pa.table({'id': [1, 2, 3], 'name': ['Ada', 'Alan', 'Grace'], 'balance': [10, 20, 30]}), storage_options=STORE)\n\
         write_deltalake('s3://lake/crm/events', pa.table({'id': [1, 2], 'kind': ['open', 'open']}), storage_options=STORE)",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    pipeline(
        p,
        "name: lake\nexternal_tables:\n  crm.customers:\n    format: delta\n    path: s3://lake/crm/customers\n    schema: \"id BIGINT, name STRING, balance BIGINT\"\n  crm.events:\n    format: delta\n    path: s3://lake/crm/events\n    schema: \"id BIGINT, kind STRING\"\n",
        "CREATE OR REFRESH MATERIALIZED VIEW totals AS SELECT count(*) AS customers, sum(balance) AS balance FROM crm.customers;\n\
         CREATE OR REFRESH STREAMING TABLE events AS SELECT * FROM STREAM(crm.events);\n\
         CREATE OR REFRESH STREAMING TABLE customers;\n\
         CREATE FLOW customers_snapshots AS AUTO CDC INTO customers FROM SNAPSHOT (SELECT * FROM crm.customers) KEYS (id) STORED AS SCD TYPE 2;\n",
    );
    let validated = moto.cdcflow(&["validate", "-p", path(p)]);
    assert!(validated.status.success(), "{}", stderr(&validated));
    moto.run(p);
    assert_eq!(
        moto.query(p, "SELECT * FROM totals"),
        "customers,balance\n3,60\n"
    );
    assert_eq!(moto.query(p, "SELECT count(*) AS n FROM events"), "n\n2\n");
    assert_eq!(
        moto.query(p, "SELECT id, name FROM customers ORDER BY id"),
        "id,name\n1,Ada\n2,Alan\n3,Grace\n"
    );

    // The export is replaced (2 changed, 3 gone, 4 new) and two events are appended.
    moto.python(
        "import pyarrow as pa\nfrom deltalake import write_deltalake\n\
         write_deltalake('s3://lake/crm/customers', pa.table({'id': [1, 2, 4], 'name': ['Ada', 'Alan M. Turing', 'Edsger'], 'balance': [10, 25, 40]}), mode='overwrite', storage_options=STORE)\n\
         write_deltalake('s3://lake/crm/events', pa.table({'id': [3, 4], 'kind': ['close', 'open']}), mode='append', storage_options=STORE)",
    );
    moto.run(p);
    assert_eq!(
        moto.query(p, "SELECT * FROM totals"),
        "customers,balance\n3,75\n"
    );
    assert_eq!(
        moto.query(p, "SELECT id, kind FROM events ORDER BY id"),
        "id,kind\n1,open\n2,open\n3,close\n4,open\n"
    );
    assert_eq!(
        moto.query(
            p,
            "SELECT id, name, __END_AT IS NULL AS open FROM customers ORDER BY id, __START_AT"
        ),
        "id,name,open\n1,Ada,true\n2,Alan,false\n2,Alan M. Turing,true\n3,Grace,false\n4,Edsger,true\n"
    );

    // A declared column the table does not have fails the run, naming it.
    let yaml = std::fs::read_to_string(p.join("pipeline.yaml")).expect("yaml");
    std::fs::write(
        p.join("pipeline.yaml"),
        yaml.replace("balance BIGINT\"", "balance BIGINT, email STRING\""),
    )
    .expect("yaml");
    let out = moto.cdcflow(&["run", "-p", path(p), "--flow", "totals"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        said.contains("has no column `email` of its declared `schema:`"),
        "{said}"
    );
}

#[test]
fn a_table_with_deletion_vectors_read_from_a_bucket_gives_its_live_rows() {
    // A cdcflow target whose second batch deletes rows by deletion vectors.
    let local = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/customers"), local.path());
    let changes = local
        .path()
        .join("landing/customers/2024-06-02_changes.csv");
    let aside = local.path().join("changes.csv");
    std::fs::rename(&changes, &aside).expect("set aside");
    let moto = Moto::start();
    moto.run(local.path());
    std::fs::rename(&aside, &changes).expect("put back");
    moto.run(local.path());
    let table = local.path().join("_storage/tables/silver_customers");
    let vectors = std::fs::read_dir(&table)
        .expect("table folder")
        .filter(|e| {
            e.as_ref().is_ok_and(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("deletion_vector_")
            })
        })
        .count();
    assert!(vectors > 0, "the second batch wrote no deletion vector");
    moto.create_bucket("lake");
    moto.upload(&table, "lake", "silver/customers");

    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    pipeline(
        p,
        "name: reader\nexternal_tables:\n  silver.customers:\n    format: delta\n    path: s3://lake/silver/customers\n    schema: \"customer_id BIGINT, name STRING, email STRING, city STRING, updated_at TIMESTAMP\"\n",
        "CREATE OR REFRESH MATERIALIZED VIEW customers AS SELECT customer_id, name, email, city FROM silver.customers;\n",
    );
    moto.run(p);
    let sql = "SELECT customer_id, name, email, city FROM customers ORDER BY customer_id";
    let want = moto.query(
        local.path(),
        "SELECT customer_id, name, email, city FROM silver_customers ORDER BY customer_id",
    );
    assert_eq!(moto.query(p, sql), want);
    assert!(!want.contains("Edsger"), "customer 4 was deleted: {want}");
}

/// The orders example reading its landing folder at `s3://lake/landing` (`--conf`).
fn run_landing_in_bucket(moto: &Moto, dir: &Path) -> String {
    let out = moto.cdcflow(&[
        "run",
        "-p",
        path(dir),
        "--conf",
        "landing=s3://lake/landing",
    ]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    stdout(&out)
}

#[test]
fn a_landing_folder_in_a_bucket_is_read_once_per_object_as_a_folder_is() {
    use crate::crash::SNAPSHOT;
    let moto = Moto::start();
    moto.create_bucket("lake");
    let (folder, held) = orders_staged_at("_storage");
    let (bucket, _) = orders_staged_at("s3://lake/pipelines/orders");
    moto.upload(&bucket.path().join("landing"), "lake", "landing");
    std::fs::remove_dir_all(bucket.path().join("landing")).expect("rm landing");

    let validated = moto.cdcflow(&[
        "validate",
        "-p",
        path(bucket.path()),
        "--conf",
        "landing=s3://lake/landing",
    ]);
    assert!(validated.status.success(), "{}", stderr(&validated));
    assert!(
        !stderr(&validated).contains("warning"),
        "{}",
        stderr(&validated)
    );

    moto.run(folder.path());
    let first = run_landing_in_bucket(&moto, bucket.path());
    assert!(first.contains("bronze_order_changes"), "{first}");
    // The second object lands (without a final line end: an object is whole once seen).
    std::fs::write(folder.path().join("landing/orders/0002.json"), &held).expect("land");
    let late = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(late.path().join("orders")).expect("mkdir");
    let trimmed = held.strip_suffix(b"\n").unwrap_or(&held);
    std::fs::write(late.path().join("orders/0002.json"), trimmed).expect("land");
    // Objects a folder listing leaves out are left out here too.
    std::fs::write(late.path().join("orders/_SUCCESS"), b"").expect("marker");
    moto.upload(late.path(), "lake", "landing");
    moto.run(folder.path());
    run_landing_in_bucket(&moto, bucket.path());
    assert_eq!(
        moto.snapshot(bucket.path(), SNAPSHOT),
        moto.snapshot(folder.path(), SNAPSHOT)
    );
    assert_nothing_stored_in(bucket.path());

    // Read objects are not read again: the next run finds nothing new.
    let again = run_landing_in_bucket(&moto, bucket.path());
    assert_eq!(again.matches("up to date").count(), 3, "{again}");

    // An object rewritten after it was read is named, by its URL, and not read again.
    let rewritten = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(rewritten.path().join("orders")).expect("mkdir");
    std::fs::write(rewritten.path().join("orders/0001.json"), b"{}\n").expect("rewrite");
    moto.upload(rewritten.path(), "lake", "landing");
    let said = run_landing_in_bucket(&moto, bucket.path());
    assert!(
        said.contains("changed after a batch read them")
            && said.contains("s3://lake/landing/orders/0001.json"),
        "{said}"
    );
    assert_eq!(
        moto.snapshot(bucket.path(), SNAPSHOT),
        moto.snapshot(folder.path(), SNAPSHOT)
    );

    // `_metadata` gives each row's object URL.
    let dir = tempfile::tempdir().expect("tempdir");
    pipeline(
        dir.path(),
        "name: landing_metadata\nstorage: s3://lake/pipelines/landing_metadata\n",
        "CREATE OR REFRESH MATERIALIZED VIEW files AS SELECT DISTINCT _metadata.file_path AS file, _metadata.file_size AS size FROM read_files('s3://lake/landing/orders', format => 'json', schema => 'order_id BIGINT');\n",
    );
    moto.run(dir.path());
    assert_eq!(
        moto.query(dir.path(), "SELECT file FROM files ORDER BY file"),
        "file\ns3://lake/landing/orders/0001.json\ns3://lake/landing/orders/0002.json\n"
    );
}

/// The pipeline's records (offsets, identity, listings) kept in a bucket behave as in a
/// folder: written whole, created only once, listed by prefix, deleted; a store
/// without conditional writes is refused with the reason.
#[test]
fn records_in_a_bucket_are_written_whole_created_once_listed_and_deleted() {
    use cdcflow_runtime::storage::{Key, Storage};
    let moto = Moto::start();
    moto.create_bucket("records");
    let owned = moto.options();
    let options = as_str_pairs(&owned);
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            let storage = Storage::remote("s3://records/pipe/_storage", &options).expect("storage");
            let offsets = Key::of(&["checkpoints", "f", "offsets"]).expect("key");
            let one = offsets.join("1.json").expect("key");
            assert_eq!(storage.get(&one).await.expect("get"), None);
            storage.put(&one, b"first").await.expect("put");
            storage.put(&one, b"second").await.expect("put");
            assert_eq!(
                storage.get(&one).await.expect("get").as_deref(),
                Some(&b"second"[..])
            );
            let two = offsets.join("2.json").expect("key");
            assert!(storage.put_new(&two, b"mine").await.expect("create"));
            assert!(!storage.put_new(&two, b"theirs").await.expect("taken"));
            assert_eq!(
                storage.get(&two).await.expect("get").as_deref(),
                Some(&b"mine"[..])
            );
            // A neighbour whose name starts the same is not under the prefix.
            let other = Key::of(&["checkpoints", "f2", "offsets", "1.json"]).expect("key");
            storage.put(&other, b"x").await.expect("put");
            let listed = storage.list(&offsets).await.expect("list");
            let keys: Vec<&str> = listed.iter().map(|e| e.key.as_str()).collect();
            assert_eq!(
                keys,
                [
                    "checkpoints/f/offsets/1.json",
                    "checkpoints/f/offsets/2.json"
                ]
            );
            assert_eq!(listed[0].size, 6);
            assert_eq!(
                storage.describe(&one),
                "s3://records/pipe/_storage/checkpoints/f/offsets/1.json"
            );
            storage.delete(&one).await.expect("delete");
            storage
                .delete(&one)
                .await
                .expect("deleting a gone record is no error");
            storage
                .delete_all(&Key::of(&["checkpoints", "f"]).expect("key"))
                .await
                .expect("delete all");
            assert!(storage.list(&offsets).await.expect("list").is_empty());
            assert_eq!(
                storage
                    .list(&Key::of(&["checkpoints"]).expect("key"))
                    .await
                    .expect("list")
                    .len(),
                1,
                "the neighbour stays"
            );

            let mut unsafe_options = options.clone();
            unsafe_options.retain(|(k, _)| *k != "aws_conditional_put");
            unsafe_options.push(("aws_conditional_put", "disabled"));
            let unsafe_store =
                Storage::remote("s3://records/other", &unsafe_options).expect("storage");
            let err = unsafe_store
                .put_new(&two, b"x")
                .await
                .expect_err("no conditional put")
                .to_string();
            assert!(err.contains("conditional writes"), "{err}");
        });
}

/// The run lock of a storage in a bucket is a lease: refused to a second run while its
/// holder renews it, free at once when released, taken over only after a holder that
/// stopped renewing (as a killed run does) has let its time-to-live pass, and lost by a
/// holder whose record another writer replaced.
#[test]
fn a_lease_in_a_bucket_is_refused_while_renewed_and_taken_over_once_its_holder_stops() {
    use cdcflow_runtime::storage::lease::Lease;
    use cdcflow_runtime::storage::{Key, Remote, Storage};
    let moto = Moto::start();
    moto.create_bucket("leases");
    let owned = moto.options();
    let options = as_str_pairs(&owned);
    tokio::runtime::Runtime::new().expect("runtime").block_on(async {
        let remote = Remote::parse("s3://leases/pipe/_storage", &options).expect("storage");
        let ttl = Duration::from_millis(1500);
        let first = Lease::acquire(&remote, "p", ttl).await.expect("free");
        let err = Lease::acquire(&remote, "p", ttl)
            .await
            .err()
            .expect("held by a run that renews it")
            .to_string();
        assert!(
            err.contains(&format!("pipeline p is being run by pid {}", std::process::id())),
            "{err}"
        );
        first.check().expect("still held");
        first.release().await.expect("released");

        let second = Lease::acquire(&remote, "p", ttl).await.expect("free at once");
        drop(second); // it stops renewing, as a killed run does
        let waiting = Instant::now();
        let third = Lease::acquire(&remote, "p", ttl).await.expect("taken over");
        assert!(
            waiting.elapsed() >= ttl,
            "a lease is taken over only after its time-to-live"
        );
        third.check().expect("held");

        // Another writer replaces the record: the holder's next renewal finds it lost.
        let storage = Storage::Remote(remote.clone());
        let lock = Key::of(&["_run.lock"]).expect("key");
        storage
            .put(&lock, br#"{"token":"someone-else","pid":1,"host":"elsewhere","state":"held","renewed_at_micros":0,"ttl_seconds":1.5}"#)
            .await
            .expect("put");
        tokio::time::sleep(ttl).await;
        let err = third.check().expect_err("lost").to_string();
        assert!(err.contains("run lock on s3://leases/pipe/_storage/_run.lock was lost"), "{err}");
    });
}

/// The orders example (landing files → bronze streaming table → AUTO CDC SCD type 2 →
/// gold materialized view) copied, its storage at `storage`.
pub(crate) fn orders_at(storage: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    store_at(dir.path(), storage);
    dir
}

const ORDERS_HISTORY: &str = "SELECT order_id, status, amount, __START_AT.log_position AS from_pos, __END_AT.log_position AS to_pos FROM silver_orders_history ORDER BY order_id, from_pos";

#[test]
fn a_pipeline_stored_in_a_bucket_runs_and_reads_as_one_stored_in_a_folder() {
    let moto = Moto::start();
    moto.create_bucket("lake");
    let folder = orders_at("_storage");
    let bucket = orders_at("s3://lake/pipelines/orders");

    let out = moto.cdcflow(&["validate", "-p", path(bucket.path())]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    moto.run(folder.path());
    let summary = moto.run(bucket.path());
    assert!(summary.contains("orders_changes"), "{summary}");
    assert_nothing_stored_in(bucket.path());
    for sql in [
        ORDERS_HISTORY,
        "SELECT status, orders, total_amount FROM gold_orders_by_status ORDER BY status",
        "SELECT count(*) AS runs FROM event_log WHERE event = 'run_ended'",
    ] {
        assert_eq!(
            moto.query(bucket.path(), sql),
            moto.query(folder.path(), sql),
            "{sql}"
        );
    }
    assert_eq!(
        moto.query(
            bucket.path(),
            "SELECT count(*) AS versions FROM silver_orders_history"
        ),
        "versions\n6\n"
    );

    // The lease was released: the second run takes it at once, and finds nothing new.
    let again = moto.cdcflow(&["run", "-p", path(bucket.path())]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(!stdout(&again).contains("took over"), "{}", stdout(&again));
    assert_eq!(
        stdout(&again).matches("up to date").count(),
        3,
        "{}",
        stdout(&again)
    );

    let tables = moto.cdcflow(&["tables", "-p", path(bucket.path())]);
    assert!(tables.status.success(), "{}", stderr(&tables));
    let listed = stdout(&tables);
    let row = listed
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| l.starts_with("silver_orders_history"));
    assert_eq!(
        row.as_deref(),
        Some("silver_orders_history streaming table 2 6 0"),
        "{listed}"
    );
    let status = moto.cdcflow(&["status", "-p", path(bucket.path())]);
    assert!(status.status.success(), "{}", stderr(&status));
    assert!(
        stdout(&status).contains("orders_changes"),
        "{}",
        stdout(&status)
    );
    let history = moto.cdcflow(&[
        "query",
        "-p",
        path(bucket.path()),
        "DESCRIBE HISTORY silver_orders_history",
    ]);
    assert!(history.status.success(), "{}", stderr(&history));

    // Another Delta reader reads the tables from the bucket.
    moto.python(
        "import os\n\
         import pyarrow as pa\n\
         from deltalake import DeltaTable, QueryBuilder\n\
         q = QueryBuilder()\n\
         for name in ['silver_orders_history', 'gold_orders_by_status']:\n    \
             q.register(name, DeltaTable('s3://lake/pipelines/orders/tables/' + name, storage_options=STORE))\n\
         rows = pa.table(q.execute('SELECT order_id, status FROM silver_orders_history ORDER BY order_id, status')).to_pylist()\n\
         assert [(r['order_id'], r['status']) for r in rows] == [(100, 'paid'), (100, 'placed'), (100, 'shipped'), (101, 'cancelled'), (101, 'placed'), (102, 'placed')], rows\n\
         gold = pa.table(q.execute('SELECT status, orders FROM gold_orders_by_status ORDER BY status')).to_pylist()\n\
         assert gold == [{'status': 'placed', 'orders': 1}, {'status': 'shipped', 'orders': 1}], gold\n\
         os._exit(0)",
    );
}

#[test]
fn a_run_on_a_bucket_is_refused_while_another_holds_its_lease() {
    let moto = Moto::start();
    moto.create_bucket("lake");
    let bucket = orders_at("s3://lake/pipelines/held");
    // A holder in this process: a live run elsewhere, as the bucket sees it.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let options = moto.options();
    let remote = cdcflow_runtime::storage::Remote::parse(
        "s3://lake/pipelines/held",
        &as_str_pairs(&options),
    )
    .expect("storage");
    let lease = runtime
        .block_on(cdcflow_runtime::storage::lease::Lease::acquire(
            &remote,
            "orders",
            Duration::from_secs(3),
        ))
        .expect("the lease");
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", path(bucket.path())])
        .envs(moto.env())
        .env("CDCFLOW_LEASE_SECONDS", "3")
        .output()
        .expect("run cdcflow");
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("is being run by pid"),
        "{}",
        stderr(&out)
    );
    runtime.block_on(lease.release()).expect("released");
    let out = moto.cdcflow(&["run", "-p", path(bucket.path())]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The orders example at `storage` with its second landing file held back (the file's
/// bytes), as `crash.rs` stages it.
pub(crate) fn orders_staged_at(storage: &str) -> (tempfile::TempDir, Vec<u8>) {
    let dir = orders_at(storage);
    let second = dir.path().join("landing/orders/0002.json");
    let held = std::fs::read(&second).expect("0002.json");
    std::fs::remove_file(&second).expect("remove");
    (dir, held)
}

#[test]
fn a_run_on_a_bucket_killed_at_any_step_of_a_commit_then_rerun_gives_the_tables_of_an_uninterrupted_run_in_a_folder()
 {
    use crate::crash::{POINTS, SNAPSHOT};
    let moto = Moto::start();
    moto.create_bucket("lake");
    let (reference, held) = orders_staged_at("_storage");
    moto.run(reference.path());
    std::fs::write(reference.path().join("landing/orders/0002.json"), &held).expect("land");
    moto.run(reference.path());
    let want = moto.snapshot(reference.path(), SNAPSHOT);

    for (i, point) in POINTS.iter().enumerate() {
        let (dir, held) = orders_staged_at(&format!("s3://lake/crash/{i}"));
        moto.run(dir.path());
        std::fs::write(dir.path().join("landing/orders/0002.json"), &held).expect("land");
        // Aborted, as a SIGKILL would stop it: its lease is left held, and the next
        // run takes it over once it has stopped changing (a short lease here).
        let mut env = moto.env();
        env.push(("CDCFLOW_LEASE_SECONDS", "1".to_string()));
        crate::crash::run_to_failpoint_with(dir.path(), point, &env);
        let rerun = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["run", "-p", path(dir.path())])
            .envs(env)
            .output()
            .expect("run");
        assert!(rerun.status.success(), "{point}: {}", stderr(&rerun));
        assert!(
            stdout(&rerun).contains("took over the run lock of pid"),
            "{point}: {}",
            stdout(&rerun)
        );
        assert_eq!(
            moto.snapshot(dir.path(), SNAPSHOT),
            want,
            "after a crash at {point}"
        );
    }
}

#[test]
fn optimize_and_vacuum_on_a_bucket_keep_every_row_and_free_what_they_name() {
    use crate::crash::SNAPSHOT;
    let moto = Moto::start();
    moto.create_bucket("lake");
    let (reference, held) = orders_staged_at("_storage");
    let (bucket, _) = orders_staged_at("s3://lake/maintained");
    for dir in [reference.path(), bucket.path()] {
        moto.run(dir);
        std::fs::write(dir.join("landing/orders/0002.json"), &held).expect("land");
        moto.run(dir);
    }
    let before = moto.snapshot(bucket.path(), SNAPSHOT);
    assert_eq!(before, moto.snapshot(reference.path(), SNAPSHOT));

    let out = moto.cdcflow(&["optimize", "-p", path(bucket.path())]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("`bronze_order_changes`: 2 of 2 files rewritten into 1"),
        "{}",
        stdout(&out)
    );
    assert_eq!(moto.snapshot(bucket.path(), SNAPSHOT), before);

    let vacuum = |args: &[&str]| -> Vec<serde_json::Value> {
        let mut all = vec!["vacuum", "-p", path(bucket.path()), "--json"];
        all.extend_from_slice(args);
        let out = moto.cdcflow(&all);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    };
    let freed = |tables: &[serde_json::Value]| -> u64 {
        tables
            .iter()
            .map(|t| t["bytes_freed"].as_u64().expect("bytes"))
            .sum()
    };
    let dry = vacuum(&["--dry-run", "--retain", "0", "--force"]);
    let bronze = dry
        .iter()
        .find(|t| t["table"] == "bronze_order_changes")
        .expect("bronze");
    assert_eq!(bronze["files_removed"], 2, "{bronze}");
    let done = vacuum(&["--retain", "0", "--force"]);
    assert_eq!(freed(&done), freed(&dry));
    assert!(freed(&done) > 0);
    let again = vacuum(&["--dry-run", "--retain", "0", "--force"]);
    assert_eq!(freed(&again), 0, "{again:?}");
    assert_eq!(moto.snapshot(bucket.path(), SNAPSHOT), before);

    // The next batch applies once, as in a folder that was never compacted or vacuumed.
    for dir in [reference.path(), bucket.path()] {
        crate::vacuum::land(dir, 3);
        moto.run(dir);
    }
    assert_eq!(
        moto.snapshot(bucket.path(), SNAPSHOT),
        moto.snapshot(reference.path(), SNAPSHOT)
    );
}

/// `crash.rs`'s big pipeline with its storage at `s3://lake/<prefix>` on `moto`, the
/// answers to its snapshot queries after an uninterrupted run in a folder, and the
/// environment of its runs (a short lease, so a rerun takes a stopped run's over
/// quickly).
fn big_pipeline_in_a_bucket(
    moto: &Moto,
    prefix: &str,
) -> (tempfile::TempDir, Vec<String>, Vec<(&'static str, String)>) {
    use crate::crash::{BIG_SNAPSHOT, big_pipeline};
    moto.create_bucket("lake");
    let reference = tempfile::tempdir().expect("tempdir");
    big_pipeline(reference.path());
    moto.run(reference.path());
    let want = moto.snapshot(reference.path(), BIG_SNAPSHOT);
    let dir = tempfile::tempdir().expect("tempdir");
    big_pipeline(dir.path());
    store_at(dir.path(), &format!("s3://lake/{prefix}"));
    let mut env = moto.env();
    env.push(("CDCFLOW_LEASE_SECONDS", "1".to_string()));
    (dir, want, env)
}

#[test]
fn a_run_on_a_bucket_killed_at_random_moments_then_rerun_gives_the_tables_of_an_uninterrupted_run()
{
    use crate::crash::BIG_SNAPSHOT;
    let moto = Moto::start();
    let (dir, want, env) = big_pipeline_in_a_bucket(&moto, "big");
    // Each run after a kill first waits out the killed run's lease (1.33 s here), so
    // the moments are counted from then.
    for delay_ms in [40u64, 260, 610, 150, 900, 1400] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args(["run", "-p", path(dir.path())])
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(1400 + delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", path(dir.path())])
        .envs(env)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(moto.snapshot(dir.path(), BIG_SNAPSHOT), want);
}

/// Where the stateful kill tests keep their killed pipelines: prefixes of a bucket on
/// `moto`, with a short lease so each rerun takes the killed run's over quickly.
fn bucket_keep<'a>(moto: &Moto, bucket: &'a str) -> crate::crash::Keep<'a> {
    let mut env = moto.env();
    env.push(("CDCFLOW_LEASE_SECONDS", "1".to_string()));
    crate::crash::Keep {
        bucket: Some(bucket),
        env,
    }
}

/// Stateful flows keep their state in the bucket: an aggregation over a watermarked
/// stream killed at every point of its batch, then rerun, gives the tables of
/// uninterrupted runs in a folder.
#[test]
fn a_stateful_aggregation_on_a_bucket_killed_at_any_point_then_rerun_gives_the_uninterrupted_tables()
 {
    let moto = Moto::start();
    moto.create_bucket("lake");
    crate::crash::killed_at_each_point_in(
        "stream_tumbling",
        (&["1", "2", "4"], "2"),
        crate::crash::TUMBLING_TABLES,
        crate::crash::TUMBLING_POINTS,
        &bucket_keep(&moto, "s3://lake/stateful"),
    );
}

/// The same for a stream-stream join and a deduplication, at the points around their
/// state's commit.
#[test]
fn a_stream_join_and_a_deduplication_on_a_bucket_killed_around_their_state_then_rerun_give_the_uninterrupted_tables()
 {
    let moto = Moto::start();
    moto.create_bucket("lake");
    let keep = bucket_keep(&moto, "s3://lake/stateful");
    crate::crash::killed_at_each_point_in(
        "stream_join_left_outer",
        (&["1", "2", "3", "5", "6"], "3"),
        &[
            "SELECT * FROM clicked ORDER BY id, shown_at, clicked_at",
            "SELECT id, _side, _watermark FROM clicked__late ORDER BY id",
        ],
        &[
            "state-written:clicked",
            "state-renamed:clicked",
            "before-commit:clicked",
        ],
        &keep,
    );
    crate::crash::killed_at_each_point_in(
        "stream_dedup",
        (&["1", "2", "3"], "2"),
        &[
            "SELECT * FROM deliveries ORDER BY id, ts",
            "SELECT id, ts, _batch, _watermark FROM deliveries__late ORDER BY id",
        ],
        &[
            "state-written:deliveries",
            "state-renamed:deliveries",
            "before-commit:deliveries",
        ],
        &keep,
    );
}

/// A run paused past its lease (SIGSTOP: a suspended machine, a long pause) while
/// another takes the lease over and finishes: woken, it writes nothing more and fails
/// saying it lost the lock, and the tables are those of an uninterrupted run.
#[test]
fn a_run_paused_past_its_lease_stops_at_its_next_write_once_another_run_took_over() {
    use crate::crash::BIG_SNAPSHOT;
    let moto = Moto::start();
    let (dir, want, env) = big_pipeline_in_a_bucket(&moto, "paused");
    let paused = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", path(dir.path())])
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Paused once it holds the lease, a moment into its work.
    let owned = moto.options();
    let storage =
        cdcflow_runtime::storage::Storage::remote("s3://lake/paused", &as_str_pairs(&owned))
            .expect("storage");
    let lock = cdcflow_runtime::storage::Key::of(&["_run.lock"]).expect("key");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !runtime
        .block_on(storage.get(&lock))
        .expect("read the lock")
        .is_some_and(|record| String::from_utf8_lossy(&record).contains("\"held\""))
    {
        assert!(Instant::now() < deadline, "the run never took its lease");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let signal = |name: &str| {
        let sent = Command::new("kill")
            .args([name, &paused.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill {name}");
    };
    signal("-STOP");
    let taking_over = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", path(dir.path())])
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .expect("run");
    assert!(
        taking_over.status.success(),
        "{}{}",
        stdout(&taking_over),
        stderr(&taking_over)
    );
    assert!(
        stdout(&taking_over).contains("took over the run lock of pid"),
        "{}",
        stdout(&taking_over)
    );
    signal("-CONT");
    let woken = paused.wait_with_output().expect("wait");
    assert!(
        !woken.status.success() && stderr(&woken).contains("was lost"),
        "the paused run went on writing:\n{}{}",
        stdout(&woken),
        stderr(&woken)
    );
    assert_eq!(moto.snapshot(dir.path(), BIG_SNAPSHOT), want);
    let again = moto.run(dir.path());
    assert_eq!(again.matches("up to date").count(), 4, "{again}");
    assert_eq!(moto.snapshot(dir.path(), BIG_SNAPSHOT), want);
}

/// `optimize` and `vacuum` on a bucket killed at each of their steps leave tables that
/// read the same, the next command takes the killed one's lease over, and the next
/// batch applies once.
#[test]
fn optimize_and_vacuum_on_a_bucket_killed_at_their_steps_leave_the_tables_and_the_next_batch_whole()
{
    use crate::crash::SNAPSHOT;
    let moto = Moto::start();
    moto.create_bucket("lake");
    let mut env = moto.env();
    env.push(("CDCFLOW_LEASE_SECONDS", "1".to_string()));
    let command = |args: &[&str], failpoint: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cdcflow"));
        c.args(args).envs(env.iter().map(|(k, v)| (*k, v)));
        if let Some(point) = failpoint {
            c.env("CDCFLOW_FAILPOINT", point);
        }
        c.output().expect("cdcflow")
    };
    let two_batches = |storage: &str| {
        let (dir, held) = orders_staged_at(storage);
        moto.run(dir.path());
        std::fs::write(dir.path().join("landing/orders/0002.json"), &held).expect("land");
        moto.run(dir.path());
        dir
    };
    let reference = two_batches("_storage");
    let want = moto.snapshot(reference.path(), SNAPSHOT);
    crate::vacuum::land(reference.path(), 3);
    moto.run(reference.path());
    let want_after = moto.snapshot(reference.path(), SNAPSHOT);

    let vacuum = ["--retain", "0", "--force"];
    let steps: [(&str, &[&str]); 5] = [
        ("optimize-staged:bronze_order_changes", &[]),
        ("optimize-committed:bronze_order_changes", &[]),
        ("vacuum-started:silver_orders_history", &vacuum),
        ("vacuum-deleting:silver_orders_history", &vacuum),
        ("vacuum-ended:silver_orders_history", &vacuum),
    ];
    for (i, (point, extra)) in steps.into_iter().enumerate() {
        let dir = two_batches(&format!("s3://lake/maintenance/{i}"));
        if point.starts_with("vacuum") {
            // Something for the vacuum to delete: the files a compaction replaced.
            let out = command(&["optimize", "-p", path(dir.path())], None);
            assert!(out.status.success(), "{}", stderr(&out));
        }
        let verb = point.split('-').next().unwrap_or_default();
        let mut args = vec![verb, "-p", path(dir.path())];
        args.extend_from_slice(extra);
        let died = command(&args, Some(point));
        assert!(
            !died.status.success() && stderr(&died).contains("failpoint"),
            "{point} was not reached: {}{}",
            stdout(&died),
            stderr(&died)
        );
        assert_eq!(moto.snapshot(dir.path(), SNAPSHOT), want, "after {point}");
        let again = command(&args, None);
        assert!(again.status.success(), "{point}: {}", stderr(&again));
        crate::vacuum::land(dir.path(), 3);
        let out = command(&["run", "-p", path(dir.path())], None);
        assert!(out.status.success(), "{point}: {}", stderr(&out));
        assert_eq!(
            moto.snapshot(dir.path(), SNAPSHOT),
            want_after,
            "the batch after a crash at {point}"
        );
    }
}

/// A periodic snapshot flow stored in a bucket, killed between its two commits, its
/// source changed before the rerun: the history of uninterrupted runs in a folder.
#[test]
fn a_periodic_snapshot_on_a_bucket_killed_between_its_commits_gives_the_uninterrupted_history() {
    let moto = Moto::start();
    moto.create_bucket("lake");
    crate::crash::periodic_snapshot_killed_between_its_commits("s3://lake/periodic", &moto.env());
}

/// An AUTO CDC FROM SNAPSHOT flow stored in a bucket, killed at every point of its
/// batch, then rerun, gives the tables of uninterrupted runs in a folder.
#[test]
fn a_snapshot_flow_on_a_bucket_killed_at_any_point_then_rerun_gives_the_uninterrupted_tables() {
    let moto = Moto::start();
    moto.create_bucket("lake");
    crate::crash::killed_at_each_point_in(
        "snapshot_versions_scd2",
        (&["1"], "1"),
        crate::crash::SNAPSHOT_VERSIONS_TABLES,
        crate::crash::SNAPSHOT_VERSIONS_POINTS,
        &bucket_keep(&moto, "s3://lake/snapshots"),
    );
}
