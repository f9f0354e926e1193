//! cdcflow as a peer of the CDC-apply benchmark kit (`../shared/bench`, README "Peer
//! contract"): `apply_peer --data DIR --mode scd1|scd2 --out PATH [--path merge|rewrite]`.
//!
//! The timed part is what a `cdcflow run` batch does for an AUTO CDC flow: read the
//! stored state (here: the kit's target or history table, every row an event older
//! than the batch), read the change batch, evaluate the flow's expressions with
//! DataFusion, apply with the kernel, and commit both the internal state table and the
//! published table to Delta (the published one at PATH), by the way a run takes
//! (`cdc::engine::stage`). `--path merge` (the default) seeds both tables as a run creates
//! them, with deletion vectors allowed, so the batch is applied by merge-on-write;
//! `--path rewrite` seeds them without, as a table whose TBLPROPERTIES turn deletion
//! vectors off, so both tables stream through the apply and are rewritten. Build and run:
//!
//! ```text
//! cargo bench --locked -p cdcflow-runtime --bench apply_peer --no-run
//! bash ../shared/bench/run_all.sh 1000000 100000 --peer "cdcflow=$CARGO_TARGET_DIR/release/deps/apply_peer-<hash> --data"
//! ```
//! (see docs/benchmarks.md for the exact command used).

// A benchmark may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation,
    clippy::result_large_err
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cdcflow_plan::autocdc::{AutoCdcSpec, SequenceField};
use cdcflow_runtime::RunError;
use cdcflow_runtime::cdc::engine::{self, Staging, Targets};
use cdcflow_runtime::cdc::events::to_events;
use cdcflow_runtime::cdc::kernel::{Op, RECORDED_AT, Rules};
use cdcflow_runtime::cdc::rules_for;
use cdcflow_runtime::delta::{self, Commit, DataFile, Mode, Table, conform, read_parquet, rewrite};
use datafusion::arrow::array::{Array, AsArray, Int8Array, Int64Array, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::logical_expr::{col, lit};

/// The table property that lets a table's rows be deleted by deletion vectors.
use cdcflow_plan::table_properties::DELETION_VECTORS;

const COLUMNS: [&str; 6] = [
    "customer_id",
    "name",
    "city",
    "tier",
    "balance",
    "updated_at",
];

struct Args {
    data: PathBuf,
    scd2: bool,
    out: PathBuf,
    /// Whether the tables take deletion vectors (merge-on-write) or are rewritten.
    merge: bool,
}

fn args() -> Result<Args, String> {
    let mut data = None;
    let mut mode = None;
    let mut out = None;
    let mut path = "merge".to_string();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--data" => data = it.next(),
            "--mode" => mode = it.next(),
            "--out" => out = it.next(),
            "--path" => path = it.next().ok_or("--path needs merge or rewrite")?,
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let mode = mode.ok_or("--mode scd1|scd2 is required")?;
    Ok(Args {
        data: PathBuf::from(data.ok_or("--data DIR is required")?),
        scd2: match mode.as_str() {
            "scd1" => false,
            "scd2" => true,
            m => return Err(format!("unknown mode {m}")),
        },
        out: PathBuf::from(out.ok_or("--out PATH is required")?),
        merge: match path.as_str() {
            "merge" => true,
            "rewrite" => false,
            p => return Err(format!("unknown path {p} (merge or rewrite)")),
        },
    })
}

fn spec(scd2: bool) -> AutoCdcSpec {
    let columns: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    AutoCdcSpec {
        flow: "bench".into(),
        target: "customers".into(),
        source: "changes".into(),
        streaming: true,
        once: false,
        keys: vec!["customer_id".into()],
        sequence: vec![SequenceField {
            name: "seq".into(),
            expr: col("seq"),
            data_type: DataType::Int64,
        }],
        delete_when: Some(col("op").eq(lit("D"))),
        truncate_when: None,
        filter: None,
        track_history: columns[1..].to_vec(),
        columns,
        scd_type: if scd2 { 2 } else { 1 },
        ignore_null_updates: vec![],
        snapshot: None,
    }
}

/// The kit's stored table as cdcflow state: every row an upsert event, sequenced by
/// `__START_AT` (history) or below every batch event (target: it carries no sequence);
/// narrow for SCD type 1.
fn as_state(rules: &Rules, stored: &RecordBatch, scd2: bool) -> Result<RecordBatch, String> {
    let n = stored.num_rows();
    let mut columns = Vec::new();
    for c in COLUMNS {
        columns.push(Arc::clone(
            stored.column_by_name(c).ok_or(format!("no column {c}"))?,
        ));
    }
    let seq = if scd2 {
        let start = stored
            .column_by_name("__START_AT")
            .ok_or("no __START_AT")?
            .as_primitive::<Int64Type>();
        Arc::new(start.clone()) as Arc<dyn Array>
    } else {
        Arc::new(Int64Array::from(vec![0i64; n]))
    };
    columns.push(seq);
    columns.push(Arc::new(Int8Array::from(vec![Op::Upsert as i8; n])));
    columns.push(Arc::new(Int64Array::from(vec![0i64; n])));
    let schema = rules.event_schema();
    debug_assert_eq!(schema.field(schema.fields().len() - 1).name(), RECORDED_AT);
    let events = RecordBatch::try_new(schema, columns).map_err(|e| e.to_string())?;
    match rules.narrow_state() {
        true => events
            .project(&rules.narrow_columns())
            .map_err(|e| e.to_string()),
        false => Ok(events),
    }
}

/// Writes the rows of `stored_file`, made by `make`, as the Delta table at `dir`, as a
/// run leaves it (untimed). Streamed, so that seeding does not set the peak memory.
async fn seed(
    stored_file: &Path,
    dir: &Path,
    schema: &SchemaRef,
    commit: Commit,
    make: impl Fn(RecordBatch) -> Result<RecordBatch, String> + Send + Sync + 'static,
) -> Result<(), String> {
    let files = [DataFile::plain(stored_file.to_path_buf())];
    copy(
        &files,
        &file_schema(stored_file)?,
        dir,
        schema,
        &commit,
        make,
    )
    .await
}

/// Writes the live rows of `files` (read as `read_schema`), made by `make`, as the Delta
/// table at `dir` in one overwrite, streaming.
async fn copy(
    files: &[DataFile],
    read_schema: &SchemaRef,
    dir: &Path,
    schema: &SchemaRef,
    commit: &Commit,
    make: impl Fn(RecordBatch) -> Result<RecordBatch, String> + Send + Sync + 'static,
) -> Result<(), String> {
    let dest = Table::open_dir(dir).await.map_err(|e| e.to_string())?;
    let (copied, _) = rewrite(files, read_schema, &dest, schema, commit, move |batch| {
        let made = make(batch).map_err(RunError::internal)?;
        Ok((Some(made), ()))
    })
    .await
    .map_err(|e| e.to_string())?
    .ok_or("the table cannot be written file by file")?;
    copied
        .with(vec![])
        .await
        .map_err(|e| e.to_string())?
        .commit(Mode::Overwrite, commit)
        .await
        .map_err(|e| e.to_string())
}

/// Where the published table is written: PATH itself for the rewrite, which the kit's
/// check reads through the Delta log; beside it for merge-on-write, whose deletion
/// vectors the kit's pinned `deltalake` reader (`to_pyarrow_table`) refuses.
fn published_dir(a: &Args) -> PathBuf {
    match a.merge {
        true => a.out.with_extension("cdcflow_table"),
        false => a.out.clone(),
    }
}

/// The current rows of the published table at `table` (deletion vectors applied, as
/// every cdcflow reader applies them) copied, streaming, as a plain Delta table at `out`
/// for the kit's check (untimed).
async fn export(table: &Path, schema: &SchemaRef, out: &Path) -> Result<(), String> {
    let table = Table::open_dir(table).await.map_err(|e| e.to_string())?;
    let files = table.files().map_err(|e| e.to_string())?;
    let commit = Commit {
        name: "customers".into(),
        ..Commit::default()
    };
    copy(&files, schema, out, schema, &commit, Ok).await
}

fn read(path: &Path, schema: &SchemaRef) -> Result<Vec<RecordBatch>, String> {
    read_parquet(path, schema).map_err(|e| e.to_string())
}

fn file_schema(path: &Path) -> Result<SchemaRef, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let builder =
        datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Arc::clone(builder.schema()))
}

fn meta(data: &Path) -> (i64, i64) {
    let text = std::fs::read_to_string(data.join("meta.json")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    (v["n"].as_i64().unwrap_or(-1), v["m"].as_i64().unwrap_or(-1))
}

async fn bench(a: &Args) -> Result<(f64, usize), String> {
    let spec = spec(a.scd2);
    let changes_schema = file_schema(&a.data.join("changes.parquet"))?;
    let rules = rules_for(&spec, &changes_schema, &BTreeMap::new()).map_err(|e| e.to_string())?;
    let stored_file = a.data.join(if a.scd2 {
        "history.parquet"
    } else {
        "target.parquet"
    });
    let state_dir = a.out.with_extension("cdcflow_state");
    let public_dir = published_dir(a);
    // The kit's table is the published table; its rows are the state: every row an
    // upsert event (SCD2: sequenced by `__START_AT`), narrow for SCD type 1.
    // As a run commits them: the batch's txn, and deletion vectors allowed unless the
    // rewrite path is measured.
    let public_commit = Commit {
        txns: vec![("cdcflow:bench".into(), 0)],
        name: "customers".into(),
        configuration: match a.merge {
            true => [(DELETION_VECTORS.to_string(), "true".to_string())].into(),
            false => BTreeMap::new(),
        },
        ..Commit::default()
    };
    let state_commit = Commit {
        name: "customers__state".into(),
        ..public_commit.clone()
    };
    let public_schema = rules.public_schema();
    let conformed = Arc::clone(&public_schema);
    let seeded = |c: &Commit| Commit {
        txns: vec![],
        ..c.clone()
    };
    seed(
        &stored_file,
        &public_dir,
        &public_schema,
        seeded(&public_commit),
        move |b| conform(&b, &conformed).map_err(|e| e.to_string()),
    )
    .await?;
    let (state_rules, scd2) = (rules.clone(), a.scd2);
    seed(
        &stored_file,
        &state_dir,
        &rules.state_schema(),
        seeded(&state_commit),
        move |b| as_state(&state_rules, &b, scd2),
    )
    .await?;

    let started = Instant::now();
    let phase = |name: &str, since: Instant| {
        if std::env::var_os("CDCFLOW_BENCH_PHASES").is_some() {
            eprintln!("{name:>8}: {:>6.3}s", since.elapsed().as_secs_f64());
        }
        Instant::now()
    };
    let state = Table::open_dir(&state_dir)
        .await
        .map_err(|e| e.to_string())?;
    let public = Table::open_dir(&public_dir)
        .await
        .map_err(|e| e.to_string())?;
    let changes = concat_batches(
        &changes_schema,
        &read(&a.data.join("changes.parquet"), &changes_schema)?,
    )
    .map_err(|e| e.to_string())?;
    let t = phase("read", started);
    let events = to_events(
        &spec,
        &rules,
        &changes_schema,
        vec![("changes.parquet".into(), changes)],
        1,
    )
    .await
    .map_err(|e| e.to_string())?;
    let t = phase("events", t);
    let expected = if a.merge {
        Mode::Merge
    } else {
        Mode::Overwrite
    };
    let targets = Targets {
        state: &state,
        state_commit: &state_commit,
        public: &public,
        public_commit: &public_commit,
    };
    // As a run does it: the batch staged by the way the tables allow (merge-on-write,
    // or both tables streamed through the apply into new files), then the published
    // table is committed, then the state.
    let done = match engine::stage(&rules, &targets, vec![events], 1)
        .await
        .map_err(|e| e.to_string())?
    {
        Staging::Staged(done) if done.mode == expected => *done,
        Staging::Staged(_) => return Err("the batch took another path than --path".into()),
        Staging::InMemory(_) => return Err("the batch could not be applied streaming".into()),
    };
    let t = phase("apply", t);
    let rows = done.public_rows;
    done.commit(&targets).await.map_err(|e| e.to_string())?;
    phase("commit", t);
    let seconds = started.elapsed().as_secs_f64();
    if a.merge {
        export(&public_dir, &public_schema, &a.out).await?;
    }
    Ok((seconds, rows))
}

fn main() {
    // As the cdcflow binary does, first of all (see `delta::UPLOAD_CONCURRENCY`).
    if std::env::var_os(delta::UPLOAD_CONCURRENCY_VAR).is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var(delta::UPLOAD_CONCURRENCY_VAR, delta::UPLOAD_CONCURRENCY) };
    }
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("apply_peer: {e}\nusage: apply_peer --data DIR --mode scd1|scd2 --out PATH");
            std::process::exit(2);
        }
    };
    for p in [
        a.out.clone(),
        a.out.with_extension("cdcflow_state"),
        a.out.with_extension("cdcflow_seed"),
        a.out.with_extension("cdcflow_table"),
    ] {
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }
    cdcflow_runtime::allocator::keep_freed_memory();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(bench(&a)) {
        Ok((seconds, rows)) => {
            let (n, m) = meta(&a.data);
            let mode = if a.scd2 { "scd2" } else { "scd1" };
            println!(
                "RESULT tool=cdcflow mode={mode} n={n} m={m} seconds={seconds:.3} rows_out={rows}"
            );
        }
        Err(e) => {
            eprintln!("apply_peer: {e}");
            std::process::exit(1);
        }
    }
}
