//! `cdcflow optimize`: compact tables now (small files and files with many deleted rows
//! rewritten into right-sized ones), printing what changed per table.

use std::process::ExitCode;

use cdcflow_runtime::compact::TableCompaction;
use cdcflow_runtime::sizes::bytes;

use crate::PipelineArgs;

pub fn optimize(args: &PipelineArgs, tables: &[String], json: bool) -> ExitCode {
    let Some(pipeline) = crate::query::load(args) else {
        return ExitCode::from(1);
    };
    if !crate::usage::tables_exist(&pipeline, tables) {
        return ExitCode::from(crate::usage::EXIT);
    }
    let result = crate::runtime().block_on(cdcflow_runtime::compact::optimize(&pipeline, tables));
    let done = match result {
        Ok(done) => done,
        Err(e) => {
            crate::run_error::print(&e);
            return ExitCode::from(1);
        }
    };
    if json {
        for t in &done {
            outln!("{}", serde_json::to_string(t).unwrap_or_default());
        }
        return ExitCode::SUCCESS;
    }
    outln!("pipeline `{}`", pipeline.config.name);
    for t in &done {
        outln!("  {}", line(t));
    }
    ExitCode::SUCCESS
}

fn line(t: &TableCompaction) -> String {
    if let Some(why) = &t.skipped {
        return format!("{}: not compacted: {why}", t.shown());
    }
    if !t.compacted() {
        return format!(
            "{}: nothing to compact ({} file{})",
            t.shown(),
            t.files_before,
            if t.files_before == 1 { "" } else { "s" }
        );
    }
    format!(
        "{}: {} of {} files rewritten into {}, {} rows, {} → {}",
        t.shown(),
        t.files_removed,
        t.files_before,
        t.files_added,
        t.rows,
        bytes(t.bytes_removed),
        bytes(t.bytes_added)
    )
}
