//! The `cdcflow` command line: the last stage of the data path and the only place that
//! renders to a terminal.

/// `println!` for what a command prints: a reader gone ends it quietly (see `output`).
macro_rules! outln {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}

/// `eprintln!` that cannot panic (see `output`).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::error_line(format_args!($($arg)*))
    };
}

mod ci_diagnostics;
mod explain;
mod graph;
mod json_logs;
mod optimize;
mod output;
mod query;
mod query_errors;
mod read_only;
mod run;
mod run_error;
mod spark_json;
mod syncs_report;
mod test_cases;
mod ui;
mod usage;
mod vacuum;
mod validate;
mod warning_lines;
mod worker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use cdcflow_runtime::delta;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "cdcflow",
    version,
    about = "Declarative change-data-capture pipelines"
)]
struct Cli {
    /// Logs on stderr: `text` for people, `json` (one object per line, typed fields) for
    /// collectors.
    #[arg(long, value_enum, global = true, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Copy, Clone, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Logs go to stderr, filtered by `RUST_LOG` (default: warnings, and what each flow did
/// in `run`; delta-kernel's report of probing a table not created yet is not a warning).
/// The debug logs of DataFusion and sqlparser print queries and their plans, with the
/// `--conf` values substituted into them (credentials, maybe): they are left out unless
/// `RUST_LOG` names them.
fn init_logs(format: LogFormat) {
    const DEFAULT: &str = "warn,cdcflow_runtime=info,buoyant_kernel=off";
    const PRINT_QUERIES: [&str; 2] = ["datafusion", "sqlparser"];
    let spec = match std::env::var("RUST_LOG") {
        Ok(spec) => {
            let hidden: String = PRINT_QUERIES
                .iter()
                .filter(|t| !spec.contains(*t))
                .map(|t| format!(",{t}=info"))
                .collect();
            spec + &hidden
        }
        Err(_) => DEFAULT.to_string(),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(spec)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.event_format(json_logs::JsonEvent).try_init(),
    };
}

/// Without `RUST_LOG` or `--log-format json`, warnings still reach the user, on stderr
/// one line each (`warning: …` and the fields that go with it), in every command: an
/// offset gap skipped, a topic that does not exist yet, a slot not advanced. What a
/// command prints itself is not repeated as log lines.
fn init_warnings() {
    // delta-rs warns at every write of a binary column that it keeps no statistics of
    // it, which is how Delta works, not a problem of the user's.
    let filter = tracing_subscriber::EnvFilter::new(
        "warn,buoyant_kernel=off,deltalake_core::writer::stats=error",
    );
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(warning_lines::WarningLine)
        .try_init();
}

/// Options every command that reads a pipeline takes.
#[derive(clap::Args, Clone)]
struct PipelineArgs {
    /// The pipeline folder (holding pipeline.yaml).
    #[arg(short = 'p', long = "pipeline", default_value = ".")]
    dir: PathBuf,
    /// Override a configuration value: --conf key=value (repeatable).
    #[arg(long = "conf", value_parser = parse_key_value)]
    conf: Vec<(String, String)>,
}

impl PipelineArgs {
    fn overrides(&self) -> BTreeMap<String, String> {
        self.conf.iter().cloned().collect()
    }
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected key=value, got `{s}`"))
}

/// How a command prints what it found.
#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Lines for people.
    Text,
    /// One JSON object per line (ndjson), for programs.
    Json,
}

/// `--format text|json`, and `--json` for `--format json`.
#[derive(clap::Args, Clone, Copy)]
struct FormatArgs {
    /// `text` for people, `json` for programs (one object per line).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// The same as --format json.
    #[arg(long)]
    json: bool,
}

impl FormatArgs {
    fn json(self) -> bool {
        self.json || self.format == Format::Json
    }
}

#[derive(Copy, Clone, ValueEnum)]
enum DiagnosticFormat {
    /// Rendered for people, with source snippets (stderr).
    Text,
    /// One JSON object per diagnostic (stdout).
    Json,
    /// GitHub Actions workflow commands (`::error file=…,line=…,col=…::message`, stdout):
    /// annotations on the pull request's files.
    Github,
    /// One SARIF 2.1.0 log (stdout), for code-scanning views.
    Sarif,
}

#[derive(Copy, Clone, ValueEnum)]
enum GraphFormat {
    /// A Mermaid flowchart, for Markdown (GitHub renders it).
    Mermaid,
    /// Graphviz DOT.
    Dot,
    /// The nodes and edges as one JSON object.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Parse, resolve and plan every flow; report every problem with its file:line:col.
    Validate {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// `text`: rendered with source snippets on stderr; `json`: one object per
        /// diagnostic on stdout (file, line, column, severity, code, message, help);
        /// `github`: GitHub Actions annotations; `sarif`: a SARIF 2.1.0 log.
        #[arg(long, value_enum, default_value = "text")]
        format: DiagnosticFormat,
        /// The same as --format json.
        #[arg(long)]
        json: bool,
    },
    /// Run the pipeline's test cases (tests/<case>/: input rows per source, expected
    /// rows per table) in a scratch storage each, and show how tables differ.
    Test {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Only the cases with this name, or matching this glob (repeatable).
        #[arg(long = "filter", value_name = "CASE")]
        filter: Vec<String>,
        /// `text`: a line per case and a diff per differing table; `json`: one object
        /// per case; `junit`: a JUnit XML report for CI systems.
        #[arg(long, value_enum, default_value = "text")]
        format: test_cases::TestFormat,
        /// Write each checked table's rows as its expected file (every stored table's,
        /// for a run with no expected files yet), to review with `git diff`.
        #[arg(long)]
        update: bool,
        /// Keep each case's scratch folder (its storage and landing files) and print it.
        #[arg(long)]
        keep: bool,
        /// Cases run at once (default: one per core); each has a storage of its own.
        #[arg(long, value_name = "N")]
        jobs: Option<usize>,
    },
    /// Print the pipeline's graph (sources, tables, views, flows and what reads what).
    Graph {
        #[command(flatten)]
        pipeline: PipelineArgs,
        #[arg(long, value_enum, default_value = "mermaid")]
        format: GraphFormat,
    },
    /// Print the DataFusion plan of each flow (or of one).
    Explain {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Only this flow.
        #[arg(long)]
        flow: Option<String>,
        /// Also the physical plan each flow runs for its next batch, over the input a
        /// run would read now (files and tables; server sources are not read).
        #[arg(long)]
        physical: bool,
        /// Run each flow's physical plan over its next batch's input and show each
        /// operator's metrics (rows, time, memory), as EXPLAIN ANALYZE does. Nothing is
        /// committed. Implies --physical.
        #[arg(long)]
        analyze: bool,
        /// With --physical: the plan as `run --workers` would split it over these
        /// workers (its stages, and where each runs).
        #[arg(long, value_name = "URL,URL…")]
        workers: Option<String>,
    },
    /// Process everything available now: every flow in dependency order, one commit each.
    Run {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Only this flow (repeatable); a glob (`orders_*`, `*_cdc`) names every flow it
        /// matches.
        #[arg(long = "flow")]
        flows: Vec<String>,
        /// Recompute these tables from their sources (all tables when none is named).
        #[arg(long = "full-refresh", num_args = 0.., value_name = "TABLE")]
        full_refresh: Option<Vec<String>>,
        /// With --full-refresh: go ahead even when landing files read before are gone.
        #[arg(long, requires = "full_refresh")]
        force: bool,
        /// With --full-refresh: refresh too the tables that read a refreshed table as a
        /// stream (they fail until refreshed otherwise), and their readers after them.
        #[arg(long, requires = "full_refresh")]
        cascade: bool,
        #[command(flatten)]
        format: FormatArgs,
        /// Keep running: process new landing files as they arrive, until SIGINT/SIGTERM.
        #[arg(long)]
        continuous: bool,
        /// With --continuous: serve Prometheus text metrics (lag, rows, batches, errors
        /// per flow) at http://ADDR/metrics, e.g. 127.0.0.1:9464.
        #[arg(long, requires = "continuous", value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// Apply AUTO CDC batches split in one slice of their keys per worker, on these
        /// `cdcflow worker` processes (http://HOST:PORT, comma-separated); the commits
        /// stay in this process. Every worker must reach the pipeline's storage at the
        /// same path or URL (docs/scale-out.md).
        #[arg(long, value_name = "URL,URL…")]
        workers: Option<String>,
    },
    /// Serve a web page of the pipeline (its graph, each flow's runs and lag, each
    /// table's schema, history and rows, validate's diagnostics), live, until stopped.
    Ui {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Where to serve the page; loopback unless told (port 0 picks a free one).
        #[arg(long, value_name = "ADDR", default_value = ui::DEFAULT_ADDR)]
        addr: std::net::SocketAddr,
    },
    /// Serve as a worker that `cdcflow run --workers` spreads AUTO CDC batches over,
    /// until stopped; prints the address it listens on.
    Worker {
        /// Where to listen, e.g. 127.0.0.1:7001 (port 0 picks a free one). Bind to a
        /// private network only: a worker runs the plans it is sent.
        #[arg(long, value_name = "ADDR")]
        listen: std::net::SocketAddr,
    },
    /// Run SQL over the pipeline's tables.
    Query {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// The query; tables are named as in the pipeline.
        sql: String,
        /// How the rows are printed.
        #[arg(long, value_enum, default_value = "table")]
        format: query::OutputFormat,
        /// The same as --format json.
        #[arg(long)]
        json: bool,
    },
    /// List the pipeline's tables with their kind, SCD type, quarantine table, row count
    /// and Delta version.
    Tables {
        #[command(flatten)]
        pipeline: PipelineArgs,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Compact tables now: small files and files with many deleted rows rewritten into
    /// right-sized ones (sorted by KEYS for AUTO CDC targets, whose state is compacted
    /// too). Refused while a run holds the pipeline.
    Optimize {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// The tables to compact (all when none is named).
        #[arg(value_name = "TABLE")]
        tables: Vec<String>,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Per flow: the last run, rows in and out, lag, backlog and the last error.
    Status {
        #[command(flatten)]
        pipeline: PipelineArgs,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Remove the files no table version within the retention needs; say the bytes freed.
    Vacuum {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Only these tables (every table when none is named); an AUTO CDC target's
        /// internal state goes with it.
        #[arg(value_name = "TABLE")]
        tables: Vec<String>,
        /// Keep what the versions of the last HOURS hours need (default: each table's
        /// delta.deletedFileRetentionDuration, 7 days unless set).
        #[arg(long, value_name = "HOURS")]
        retain: Option<f64>,
        /// Go ahead with --retain shorter than a table's own retention.
        #[arg(long)]
        force: bool,
        /// List what would be removed, and its bytes; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Drop this cdcflow replication slot (and its publication) that no flow of this
        /// pipeline reads, through the pipeline's connections (`status` lists those no
        /// folder claims); no table is vacuumed.
        #[arg(long, value_name = "SLOT")]
        drop_slot: Vec<String>,
        #[command(flatten)]
        format: FormatArgs,
    },
}

/// The async runtime for commands that read or write tables.
fn runtime() -> tokio::runtime::Runtime {
    cdcflow_runtime::allocator::keep_freed_memory();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Flows are planned and run on the workers (independent flows at the same
        // time): a deep plan (a chain of 100 views) recurses as deep there as on the
        // main thread, whose stack is 8 MiB; tokio's default is 2.
        .thread_stack_size(8 * 1024 * 1024)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    }
}

fn main() -> ExitCode {
    if std::env::var_os(delta::UPLOAD_CONCURRENCY_VAR).is_none() {
        // SAFETY: the first thing the process does, before any other thread exists
        // (the tokio runtime and every reader start later), so nothing reads the
        // environment while it changes.
        unsafe { std::env::set_var(delta::UPLOAD_CONCURRENCY_VAR, delta::UPLOAD_CONCURRENCY) };
    }
    cdcflow_runtime::panics::quiet_caught_library_panics();
    let cli = Cli::parse();
    match matches!(cli.log_format, LogFormat::Json) || std::env::var_os("RUST_LOG").is_some() {
        true => init_logs(cli.log_format),
        false => init_warnings(),
    }
    let code = match cli.command {
        Command::Validate {
            pipeline,
            format,
            json,
        } => validate::run(
            &pipeline,
            if json { DiagnosticFormat::Json } else { format },
        ),
        Command::Graph { pipeline, format } => graph::run(&pipeline, format),
        Command::Test {
            pipeline,
            filter,
            format,
            update,
            keep,
            jobs,
        } => test_cases::run(
            &pipeline,
            &test_cases::TestArgs {
                filter,
                jobs: jobs.unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
                }),
                format,
                update,
                keep,
            },
        ),
        Command::Explain {
            pipeline,
            flow,
            physical,
            analyze,
            workers,
        } => explain::run(
            &pipeline,
            flow.as_deref(),
            physical || analyze,
            analyze,
            workers.as_deref(),
        ),
        Command::Run {
            pipeline,
            flows,
            full_refresh,
            force,
            cascade,
            format,
            continuous,
            metrics_addr,
            workers,
        } => run::run(
            &pipeline,
            run::RunArgs {
                flows,
                full_refresh,
                force,
                cascade,
                json: format.json(),
                continuous,
                metrics_addr,
                workers,
            },
        ),
        Command::Worker { listen } => worker::serve(listen),
        Command::Ui { pipeline, addr } => ui::serve(&pipeline, addr),
        Command::Query {
            pipeline,
            sql,
            format,
            json,
        } => query::query(
            &pipeline,
            &sql,
            if json {
                query::OutputFormat::Json
            } else {
                format
            },
        ),
        Command::Tables { pipeline, format } => query::tables(&pipeline, format.json()),
        Command::Status { pipeline, format } => query::status(&pipeline, format.json()),
        Command::Vacuum {
            pipeline,
            drop_slot,
            format,
            ..
        } if !drop_slot.is_empty() => vacuum::drop_slots(&pipeline, &drop_slot, format.json()),
        Command::Vacuum {
            pipeline,
            tables,
            retain,
            force,
            dry_run,
            format,
            ..
        } => vacuum::run(
            &pipeline,
            &cdcflow_runtime::vacuum::VacuumOptions {
                tables,
                retain_hours: retain,
                force,
                dry_run,
            },
            format.json(),
        ),
        Command::Optimize {
            pipeline,
            tables,
            format,
        } => optimize::optimize(&pipeline, &tables, format.json()),
    };
    output::finish(code)
}
