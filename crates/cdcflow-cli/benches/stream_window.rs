//! Tumbling-window aggregation over a watermarked stream, cdcflow against Spark (a
//! benchmark, not a test): `CDCFLOW_STREAM_BENCH_EVENTS` events (1e7 by default) over
//! 100,000 keys, event times a little out of order, land as Parquet files in
//! `CDCFLOW_STREAM_BENCH_BATCHES` batches (10); after each, one `cdcflow run` of
//! `count(*)` and `sum(v)` per key and 1-minute window with a 10-minute delay. The same
//! files and SQL then run in Spark (`pyspark==4.3.0`, `local[2]`, 4 GiB, its RocksDB state
//! store, as Databricks runs it: the default in-memory one ran out of heap at 1e7; the venv of
//! `.ci/spark`, or the python `CDCFLOW_SPARK_PYTHON` names), one `Trigger.AvailableNow`
//! per batch. Prints per batch cdcflow's time, state rows and peak RSS, then both
//! throughputs; the windows appended must be the same number in both. Then an interval
//! join of two watermarked streams, `CDCFLOW_STREAM_BENCH_JOIN_EVENTS` (1e6) per side in
//! the same number of batches, each impression clicked within 90 s, runs the same way
//! (0 skips it). docs/benchmarks.md keeps the figures.
//!
//! ```text
//! cargo bench --locked -p cdcflow-cli --bench stream_window
//! CDCFLOW_STREAM_BENCH_EVENTS=1000000 cargo bench --locked -p cdcflow-cli --bench stream_window
//! ```

// A benchmark may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use datafusion::arrow::array::{Int64Array, RecordBatch, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::parquet::arrow::ArrowWriter;

const KEYS: i64 = 100_000;
/// 2026-01-01T00:00:00Z.
const START_MICROS: i64 = 1_767_225_600_000_000;
/// Event time advances this much per event (100 minutes over 1e7 events by default).
const STEP_MICROS: i64 = 600;

const FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE per_minute AS
SELECT k, window.start AS window_start, count(*) AS n, sum(v) AS total
FROM STREAM read_files('landing', format => 'parquet')
  WATERMARK ts DELAY OF INTERVAL 10 MINUTES AS e
GROUP BY k, window(ts, '1 minute');
";

const SPARK: &str = r#"
import os, shutil, sys, time
from pyspark.sql import SparkSession
data, work, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
         .config("spark.driver.memory", "4g")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
landing = os.path.join(work, "landing")
os.makedirs(landing)
query = """SELECT k, window.start AS window_start, count(*) AS n, sum(v) AS total
FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 10 MINUTES AS e
GROUP BY k, window(ts, '1 minute')"""
total = 0.0
for b in range(batches):
    name = "batch-%04d.parquet" % b
    shutil.copy(os.path.join(data, name), os.path.join(landing, name))
    spark.readStream.schema("k BIGINT, ts TIMESTAMP, v BIGINT").parquet(landing).createOrReplaceTempView("events")
    started = time.monotonic()
    (spark.sql(query).writeStream.format("parquet").option("path", os.path.join(work, "out"))
        .option("checkpointLocation", os.path.join(work, "cp")).outputMode("append")
        .trigger(availableNow=True).start().awaitTermination())
    took = time.monotonic() - started
    total += took
    print("spark batch %d: %.2f s" % (b, took), flush=True)
rows = spark.read.parquet(os.path.join(work, "out")).count()
print("spark total %.3f windows %d" % (total, rows), flush=True)
"#;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes batch `b` of `per_batch` events as Parquet: keys spread by a multiplier, event
/// times rising with up to two minutes of disorder.
fn write_batch(path: &Path, b: u64, per_batch: u64) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("v", DataType::Int64, true),
    ]));
    let file = fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), None).unwrap();
    let chunk = 1_000_000u64;
    let mut i = b * per_batch;
    let end = (b + 1) * per_batch;
    while i < end {
        let n = chunk.min(end - i);
        let ids: Vec<i64> = (i..i + n).map(|x| x as i64).collect();
        let k = Int64Array::from_iter_values(ids.iter().map(|x| (x * 7_919) % KEYS));
        let ts = TimestampMicrosecondArray::from_iter_values(
            ids.iter()
                .map(|x| START_MICROS + x * STEP_MICROS - (x * 104_729 % 120) * 1_000_000),
        )
        .with_timezone("UTC");
        let v = Int64Array::from_iter_values(ids.iter().map(|x| x % 1_000));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(k), Arc::new(ts), Arc::new(v)],
        )
        .unwrap();
        writer.write(&batch).unwrap();
        i += n;
    }
    writer.close().unwrap();
}

fn spark_python() -> Option<PathBuf> {
    let python = std::env::var_os("CDCFLOW_SPARK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache/cdcflow/spark-venv/bin/python")
        });
    python.exists().then_some(python)
}

const JOIN_FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE clicked AS
SELECT i.id, i.t1 AS shown_at, c.t2 AS clicked_at
FROM STREAM read_files('landing/impressions', format => 'parquet') WATERMARK t1 DELAY OF INTERVAL 1 MINUTE i
JOIN STREAM read_files('landing/clicks', format => 'parquet') WATERMARK t2 DELAY OF INTERVAL 1 MINUTE c
ON i.id = c.id AND c.t2 >= i.t1 AND c.t2 <= i.t1 + INTERVAL 2 MINUTES;
";

const SPARK_JOIN: &str = r#"
import os, shutil, sys, time
from pyspark.sql import SparkSession
data, work, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
         .config("spark.driver.memory", "4g")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
for side in ("impressions", "clicks"):
    os.makedirs(os.path.join(work, side))
query = """SELECT i.id, i.t1 AS shown_at, c.t2 AS clicked_at
FROM STREAM(impressions) WATERMARK t1 DELAY OF INTERVAL 1 MINUTE i
JOIN STREAM(clicks) WATERMARK t2 DELAY OF INTERVAL 1 MINUTE c
ON i.id = c.id AND c.t2 >= i.t1 AND c.t2 <= i.t1 + INTERVAL 2 MINUTES"""
total = 0.0
for b in range(batches):
    for side, schema in (("impressions", "id BIGINT, t1 TIMESTAMP"), ("clicks", "id BIGINT, t2 TIMESTAMP")):
        name = "%s-%04d.parquet" % (side, b)
        shutil.copy(os.path.join(data, name), os.path.join(work, side, name))
        spark.readStream.schema(schema).parquet(os.path.join(work, side)).createOrReplaceTempView(side)
    started = time.monotonic()
    (spark.sql(query).writeStream.format("parquet").option("path", os.path.join(work, "out"))
        .option("checkpointLocation", os.path.join(work, "cp")).outputMode("append")
        .trigger(availableNow=True).start().awaitTermination())
    took = time.monotonic() - started
    total += took
    print("spark join batch %d: %.2f s" % (b, took), flush=True)
rows = spark.read.parquet(os.path.join(work, "out")).count()
print("spark total %.3f windows %d" % (total, rows), flush=True)
"#;

/// Writes batch `b` of both sides of the join: impressions `id` at `t1`, each clicked
/// once at `t1` plus up to 90 seconds.
fn write_join_batch(data: &Path, b: u64, per_batch: u64) {
    let ts_type = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    for (side, column, offset) in [("impressions", "t1", false), ("clicks", "t2", true)] {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new(column, ts_type.clone(), true),
        ]));
        let path = data.join(format!("{side}-{b:04}.parquet"));
        let mut writer =
            ArrowWriter::try_new(fs::File::create(path).unwrap(), Arc::clone(&schema), None)
                .unwrap();
        let ids: Vec<i64> = (b * per_batch..(b + 1) * per_batch)
            .map(|x| x as i64)
            .collect();
        let id = Int64Array::from_iter_values(ids.iter().copied());
        let ts =
            TimestampMicrosecondArray::from_iter_values(ids.iter().map(|x| {
                START_MICROS + x * 60_000 + if offset { (x % 90) * 1_000_000 } else { 0 }
            }))
            .with_timezone("UTC");
        let batch =
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(id), Arc::new(ts)]).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }
}

/// Lands each batch's files under `pipeline` (named by `files(b)`: source file, folder
/// under landing), runs cdcflow after each, and gives the total time, the rows the flow
/// `flow` appended and the peak RSS in KiB; prints a line per batch.
fn run_cdcflow(
    pipeline: &Path,
    batches: u64,
    per_batch: u64,
    flow: &str,
    files: &dyn Fn(u64) -> Vec<(PathBuf, &'static str)>,
) -> (Duration, u64, u64) {
    let mut total = Duration::ZERO;
    let mut peak_kib = 0u64;
    let mut appended = 0u64;
    println!(
        "batch  seconds  events/s  state rows  disk bytes  memory bytes  appended  peak RSS MiB"
    );
    for b in 0..batches {
        for (from, folder) in files(b) {
            let landed = pipeline
                .join("landing")
                .join(folder)
                .join(from.file_name().unwrap());
            fs::create_dir_all(landed.parent().unwrap()).unwrap();
            fs::copy(&from, &landed).unwrap();
            // Landed a while ago: settled, so the run does not wait for it.
            fs::File::options()
                .write(true)
                .open(&landed)
                .unwrap()
                .set_modified(SystemTime::now() - Duration::from_secs(3600))
                .unwrap();
        }
        let started = Instant::now();
        let out = Command::new("/usr/bin/time")
            .args([
                "-f",
                "maxrss_kib=%M",
                env!("CARGO_BIN_EXE_cdcflow"),
                "run",
                "-p",
            ])
            .arg(pipeline)
            .args(["--format", "json"])
            .output()
            .unwrap();
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "cdcflow run failed:\n{stdout}\n{stderr}"
        );
        total += took;
        let rss: u64 = stderr
            .lines()
            .find_map(|l| l.strip_prefix("maxrss_kib="))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        peak_kib = peak_kib.max(rss);
        // One JSON object per flow.
        let report: serde_json::Value = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["flow"] == flow)
            .unwrap_or_default();
        let written = report["rows_written"].as_u64().unwrap_or(0);
        appended += written;
        println!(
            "{b:>5}  {:>7.2}  {:>8.0}  {:>10}  {:>10}  {:>12}  {:>8}  {:>12.0}",
            took.as_secs_f64(),
            per_batch as f64 / took.as_secs_f64(),
            report["state"]["rows_total"],
            report["state"]["state_bytes"],
            report["state"]["memory_used_bytes"],
            written,
            rss as f64 / 1024.0
        );
    }
    (total, appended, peak_kib)
}

/// Runs `script` in Spark over `data`; gives its total trigger time and rows written.
fn run_spark(python: &Path, script: &str, work: &Path, data: &Path, batches: u64) -> (f64, u64) {
    let path = work.join("spark.py");
    fs::write(&path, script).unwrap();
    let spark_work = work.join("spark");
    let _ = fs::remove_dir_all(&spark_work);
    let out = Command::new(python)
        .arg(&path)
        .arg(data)
        .arg(&spark_work)
        .arg(batches.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "spark failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in stdout
        .lines()
        .filter(|l| l.starts_with("spark ") && l.contains("batch"))
    {
        println!("{line}");
    }
    stdout
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("spark total ")?;
            let (s, w) = rest.split_once(" windows ")?;
            Some((s.parse::<f64>().ok()?, w.trim().parse::<u64>().ok()?))
        })
        .expect("spark's total")
}

fn main() {
    let events = env_u64("CDCFLOW_STREAM_BENCH_EVENTS", 10_000_000);
    let batches = env_u64("CDCFLOW_STREAM_BENCH_BATCHES", 10);
    let per_batch = events / batches;
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    fs::create_dir_all(&data).unwrap();
    let generated = Instant::now();
    for b in 0..batches {
        write_batch(&data.join(format!("batch-{b:04}.parquet")), b, per_batch);
    }
    eprintln!(
        "{events} events in {batches} batch(es) of {per_batch}, {KEYS} keys, written in {:.1} s",
        generated.elapsed().as_secs_f64()
    );

    let pipeline = work.path().join("pipeline");
    fs::create_dir_all(pipeline.join("landing")).unwrap();
    fs::write(pipeline.join("pipeline.yaml"), "name: stream_window\n").unwrap();
    fs::write(pipeline.join("flows.sql"), FLOWS).unwrap();
    let (total, appended, peak_kib) =
        run_cdcflow(&pipeline, batches, per_batch, "per_minute", &|b| {
            vec![(data.join(format!("batch-{b:04}.parquet")), ".")]
        });
    let ours = events as f64 / total.as_secs_f64();
    println!(
        "cdcflow: {events} events in {:.2} s: {ours:.0} events/s; {appended} windows appended; peak RSS {:.0} MiB",
        total.as_secs_f64(),
        peak_kib as f64 / 1024.0
    );

    let python = spark_python();
    match &python {
        Some(python) => {
            let (seconds, windows) = run_spark(python, SPARK, work.path(), &data, batches);
            let theirs = events as f64 / seconds;
            println!(
                "spark (local[2]): {events} events in {seconds:.2} s: {theirs:.0} events/s; {windows} windows appended"
            );
            println!("cdcflow / spark: {:.1}x", ours / theirs);
            assert_eq!(
                appended, windows,
                "cdcflow and Spark appended different numbers of windows"
            );
        }
        None => println!(
            "spark: not run (no pyspark venv: bash .ci/spark, or set CDCFLOW_SPARK_PYTHON)"
        ),
    }

    let join_events = env_u64("CDCFLOW_STREAM_BENCH_JOIN_EVENTS", 1_000_000);
    if join_events == 0 {
        return;
    }
    let per_batch = join_events / batches;
    for b in 0..batches {
        write_join_batch(&data, b, per_batch);
    }
    let pipeline = work.path().join("join");
    fs::create_dir_all(pipeline.join("landing/impressions")).unwrap();
    fs::create_dir_all(pipeline.join("landing/clicks")).unwrap();
    fs::write(pipeline.join("pipeline.yaml"), "name: stream_join\n").unwrap();
    fs::write(pipeline.join("flows.sql"), JOIN_FLOWS).unwrap();
    println!("join: {join_events} impressions and as many clicks in {batches} batch(es)");
    let (total, joined, peak_kib) =
        run_cdcflow(&pipeline, batches, 2 * per_batch, "clicked", &|b| {
            vec![
                (
                    data.join(format!("impressions-{b:04}.parquet")),
                    "impressions",
                ),
                (data.join(format!("clicks-{b:04}.parquet")), "clicks"),
            ]
        });
    let ours = (2 * join_events) as f64 / total.as_secs_f64();
    println!(
        "cdcflow join: {} events in {:.2} s: {ours:.0} events/s; {joined} pairs appended; peak RSS {:.0} MiB",
        2 * join_events,
        total.as_secs_f64(),
        peak_kib as f64 / 1024.0
    );
    if let Some(python) = &python {
        let (seconds, pairs) = run_spark(python, SPARK_JOIN, work.path(), &data, batches);
        let theirs = (2 * join_events) as f64 / seconds;
        println!(
            "spark join (local[2]): {} events in {seconds:.2} s: {theirs:.0} events/s; {pairs} pairs appended",
            2 * join_events
        );
        println!("cdcflow / spark (join): {:.1}x", ours / theirs);
        assert_eq!(
            joined, pairs,
            "cdcflow and Spark appended different numbers of pairs"
        );
    }
}
