//! `cdcflow validate`: load the pipeline and print its diagnostics.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use cdcflow_plan::{Diagnostic, Loaded};

use crate::{DiagnosticFormat, PipelineArgs};

/// Loads the pipeline of `args`; its diagnostics name files as seen from the current
/// folder, as cargo does (`-p pipelines/x` → `pipelines/x/flows.sql:5:9`), so that
/// they can be opened, and clicked in a terminal or CI log, from where the command ran.
pub fn load(args: &PipelineArgs) -> Loaded {
    load_discovered(args, &cdcflow_plan::Discovered::default())
}

/// As [`load`], with the syncs' tables as the last run recorded them in the storage
/// (commands that read what runs made, without asking a server).
pub fn load_recorded(args: &PipelineArgs) -> Loaded {
    let loaded = load(args);
    let Some(pipeline) = loaded.pipeline.as_ref().filter(|p| !p.syncs.is_empty()) else {
        return loaded;
    };
    let record = crate::runtime().block_on(cdcflow_runtime::syncs::read_record(pipeline));
    if record.tables.is_empty() {
        return loaded;
    }
    let gone = record.gone_by_sync();
    let stored =
        crate::runtime().block_on(cdcflow_runtime::syncs::stored_in_bucket(pipeline, &gone));
    load_discovered(
        args,
        &cdcflow_plan::Discovered {
            columns: BTreeMap::new(),
            gone,
            tables: record.tables,
            // Unreadable, the gone tables are left out (their rows stay in the bucket).
            stored: stored.unwrap_or_else(|_| Some(Default::default())),
            ..Default::default()
        },
    )
}

/// As [`load`], with what the servers said.
pub fn load_discovered(args: &PipelineArgs, discovered: &cdcflow_plan::Discovered) -> Loaded {
    let mut loaded = cdcflow_plan::load_discovered(&args.dir, &args.overrides(), discovered);
    let cwd = std::env::current_dir().ok();
    for at in loaded.diagnostics.iter_mut().filter_map(|d| d.at.as_mut()) {
        at.path = shown_path(&args.dir, &at.path, cwd.as_deref());
    }
    loaded
}

/// `file` (relative to the pipeline folder `dir`) relative to `cwd` when it is below
/// it, else as `dir` was given.
pub fn shown_path(dir: &Path, file: &str, cwd: Option<&Path>) -> String {
    let full = dir.join(file);
    let relative = cwd
        .filter(|_| full.is_absolute())
        .and_then(|cwd| full.strip_prefix(cwd).ok())
        .unwrap_or(&full);
    // `./flows.sql` is `flows.sql`.
    let shown: PathBuf = relative
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    shown.to_string_lossy().replace('\\', "/")
}

pub fn run(args: &PipelineArgs, format: DiagnosticFormat) -> ExitCode {
    let mut loaded = load_with_syncs(args);
    let found = server_diagnostics(&loaded);
    let cwd = std::env::current_dir().ok();
    for mut d in found {
        if let Some(at) = d.at.as_mut() {
            at.path = shown_path(&args.dir, &at.path, cwd.as_deref());
        }
        loaded.diagnostics.push(d);
    }
    match format {
        DiagnosticFormat::Text => print_text(&loaded.diagnostics),
        DiagnosticFormat::Json => print_json(&loaded.diagnostics),
        DiagnosticFormat::Github => {
            for line in crate::ci_diagnostics::github(&loaded.diagnostics) {
                outln!("{line}");
            }
        }
        DiagnosticFormat::Sarif => outln!("{}", crate::ci_diagnostics::sarif(&loaded.diagnostics)),
    }
    if loaded.has_errors() {
        if let DiagnosticFormat::Text = format {
            let n = loaded.diagnostics.iter().filter(|d| d.is_error()).count();
            errln!("error: {n} problem(s) found");
        }
        return ExitCode::from(1);
    }
    if let DiagnosticFormat::Text = format {
        if let Some(pipeline) = &loaded.pipeline {
            for line in crate::syncs_report::lines(pipeline) {
                outln!("{line}");
            }
        }
        outln!("{}", summary(&loaded));
    }
    ExitCode::SUCCESS
}

/// Whether the syncs of pipeline.yaml are sound enough to ask their servers: what
/// else fails may be about the tables they bring (a view over a synced table).
pub fn syncs_sound(loaded: &Loaded) -> bool {
    !loaded
        .diagnostics
        .iter()
        .any(|d| d.is_error() && matches!(d.code, "cdcflow::sync" | "cdcflow::config"))
}

/// How long validate waits for the servers of the pipeline's syncs.
const SERVER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// As [`load`]; a pipeline with syncs is expanded with their servers' tables when the
/// servers answer within [`SERVER_PATIENCE`] (else a note says what was not checked).
fn load_with_syncs(args: &PipelineArgs) -> Loaded {
    let mut loaded = load(args);
    let has_syncs = loaded
        .pipeline
        .as_ref()
        .is_some_and(|p| !p.syncs.is_empty());
    if !has_syncs || !syncs_sound(&loaded) {
        return loaded;
    }
    let asked = crate::runtime().block_on(async {
        tokio::time::timeout(SERVER_PATIENCE, crate::run::load_discovering(args)).await
    });
    let unreached = |why: String| {
        Diagnostic::note(
            "cdcflow::server_unreached",
            format!(
                "the syncs' servers were not asked for their tables ({why}): the tables of their patterns, and their keys and types, are checked by the run"
            ),
        )
    };
    match asked {
        Ok(Ok((found, _))) => loaded = found,
        Ok(Err(e)) if e.code() == cdcflow_runtime::ErrorCode::SourceUnreachable => {
            loaded.diagnostics.push(unreached(e.to_string()));
        }
        Ok(Err(e)) => {
            let mut d = Diagnostic::error("cdcflow::source", e.to_string());
            if let Some(help) = e.help() {
                d = d.help(help.to_string());
            }
            loaded.diagnostics.push(d);
        }
        Err(_) => loaded.diagnostics.push(unreached(format!(
            "no answer within {} s",
            SERVER_PATIENCE.as_secs()
        ))),
    }
    loaded
}

/// What the servers of the pipeline's database sources say of them, when they answer
/// (docs/sources.md: validate checks the replica identity of a PostgreSQL table, and a
/// MySQL table and binary log as read_mysql needs them).
fn server_diagnostics(loaded: &Loaded) -> Vec<Diagnostic> {
    let Some(pipeline) = &loaded.pipeline else {
        return vec![];
    };
    let reads = |kind: fn(&cdcflow_plan::Input) -> bool| {
        pipeline.flows.iter().any(|f| f.inputs.iter().any(kind))
    };
    let postgres = reads(|i| matches!(i, cdcflow_plan::Input::Postgres(_)));
    let mysql = reads(|i| matches!(i, cdcflow_plan::Input::Mysql(_)));
    let kafka = reads(|i| matches!(i, cdcflow_plan::Input::Kafka(_)));
    if !postgres && !mysql && !kafka {
        return vec![];
    }
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(async {
            let mut out = vec![];
            if postgres {
                out.extend(cdcflow_postgres::validate::server_diagnostics(pipeline).await);
            }
            if mysql {
                out.extend(cdcflow_mysql::validate::server_diagnostics(pipeline).await);
            }
            if kafka && !loaded.has_errors() {
                out.extend(cdcflow_kafka::validate::server_diagnostics(pipeline));
            }
            out
        }),
        Err(_) => vec![],
    }
}

fn summary(loaded: &Loaded) -> String {
    match &loaded.pipeline {
        Some(p) => format!(
            "pipeline `{}` is valid: {} file(s), {} dataset(s), {} flow(s), {} planned",
            p.config.name,
            p.files.len(),
            // A FROM (query) of an AUTO CDC flow is counted as part of that flow.
            p.datasets.iter().filter(|d| d.source_of.is_none()).count(),
            p.flows
                .iter()
                .filter(|f| p.dataset(&f.target).is_none_or(|d| d.source_of.is_none()))
                .count(),
            p.flows
                .iter()
                .filter(|f| f.plan.is_some())
                .filter(|f| p.dataset(&f.target).is_none_or(|d| d.source_of.is_none()))
                .count()
        ),
        None => "no pipeline".to_string(),
    }
}

/// Renders diagnostics for a terminal (colour only when stderr is one).
pub fn print_text(diagnostics: &[Diagnostic]) {
    let handler = crate::run_error::report_handler().with_context_lines(1);
    for d in diagnostics {
        let report = d.to_report();
        let mut out = String::new();
        if handler.render_report(&mut out, report.as_ref()).is_err() {
            out = format!("{d}\n");
        }
        if let Some(pos) = d.position() {
            errln!("{pos}: {}: {}", d.severity.as_str(), d.message);
        }
        errln!("{out}");
    }
}

fn print_json(diagnostics: &[Diagnostic]) {
    for d in diagnostics {
        let (file, line, column, end_line, end_column): (
            serde_json::Value,
            serde_json::Value,
            serde_json::Value,
            serde_json::Value,
            serde_json::Value,
        ) = match &d.at {
            Some(a) => (
                serde_json::Value::from(a.path.clone()),
                a.span.start.line.into(),
                a.span.start.column.into(),
                a.span.end.line.into(),
                a.span.end.column.into(),
            ),
            None => Default::default(),
        };
        let obj = serde_json::json!({
            "file": file,
            "line": line,
            "column": column,
            "end_line": end_line,
            "end_column": end_column,
            "severity": d.severity.as_str(),
            "code": d.code,
            "message": d.message,
            "help": d.help,
        });
        outln!("{obj}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_shown_from_the_current_folder() {
        let cwd = Path::new("/work/repo");
        let shown = |dir: &str| shown_path(Path::new(dir), "flows.sql", Some(cwd));
        assert_eq!(shown("pipelines/x"), "pipelines/x/flows.sql");
        assert_eq!(shown("./pipelines/x/"), "pipelines/x/flows.sql");
        assert_eq!(shown("."), "flows.sql");
        assert_eq!(shown("../other"), "../other/flows.sql");
        assert_eq!(shown("/work/repo/pipelines/x"), "pipelines/x/flows.sql");
        assert_eq!(shown("/elsewhere/x"), "/elsewhere/x/flows.sql");
    }
}
