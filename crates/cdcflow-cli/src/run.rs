//! `cdcflow run`: process everything available now, commit, print a summary per flow.

use std::process::ExitCode;

use cdcflow_runtime::sources::Sources;
use cdcflow_runtime::{FlowOutcome, FlowReport, RunOptions, RunReport};

use crate::PipelineArgs;
use crate::validate::print_text;

pub struct RunArgs {
    pub flows: Vec<String>,
    pub full_refresh: Option<Vec<String>>,
    pub force: bool,
    pub cascade: bool,
    pub json: bool,
    pub continuous: bool,
    pub metrics_addr: Option<std::net::SocketAddr>,
    pub workers: Option<String>,
}

/// The source kinds this binary reads.
pub fn sources() -> Sources {
    with_sources(
        cdcflow_postgres::PostgresSources {
            notices: cdcflow_postgres::Notices::to(|text| errln!("note: {text}")),
            ..Default::default()
        },
        cdcflow_mysql::MysqlSources::default(),
    )
}

/// Every source kind of this build, the database log sources as given.
fn with_sources(
    postgres: cdcflow_postgres::PostgresSources,
    mysql: cdcflow_mysql::MysqlSources,
) -> Sources {
    use std::sync::Arc;
    Sources(Arc::new(cdcflow_runtime::sources::AnyOf(vec![
        Arc::new(postgres),
        Arc::new(cdcflow_query::QuerySources),
        Arc::new(cdcflow_kafka::KafkaSources),
        Arc::new(mysql),
    ])))
}

/// Loads the pipeline; when a source's columns are known only to its server, asks it
/// and loads again, so that the flows reading it are planned. A source that cannot be
/// asked is reported, and the exit code returned.
fn load(args: &PipelineArgs) -> Result<cdcflow_plan::Loaded, ExitCode> {
    load_asking(args).map_err(|e| {
        crate::run_error::print(&e);
        ExitCode::from(1)
    })
}

// The runtime's error, whatever its size (a failed load is printed once).
#[allow(clippy::result_large_err)]
fn load_asking(args: &PipelineArgs) -> Result<cdcflow_plan::Loaded, cdcflow_runtime::RunError> {
    crate::runtime().block_on(load_recording(args))
}

/// [`load_discovering`], and the tables the syncs' servers have recorded.
#[allow(clippy::result_large_err)]
async fn load_recording(
    args: &PipelineArgs,
) -> Result<cdcflow_plan::Loaded, cdcflow_runtime::RunError> {
    let (loaded, tables) = load_discovering(args).await?;
    if let Some(pipeline) = loaded
        .pipeline
        .as_ref()
        .filter(|_| !tables.is_empty() && !loaded.has_errors())
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let notes = cdcflow_runtime::syncs::record(pipeline, &tables, now).await?;
        for note in notes {
            errln!("note: {note}");
        }
    }
    Ok(loaded)
}

/// The pipeline loaded again, its sources asked for their columns: a table gained
/// columns the run was not planned with ([`RunReport::needs_planning`]).
#[allow(clippy::result_large_err)]
async fn plan_again(
    args: &PipelineArgs,
) -> Result<cdcflow_plan::Pipeline, cdcflow_runtime::RunError> {
    let loaded = load_recording(args).await?;
    let errors = loaded.has_errors();
    match loaded.pipeline.filter(|_| !errors) {
        Some(pipeline) => Ok(pipeline),
        None => Err(cdcflow_runtime::RunError::input(
            "a source's columns grew, and planned again the pipeline is not valid",
        )
        .with_help("`cdcflow validate` says why")),
    }
}

/// How many times one `cdcflow run` plans the pipeline again for tables that outgrew
/// it, at most (each time a source's columns grew during the run).
const MOST_PLANS: usize = 3;

/// The tables the syncs' servers have, by sync.
type SyncTables = std::collections::BTreeMap<String, Vec<cdcflow_plan::syncs::SourceTable>>;

/// Loads the pipeline with what only its servers know: the tables of its syncs, then
/// the columns of the sources that do not declare them (each answer may add flows the
/// next question needs), and the tables found.
#[allow(clippy::result_large_err)]
pub async fn load_discovering(
    args: &PipelineArgs,
) -> Result<(cdcflow_plan::Loaded, SyncTables), cdcflow_runtime::RunError> {
    let usable =
        |loaded: &cdcflow_plan::Loaded| loaded.pipeline.clone().filter(|_| !loaded.has_errors());
    let sources = sources();
    let mut loaded = crate::validate::load(args);
    let mut discovered = cdcflow_plan::Discovered::default();
    let sound = crate::validate::syncs_sound(&loaded);
    let Some(pipeline) = loaded.pipeline.clone().filter(|_| sound) else {
        return Ok((loaded, SyncTables::new()));
    };
    if !pipeline.syncs.is_empty() {
        discovered.tables = cdcflow_runtime::syncs::ask_tables(&pipeline, &sources).await?;
        let record = cdcflow_runtime::syncs::read_record(&pipeline).await;
        discovered.gone =
            cdcflow_runtime::syncs::gone_since(&record, &discovered.tables, &pipeline.syncs);
        discovered.stored =
            cdcflow_runtime::syncs::stored_in_bucket(&pipeline, &discovered.gone).await?;
        loaded = crate::validate::load_discovered(args, &discovered);
    }
    let Some(pipeline) = usable(&loaded) else {
        return Ok((loaded, discovered.tables));
    };
    discovered.columns = cdcflow_runtime::sources::undeclared_columns(&pipeline, &sources).await?;
    if !discovered.columns.is_empty() {
        loaded = crate::validate::load_discovered(args, &discovered);
    }
    Ok((loaded, discovered.tables))
}

/// The longest pause between two attempts to reach a source server at the start of
/// `--continuous`.
const MOST_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// As [`load`], for `--continuous`: a source server that cannot be reached yet is
/// waited for, as a running pipeline waits for one that restarts, each attempt said
/// on stderr with the pause before the next (doubling, to [`MOST_PATIENCE`]).
fn load_waiting(args: &PipelineArgs) -> Result<cdcflow_plan::Loaded, ExitCode> {
    let mut pause = std::time::Duration::from_secs(1);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match load_asking(args) {
            Err(e) if e.code() == cdcflow_runtime::ErrorCode::SourceUnreachable => {
                errln!(
                    "{} waiting for the source server (attempt {attempt}, next in {} s): {e}",
                    now(),
                    pause.as_secs()
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(MOST_PATIENCE);
            }
            other => {
                return other.map_err(|e| {
                    crate::run_error::print(&e);
                    ExitCode::from(1)
                });
            }
        }
    }
}

pub fn run(args: &PipelineArgs, run: RunArgs) -> ExitCode {
    let loaded = match if run.continuous {
        load_waiting(args)
    } else {
        load(args)
    } {
        Ok(l) => l,
        Err(code) => return code,
    };
    let shown: Vec<_> = loaded
        .diagnostics
        .iter()
        .filter(|d| d.severity != cdcflow_plan::Severity::Note)
        .cloned()
        .collect();
    print_text(&shown);
    let Some(pipeline) = loaded.pipeline.as_ref().filter(|_| !loaded.has_errors()) else {
        errln!("error: the pipeline is not valid; nothing was run");
        return ExitCode::from(1);
    };
    let refreshed = run.full_refresh.as_deref().unwrap_or_default();
    let Some(flows) = crate::usage::expand_flow_globs(pipeline, run.flows) else {
        return ExitCode::from(crate::usage::EXIT);
    };
    if !crate::usage::flows_exist(pipeline, &flows)
        || !crate::usage::tables_exist(pipeline, refreshed)
    {
        return ExitCode::from(crate::usage::EXIT);
    }
    if let Some(tables) = &run.full_refresh
        && !run.cascade
    {
        warn_broken_readers(pipeline, tables);
    }
    let cluster = match run
        .workers
        .as_deref()
        .map(cdcflow_runtime::cluster::Cluster::parse)
    {
        None => None,
        Some(Ok(cluster)) => Some(cluster),
        Some(Err(e)) => {
            errln!("error: --workers: {e}");
            return ExitCode::from(crate::usage::EXIT);
        }
    };
    let options = RunOptions {
        flows,
        full_refresh: run.full_refresh,
        force: run.force,
        cascade: run.cascade,
        now_micros: std::env::var("CDCFLOW_NOW_MICROS")
            .ok()
            .and_then(|v| v.parse().ok()),
        progress: None,
        sources: Some(sources()),
        cluster,
    };
    if run.continuous {
        return continuous(args, pipeline, &options, run.json, run.metrics_addr);
    }
    // A spinner naming the flow under way, on a terminal only (logs elsewhere).
    let spinner = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    });
    let mut options = options;
    if let Some(bar) = &spinner {
        let flow_bar = bar.clone();
        options.progress = Some(cdcflow_runtime::Progress(std::sync::Arc::new(
            move |flow| {
                flow_bar.set_message(format!("running {flow}"));
            },
        )));
        // A large table's initial copy goes chunk by chunk: say how far.
        let copy_bar = bar.clone();
        let copy: cdcflow_mysql::runtime::CopyProgressSink =
            std::sync::Arc::new(move |what: &str| copy_bar.set_message(what.to_string()));
        let notice_bar = bar.clone();
        options.sources = Some(with_sources(
            cdcflow_postgres::PostgresSources {
                progress: Some(std::sync::Arc::clone(&copy)),
                notices: cdcflow_postgres::Notices::to(move |text| {
                    notice_bar.suspend(|| errln!("note: {text}"));
                }),
                ..Default::default()
            },
            cdcflow_mysql::MysqlSources::with_progress(copy),
        ));
    }
    let result = crate::runtime().block_on(async {
        let mut planned = pipeline.clone();
        let mut reports = vec![];
        for _ in 0..MOST_PLANS {
            let report = cdcflow_runtime::run(&planned, &options).await?;
            let again = report.needs_planning();
            reports.push(report);
            if !again {
                break;
            }
            planned = plan_again(args).await?;
        }
        Ok::<_, cdcflow_runtime::RunError>(reports)
    });
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
    match result {
        Ok(reports) => {
            for report in &reports {
                if run.json {
                    for f in &report.flows {
                        outln!("{}", serde_json::to_string(f).unwrap_or_default());
                    }
                } else {
                    print_summary(&pipeline.config.name, report, "");
                }
            }
            match reports.iter().any(RunReport::failed) {
                true => ExitCode::from(1),
                false => ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            crate::run_error::print(&e);
            ExitCode::from(1)
        }
    }
}

/// Said before anything is done: the tables a full refresh of `tables` breaks (they
/// read one as a stream), and how to refresh them in the same run.
fn warn_broken_readers(pipeline: &cdcflow_plan::Pipeline, tables: &[String]) {
    let broken = cdcflow_runtime::cascade::broken_readers(pipeline, tables);
    if broken.is_empty() {
        return;
    }
    let quoted = |names: &[String]| {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    errln!(
        "warning: {} read {} as a stream: after this full refresh they fail until they are refreshed too",
        quoted(&broken),
        quoted(tables)
    );
    errln!(
        "  help: add --cascade to refresh them in this run: `cdcflow run --full-refresh {} --cascade`",
        tables.join(" ")
    );
}

/// The summary of a run; each line starts with `stamp` (continuous mode's time of the
/// batch, else empty).
fn print_summary(name: &str, report: &RunReport, stamp: &str) {
    let width = report.flows.iter().map(|f| f.flow.len()).max().unwrap_or(4);
    outln!("{stamp}pipeline `{name}`");
    for note in &report.notes {
        outln!("{stamp}  note: {note}");
    }
    for f in &report.flows {
        outln!("{stamp}  {:width$}  {}", f.flow, line(f));
        if !f.expectations.is_empty() {
            outln!(
                "{stamp}  {:width$}  expectations: {}",
                "",
                cdcflow_runtime::expectations::summary(&f.expectations)
            );
        }
        if let Some(lag) = f.partition_lag_line() {
            outln!("{stamp}  {:width$}  lag per partition: {lag}", "");
        }
        for slice in &f.slices {
            outln!("{stamp}  {:width$}  {}", "", slice.line());
        }
        for w in &f.warnings {
            outln!("{stamp}  {:width$}  warning: {w}", "");
        }
        if let FlowOutcome::Failed { error, help } = &f.outcome {
            errln!("{stamp}error: flow `{}` failed: {error}", f.flow);
            if let Some(code) = f.error_code {
                errln!("{stamp}  code: {code}");
            }
            if let Some(h) = help {
                errln!("{stamp}  help: {h}");
            }
        }
    }
    for v in report.vacuumed.iter().filter(|v| v.files_removed > 0) {
        outln!(
            "{stamp}  vacuumed {}: {} file(s), {} B freed  ({} ms)",
            v.shown_name(),
            v.files_removed,
            v.bytes_freed,
            v.millis
        );
    }
    let failed = report.flows.iter().filter(|f| f.failed()).count();
    if failed > 0 {
        errln!("{stamp}error: {failed} flow(s) failed; work committed by the others stays");
    }
}

/// Late events, and whether they were applied (SCD2 history) or dropped:
/// `late 0`, `late 2 (applied)`, `late 3 (1 applied, 2 dropped)`.
pub(crate) fn late(applied: u64, dropped: u64) -> String {
    match (applied, dropped) {
        (0, 0) => "late 0".to_string(),
        (n, 0) => format!("late {n} (applied)"),
        (0, n) => format!("late {n} (dropped)"),
        (a, d) => format!("late {} ({a} applied, {d} dropped)", a + d),
    }
}

/// What the snapshots of an AUTO CDC FROM SNAPSHOT flow changed, summed.
fn snapshots_line(f: &FlowReport) -> String {
    let versions: Vec<&str> = f.snapshots.iter().map(|s| s.version.as_str()).collect();
    let sum = |pick: fn(&cdcflow_runtime::cdc::snapshot::Counts) -> u64| {
        f.snapshots.iter().map(|s| pick(&s.counts)).sum::<u64>()
    };
    format!(
        "snapshot {}: inserted {}, updated {}, deleted {}, unchanged {} -> {} ({} rows)",
        versions.join(", "),
        sum(|c| c.inserted),
        sum(|c| c.updated),
        sum(|c| c.deleted),
        sum(|c| c.unchanged),
        f.target,
        f.rows_written
    )
}

fn line(f: &FlowReport) -> String {
    let files = match (f.files, f.tombstones) {
        (0, 0) => String::new(),
        (n, 0) => format!(" from {n} file(s)"),
        (0, t) => format!(" ({t} tombstones)"),
        (n, t) => format!(" from {n} file(s) ({t} tombstones)"),
    };
    let what = match &f.cdc {
        Some(_) if !f.snapshots.is_empty() => snapshots_line(f),
        Some(m) => format!(
            "read {}{files}: upserted {}, deleted {}, {}, duplicates {}{} -> {} ({} rows)",
            f.rows_read,
            m.upserted,
            m.deleted,
            late(m.late_applied, m.late_dropped),
            m.duplicates,
            if m.truncated > 0 {
                format!(", truncated {}", m.truncated)
            } else {
                String::new()
            },
            f.target,
            f.rows_written
        ),
        None if f.kind == "materialized view" => format!(
            "read {}{files}: {} rows -> {}",
            f.rows_read, f.rows_written, f.target
        ),
        None => format!(
            "read {}{files}: appended {} -> {}{}",
            f.rows_read,
            f.rows_written,
            f.target,
            f.state
                .as_ref()
                .map(|s| format!(" (state: {})", s.summary()))
                .unwrap_or_default()
        ),
    };
    let lag = f
        .lag_ms
        .map(|ms| format!(", lag {:.1} s", ms as f64 / 1000.0))
        .unwrap_or_default();
    match &f.outcome {
        FlowOutcome::Committed { batch } => {
            format!(
                "{:<17} batch {batch:<3} {what}  ({} ms{lag})",
                f.kind, f.millis
            )
        }
        FlowOutcome::UpToDate { reason } => format!("{:<17} up to date ({reason})", f.kind),
        FlowOutcome::Skipped { reason } => format!("{:<17} skipped: {reason}", f.kind),
        FlowOutcome::Failed { .. } => format!("{:<17} FAILED", f.kind),
    }
}

/// The time now, UTC, as RFC 3339 with microseconds (as `--log-format json` writes it).
fn now() -> String {
    use tracing_subscriber::fmt::time::FormatTime;
    let mut text = String::new();
    let _ = tracing_subscriber::fmt::time::SystemTime
        .format_time(&mut tracing_subscriber::fmt::format::Writer::new(&mut text));
    text
}

/// `--continuous`: a summary per batch that did something, until SIGINT or SIGTERM;
/// each line starts with the time the batch ended, so that a long-running log says
/// when each batch happened.
fn continuous(
    args: &PipelineArgs,
    pipeline: &cdcflow_plan::Pipeline,
    options: &RunOptions,
    json: bool,
    metrics_addr: Option<std::net::SocketAddr>,
) -> ExitCode {
    let rt = crate::runtime();
    let metrics = std::sync::Arc::new(std::sync::Mutex::new(
        cdcflow_runtime::metrics::Metrics::new(&pipeline.config.name),
    ));
    let result = rt.block_on(async {
        // Listened for before anything runs: a signal that came during the first batch
        // would otherwise find no handler and end the process at once (no graceful
        // stop, no "stopped").
        #[cfg(unix)]
        let mut stops = [
            tokio::signal::unix::SignalKind::terminate(),
            tokio::signal::unix::SignalKind::interrupt(),
        ]
        .map(|kind| tokio::signal::unix::signal(kind).ok());
        if let Some(addr) = metrics_addr {
            let listener = match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => l,
                Err(e) => {
                    return Err(cdcflow_runtime::RunError::input(format!(
                        "--metrics-addr {addr}: {e}"
                    )));
                }
            };
            tokio::spawn(cdcflow_runtime::metrics_http::serve(
                listener,
                std::sync::Arc::clone(&metrics),
            ));
        }
        let signal = async {
            #[cfg(unix)]
            {
                let [Some(term), Some(interrupt)] = &mut stops else {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                };
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = term.recv() => {}
                }
            }
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
        };
        // No one reads the summaries any more (`| head`): stop, as SIGPIPE would.
        let reader_gone = tokio::sync::Notify::new();
        let shutdown = async {
            tokio::select! {
                () = signal => {}
                () = reader_gone.notified() => {}
            }
        };
        let mut first = true;
        cdcflow_runtime::continuous::run_continuous(
            pipeline,
            options,
            |report| {
                if let Ok(mut m) = metrics.lock() {
                    m.record(report);
                }
                let busy = report
                    .flows
                    .iter()
                    .any(|f| !matches!(f.outcome, FlowOutcome::UpToDate { .. }));
                if first || busy {
                    if json {
                        for f in &report.flows {
                            outln!("{}", serde_json::to_string(f).unwrap_or_default());
                        }
                    } else {
                        print_summary(&pipeline.config.name, report, &format!("{} ", now()));
                    }
                }
                first = false;
                if crate::output::reader_gone() {
                    reader_gone.notify_one();
                }
            },
            shutdown,
            {
                let args = args.clone();
                Box::new(move || {
                    let args = args.clone();
                    Box::pin(async move { plan_again(&args).await })
                })
            },
        )
        .await
    });
    match result {
        Ok(()) => {
            if !crate::output::reader_gone() {
                errln!("stopped");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            crate::run_error::print(&e);
            ExitCode::from(1)
        }
    }
}
