//! Benchmark: validating a pipeline of 200 flow files (target: under one second).
//!
//! `cargo bench -p cdcflow-plan --bench validate` (release), or add `--profile dev` for a
//! quick upper bound without the release build. Prints the median of several runs.

// A benchmark may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation
)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const FILES: usize = 200;

fn main() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::write(
        root.join("pipeline.yaml"),
        "name: bench\nconfiguration:\n  landing: landing\n",
    )?;
    for i in 0..FILES {
        let mut sql = String::new();
        let _ = write!(
            sql,
            "CREATE OR REFRESH STREAMING TABLE bronze_{i}\n\
             AS SELECT * FROM STREAM read_files('${{landing}}/t{i}', format => 'json',\n\
               schema => 'id BIGINT, name STRING, city STRING, amount DECIMAL(12,2), op STRING, commit_ts TIMESTAMP, pos BIGINT');\n\
             CREATE OR REFRESH STREAMING TABLE silver_{i};\n\
             CREATE FLOW cdc_{i} AS AUTO CDC INTO silver_{i} FROM STREAM(bronze_{i})\n\
               KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY (commit_ts, pos)\n\
               COLUMNS * EXCEPT (op, commit_ts, pos) STORED AS SCD TYPE {};\n\
             CREATE OR REFRESH MATERIALIZED VIEW gold_{i} AS\n\
               SELECT city, count(*) AS n, sum(amount) AS total FROM silver_{i} GROUP BY city;\n",
            1 + i % 2
        );
        std::fs::write(root.join(format!("flow_{i:03}.sql")), sql)?;
    }
    let mut times: Vec<Duration> = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        let loaded = cdcflow_plan::load(root, &BTreeMap::new());
        times.push(start.elapsed());
        assert!(!loaded.has_errors(), "{:?}", loaded.diagnostics.first());
        let p = loaded.pipeline.expect("pipeline");
        assert_eq!(
            p.flows.iter().filter(|f| f.plan.is_some()).count(),
            3 * FILES
        );
    }
    times.sort();
    println!(
        "validate {FILES} flow files ({} flows): median {:.1} ms, min {:.1} ms, max {:.1} ms",
        3 * FILES,
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
    Ok(())
}
