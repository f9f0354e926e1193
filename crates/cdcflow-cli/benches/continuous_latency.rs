//! Continuous-mode latency (a benchmark, not a test): the time from a small change file
//! landing to its change being queryable in the silver table, with `cdcflow run
//! --continuous` on the orders example. Prints the median, p90 and max.
//!
//! ```text
//! cargo bench --locked -p cdcflow-cli --bench continuous_latency
//! ```

// A benchmark may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;

const SAMPLES: usize = 20;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        if entry.file_name() == "_storage" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

async fn count(pipeline: &cdcflow_plan::Pipeline, id: i64) -> i64 {
    let Ok(ctx) = cdcflow_runtime::catalog::session(pipeline).await else {
        return 0;
    };
    let sql = format!("SELECT count(*) FROM silver_orders_history WHERE order_id = {id}");
    let Ok(df) = ctx.sql(&sql).await else {
        return 0;
    };
    let Ok(batches) = df.collect().await else {
        return 0;
    };
    batches
        .first()
        .map(|b| b.column(0).as_primitive::<Int64Type>().value(0))
        .unwrap_or(0)
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo.join("pipelines/orders"), dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args([
            "run",
            "-p",
            dir.path().to_str().expect("utf-8"),
            "--continuous",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cdcflow");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let pipeline = cdcflow_plan::load(dir.path(), &Default::default())
        .pipeline
        .expect("pipeline");
    let start = Instant::now();
    while rt.block_on(count(&pipeline, 100)) == 0 && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let id = 1000 + i as i64;
        let line = format!(
            "{{\"order_id\": {id}, \"customer_id\": 1, \"status\": \"placed\", \"amount\": 1, \"operation\": \"INSERT\", \"commit_ts\": \"2024-07-01T00:00:00Z\", \"log_position\": {}}}\n",
            100 + i
        );
        let tmp = dir.path().join(format!("landing/orders/.{id}.tmp"));
        std::fs::write(&tmp, line).expect("write");
        let landed = Instant::now();
        std::fs::rename(&tmp, dir.path().join(format!("landing/orders/{id}.json")))
            .expect("rename");
        while rt.block_on(count(&pipeline, id)) == 0 {
            assert!(
                landed.elapsed() < Duration::from_secs(30),
                "change {id} not visible after 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        samples.push(landed.elapsed());
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "continuous latency over {SAMPLES} files: median {:.0} ms, p90 {:.0} ms, max {:.0} ms",
        ms(samples[SAMPLES / 2]),
        ms(samples[SAMPLES * 9 / 10]),
        ms(samples[SAMPLES - 1])
    );
}
