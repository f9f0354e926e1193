//! `cdcflow validate`: load the pipeline and print its diagnostics.

use std::process::ExitCode;

use cdcflow_plan::{Diagnostic, Loaded};
use miette::{GraphicalReportHandler, GraphicalTheme};

use crate::{DiagnosticFormat, PipelineArgs};

pub fn run(args: &PipelineArgs, format: DiagnosticFormat) -> ExitCode {
    let loaded = cdcflow_plan::load(&args.dir, &args.overrides());
    match format {
        DiagnosticFormat::Text => print_text(&loaded.diagnostics),
        DiagnosticFormat::Json => print_json(&loaded.diagnostics),
    }
    if loaded.has_errors() {
        if let DiagnosticFormat::Text = format {
            let n = loaded.diagnostics.iter().filter(|d| d.is_error()).count();
            errln!("error: {n} problem(s) found");
        }
        return ExitCode::from(1);
    }
    if let DiagnosticFormat::Text = format {
        outln!("{}", summary(&loaded));
    }
    ExitCode::SUCCESS
}

fn summary(loaded: &Loaded) -> String {
    match &loaded.pipeline {
        Some(p) => format!(
            "pipeline `{}` is valid: {} file(s), {} dataset(s), {} flow(s), {} planned",
            p.config.name,
            p.files.len(),
            p.datasets.len(),
            p.flows.len(),
            p.flows.iter().filter(|f| f.plan.is_some()).count()
        ),
        None => "no pipeline".to_string(),
    }
}

/// Renders diagnostics for a terminal (colour only when stderr is one).
pub fn print_text(diagnostics: &[Diagnostic]) {
    let theme = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme).with_context_lines(1);
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
