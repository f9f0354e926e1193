//! `cdcflow optimize`: compact tables now (small files and files with many deleted rows
//! rewritten into right-sized ones), printing what changed per table.

use std::process::ExitCode;

use cdcflow_runtime::compact::TableCompaction;

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

/// Bytes for people: B, KiB, MiB or GiB with one decimal.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_shown_in_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
