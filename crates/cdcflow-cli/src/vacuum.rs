//! `cdcflow vacuum`: remove the files no table version within the retention needs, and
//! print per table the files removed, the bytes freed and the retention used.

use std::process::ExitCode;

use cdcflow_runtime::vacuum::{TableVacuum, VacuumOptions};

use crate::PipelineArgs;

pub fn run(args: &PipelineArgs, options: &VacuumOptions, json: bool) -> ExitCode {
    let Some(pipeline) = crate::query::load(args) else {
        return ExitCode::from(1);
    };
    if !crate::usage::tables_exist(&pipeline, &options.tables) {
        return ExitCode::from(crate::usage::EXIT);
    }
    let result = crate::runtime().block_on(cdcflow_runtime::vacuum::vacuum(&pipeline, options));
    let tables = match result {
        Ok(t) => t,
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
        print_text(&pipeline.config.name, &tables, options.dry_run);
    }
    ExitCode::SUCCESS
}

/// `--drop-slot`: drops each named replication slot no flow of the pipeline reads.
pub fn drop_slots(args: &PipelineArgs, names: &[String], json: bool) -> ExitCode {
    let Some(pipeline) = crate::query::load(args) else {
        return ExitCode::from(1);
    };
    let rt = crate::runtime();
    let own: Vec<String> = match rt.block_on(cdcflow_postgres::runtime::slots_in_use(&pipeline)) {
        Ok(in_use) => in_use.into_values().flatten().collect(),
        Err(e) => {
            crate::run_error::print(&e);
            return ExitCode::from(1);
        }
    };
    let mut code = ExitCode::SUCCESS;
    for name in names {
        match rt.block_on(cdcflow_postgres::slots::drop_named(&pipeline, name, &own)) {
            Ok(done) if json => {
                outln!(
                    "{}",
                    serde_json::json!({ "slot": name, "dropped": true, "message": done })
                );
            }
            Ok(done) => outln!("{done}"),
            Err(e) => {
                crate::run_error::print(&e);
                code = ExitCode::from(1);
            }
        }
    }
    code
}

fn print_text(name: &str, tables: &[TableVacuum], dry_run: bool) {
    match dry_run {
        true => outln!("pipeline `{name}`: vacuum dry run, nothing removed"),
        false => outln!("pipeline `{name}`: vacuum"),
    }
    let width = tables
        .iter()
        .map(|t| t.shown_name().len())
        .max()
        .unwrap_or(5);
    for t in tables {
        if let Some(note) = &t.note {
            outln!("  {:width$}  {note}", t.shown_name());
            continue;
        }
        outln!(
            "  {:width$}  {:>5} file(s) {:>12} B  retention {} h",
            t.shown_name(),
            t.files_removed,
            t.bytes_freed,
            t.retention_hours
        );
        if dry_run {
            for f in &t.files {
                outln!("  {:width$}    would remove {f}", "");
            }
        }
        if t.kept_for_readers > 0 {
            outln!(
                "  {:width$}    kept {} file(s) a streaming reader has yet to read",
                "",
                t.kept_for_readers
            );
        }
        for f in &t.through_links {
            outln!(
                "  {:width$}    left alone: {f} is reached through a link",
                ""
            );
        }
    }
    let files: u64 = tables.iter().map(|t| t.files_removed).sum();
    let bytes: u64 = tables.iter().map(|t| t.bytes_freed).sum();
    match dry_run {
        true => outln!("total: {files} file(s), {bytes} B would be freed"),
        false => outln!("total: {files} file(s) removed, {bytes} B freed"),
    }
}
