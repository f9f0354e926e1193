//! `cdcflow query` and `cdcflow tables`: read what runs produced.

use std::io::Write;
use std::process::ExitCode;

use clap::ValueEnum;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;

use crate::PipelineArgs;
use crate::validate::print_text;

#[derive(Copy, Clone, ValueEnum)]
pub enum OutputFormat {
    /// An aligned table.
    Table,
    /// CSV with a header line.
    Csv,
    /// One JSON object per row (ndjson); nulls as null, NaN and infinities as Spark's
    /// strings.
    Json,
}

pub(crate) fn load(args: &PipelineArgs) -> Option<cdcflow_plan::Pipeline> {
    let loaded = crate::validate::load_recorded(args);
    if loaded.has_errors() {
        print_text(&loaded.diagnostics);
        return None;
    }
    loaded.pipeline
}

pub fn query(args: &PipelineArgs, sql: &str, format: OutputFormat) -> ExitCode {
    let Some(pipeline) = load(args) else {
        return ExitCode::from(1);
    };
    let result = crate::runtime().block_on(async {
        // DESCRIBE HISTORY / DETAIL and SHOW TABLES are answered from the Delta logs.
        if let Some(statement) = cdcflow_runtime::describe::parse(sql)? {
            return Ok(vec![
                cdcflow_runtime::describe::answer(&pipeline, &statement).await?,
            ]);
        }
        let (ctx, unreadable) = cdcflow_runtime::catalog::open(&pipeline).await?;
        ctx.register_udtf(
            cdcflow_plan::list_files::NAME,
            std::sync::Arc::new(cdcflow_plan::list_files::Function),
        );
        let df = crate::read_only::sql(&ctx, &pipeline, sql)
            .await
            .map_err(|e| match e {
                // A table not created yet, misspelt, or left out because it cannot be read:
                // say which, in the pipeline's terms. (A refused statement stays refused.)
                cdcflow_runtime::RunError::DataFusion(_) => {
                    crate::query_errors::explain(&ctx, &pipeline, &args.dir, sql, unreadable)
                        .unwrap_or(e)
                }
                refused => refused,
            })?;
        let schema = std::sync::Arc::new(df.schema().as_arrow().clone());
        let mut batches = df.collect().await?;
        if batches.is_empty() {
            // Formats still show the columns of an empty result.
            batches.push(RecordBatch::new_empty(schema));
        }
        Ok::<_, cdcflow_runtime::RunError>(batches)
    });
    match result.map(|batches| write(&batches, format)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        // Stdout failed: `output::finish` says how, if it matters.
        Ok(Err(_)) if crate::output::failed() => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            errln!("error: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            crate::run_error::print_as(&e, &crate::query_errors::message(&e));
            ExitCode::from(1)
        }
    }
}

fn write(batches: &[RecordBatch], format: OutputFormat) -> Result<(), Box<dyn std::error::Error>> {
    let mut out = std::io::BufWriter::new(crate::output::Stdout);
    match format {
        OutputFormat::Table => writeln!(out, "{}", pretty_format_batches(batches)?)?,
        OutputFormat::Csv => {
            let mut w = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            for b in batches {
                w.write(&nested_as_text(b)?)?;
            }
        }
        OutputFormat::Json => {
            let mut w = datafusion::arrow::json::WriterBuilder::new()
                .with_explicit_nulls(true)
                .with_encoder_factory(crate::spark_json::SparkFloats::new())
                .build::<_, datafusion::arrow::json::writer::LineDelimited>(&mut out);
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
    }
    out.flush()?;
    Ok(())
}

pub fn tables(args: &PipelineArgs, json: bool) -> ExitCode {
    let Some(pipeline) = load(args) else {
        return ExitCode::from(1);
    };
    let tables = match crate::runtime().block_on(cdcflow_runtime::catalog::tables(&pipeline)) {
        Ok(tables) => tables,
        Err(e) => {
            crate::run_error::print(&e);
            return ExitCode::from(1);
        }
    };
    if json {
        for t in &tables {
            outln!("{}", serde_json::to_string(t).unwrap_or_default());
        }
    } else {
        print_tables(&tables);
    }
    let mut unreadable = false;
    for t in &tables {
        if let Some(e) = &t.error {
            errln!("error: `{}`: {e}", t.name);
            unreadable = true;
        }
    }
    match unreadable {
        true => ExitCode::from(1),
        false => ExitCode::SUCCESS,
    }
}

/// A line per table: its kind, SCD type (AUTO CDC targets), rows and version; a table
/// that reads landing files is followed by its quarantine table.
fn print_tables(tables: &[cdcflow_runtime::catalog::TableInfo]) {
    let width = tables
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    outln!(
        "{:width$}  {:<17}  {:>3}  {:>10}  {:>7}",
        "name",
        "kind",
        "scd",
        "rows",
        "version"
    );
    let dash = || "-".to_string();
    for t in tables {
        let scd = t.scd_type.map_or_else(dash, |s| s.to_string());
        let rows = t.rows.map_or_else(dash, |r| r.to_string());
        let version = t.version.map_or_else(dash, |v| v.to_string());
        outln!(
            "{:width$}  {:<17}  {scd:>3}  {rows:>10}  {version:>7}",
            t.name,
            t.kind
        );
    }
}

/// CSV has no nested values: structs, lists and maps are written as their display text
/// (`{commit_ts: 2024-06-01T10:00:00Z, log_position: 3}`).
fn nested_as_text(batch: &RecordBatch) -> Result<RecordBatch, Box<dyn std::error::Error>> {
    use datafusion::arrow::array::{ArrayRef, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    use std::sync::Arc;
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| f.data_type().is_nested())
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if !f.data_type().is_nested() {
            fields.push(f.as_ref().clone());
            columns.push(Arc::clone(c));
            continue;
        }
        let fmt = ArrayFormatter::try_new(c.as_ref(), &FormatOptions::default())?;
        let text: StringArray = (0..c.len())
            .map(|i| (!c.is_null(i)).then(|| fmt.value(i).to_string()))
            .collect();
        fields.push(Field::new(
            f.name(),
            datafusion::arrow::datatypes::DataType::Utf8,
            true,
        ));
        columns.push(Arc::new(text));
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

pub fn status(args: &PipelineArgs, json: bool) -> ExitCode {
    let Some(pipeline) = load(args) else {
        return ExitCode::from(1);
    };
    let sources = crate::run::sources();
    let flows = match crate::runtime().block_on(cdcflow_runtime::status::status_with_sources(
        &pipeline,
        Some(&sources),
    )) {
        Ok(f) => f,
        Err(e) => {
            crate::run_error::print(&e);
            return ExitCode::from(1);
        }
    };
    let strays = crate::runtime().block_on(sources.0.strays(&pipeline));
    let record = crate::runtime().block_on(cdcflow_runtime::syncs::read_record(&pipeline));
    // A flow whose table cannot be read is shown, and fails the command.
    let unreadable = flows.iter().any(|f| f.unreadable.is_some());
    let done = || match unreadable {
        true => ExitCode::from(1),
        false => ExitCode::SUCCESS,
    };
    if json {
        for f in &flows {
            outln!("{}", serde_json::to_string(f).unwrap_or_default());
        }
        for stray in &strays {
            outln!("{}", serde_json::to_string(stray).unwrap_or_default());
        }
        for gone in &record.gone {
            outln!("{}", serde_json::json!({ "gone_table": gone }).to_string());
        }
        return done();
    }
    let width = flows.iter().map(|f| f.flow.len()).max().unwrap_or(4).max(4);
    outln!(
        "{:width$}  {:<19}  {:<15}  {:>8}  {:>8}  {:>9}  {:>15}",
        "flow",
        "last run (UTC)",
        "outcome",
        "rows in",
        "rows out",
        "lag",
        "backlog"
    );
    let dash = || "-".to_string();
    for f in &flows {
        let lag = f
            .lag_ms
            .map_or_else(dash, |ms| format!("{:.1} s", ms as f64 / 1000.0));
        let backlog = format!("{} file(s) {} B", f.backlog_files, f.backlog_bytes);
        outln!(
            "{:width$}  {:<19}  {:<15}  {:>8}  {:>8}  {:>9}  {:>15}",
            f.flow,
            f.last_run.clone().unwrap_or_else(dash),
            f.last_event
                .as_deref()
                .unwrap_or("never run")
                .trim_start_matches("flow_"),
            f.rows_read.map_or_else(dash, |n| n.to_string()),
            f.rows_written.map_or_else(dash, |n| n.to_string()),
            lag,
            backlog,
        );
        if let (Some(a), Some(d)) = (f.late_applied, f.late_dropped)
            && a + d > 0
        {
            let late = crate::run::late(a as u64, d as u64);
            outln!("{:width$}  last batch: {late}", "");
        }
        if let Some(state) = &f.state {
            outln!(
                "{:width$}  watermark {}, state: {} row(s) in {} file(s), {}",
                "",
                state.watermark,
                state.groups,
                state.files,
                cdcflow_runtime::sizes::bytes(state.bytes)
            );
        }
        if let Some(e) = &f.last_error {
            outln!("{:width$}  last error: {e}", "");
        }
        for source in &f.sources {
            // A broker's topics: how far behind each partition is, in records and time.
            if !source.partitions.is_empty() {
                outln!("{:width$}  source {}:", "", source.source);
                for p in &source.partitions {
                    let seconds = p
                        .behind_seconds
                        .map(|s| format!(", {s:.1} s"))
                        .unwrap_or_default();
                    outln!(
                        "{:width$}    {}: {} behind{seconds}",
                        "",
                        p.partition,
                        p.behind_messages
                    );
                }
                if let Some(w) = &source.warning {
                    outln!("{:width$}  warning: {w}", "");
                }
                continue;
            }
            let bytes = |b: Option<i64>| {
                b.map_or_else(dash, |b| cdcflow_runtime::sizes::bytes(b.max(0) as u64))
            };
            let seconds = |s: Option<f64>| s.map_or_else(dash, |s| format!("{s:.1} s"));
            let server = source
                .server_lag_seconds
                .map(|s| format!(" (the server: {s:.1} s)"))
                .unwrap_or_default();
            // A binary log reader keeps nothing on the server (no slot).
            let kept = match source.source.starts_with("mysql:") {
                true => String::new(),
                false => format!("{} of WAL kept by its slot, ", bytes(source.retained_bytes)),
            };
            outln!(
                "{:width$}  source {}: {kept}{} behind the server, lag {}{server}",
                "",
                source.source,
                bytes(source.behind_bytes),
                seconds(source.lag_seconds)
            );
            if let Some(w) = &source.warning {
                outln!("{:width$}  warning: {w}", "");
            }
        }
        if let Some(e) = &f.unreadable {
            errln!("error: flow `{}`: {e}", f.flow);
        }
    }
    print_strays(&strays, &args.dir);
    print_gone(&record);
    done()
}

/// Tables of syncs that their servers no longer have: their pipeline tables are kept,
/// no longer updated.
fn print_gone(record: &cdcflow_runtime::syncs::SyncRecord) {
    for g in &record.gone {
        let since = chrono_text(g.since_micros);
        outln!(
            "sync `{}`: table {} is gone from the server (found so by the run at {since} UTC): {} kept as they were, no longer updated",
            g.sync,
            g.table,
            match g.datasets.is_empty() {
                true => "nothing".to_string(),
                false => g.datasets.join(", "),
            }
        );
    }
}

/// µs since the epoch as `YYYY-MM-DD HH:MM:SS`.
fn chrono_text(micros: i64) -> String {
    datafusion::arrow::temporal_conversions::timestamp_us_to_datetime(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| micros.to_string())
}

/// The replication slots on the pipeline's servers that no pipeline folder claims.
fn print_strays(strays: &[cdcflow_runtime::sources::StrayCursor], dir: &std::path::Path) {
    if strays.is_empty() {
        return;
    }
    outln!("replication slots no pipeline folder claims (they keep WAL on the server for nobody):");
    for s in strays {
        let kept = s.retained_bytes.map_or_else(
            || "-".into(),
            |b| cdcflow_runtime::sizes::bytes(b.max(0) as u64),
        );
        let last = s
            .last_claimed_by
            .as_ref()
            .map(|p| format!(", last read by the pipeline storage in {p}, gone"))
            .unwrap_or_default();
        let active = match s.active {
            true => ", streamed by a session now",
            false => "",
        };
        outln!(
            "  {} on {}: keeps {kept} of WAL{last}{active}; drop it: cdcflow vacuum -p {} --drop-slot {}",
            s.name,
            s.server,
            dir.display(),
            s.name
        );
    }
}
