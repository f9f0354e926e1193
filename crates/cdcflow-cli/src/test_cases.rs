//! `cdcflow test`: runs a pipeline's test cases (`cdcflow_runtime::pipeline_tests`) and
//! prints what they found: for people, a diff per table as a failed assertion reads in
//! pytest (rows expected and missing, rows found and unexpected, changed rows with the
//! differing cells marked); for programs, JSON; for CI systems, JUnit XML.
//! Exit 0 when every case passed, 1 when one failed, 2 when one cannot be run as written.

use std::process::ExitCode;

use cdcflow_runtime::pipeline_tests::{self, CaseReport, TableCheck, TableDiff, TestOptions};

use crate::PipelineArgs;

#[derive(Copy, Clone, clap::ValueEnum)]
pub enum TestFormat {
    /// A line per case, and a diff per table that differs (stdout).
    Text,
    /// One JSON object per case (ndjson, stdout).
    Json,
    /// A JUnit XML report (stdout), for CI systems' test views.
    Junit,
}

pub struct TestArgs {
    pub filter: Vec<String>,
    /// Cases run at once.
    pub jobs: usize,
    pub format: TestFormat,
    pub update: bool,
    pub keep: bool,
}

/// Rows shown per kind of difference before the rest is counted.
const ROWS_SHOWN: usize = 20;

pub fn run(pipeline: &PipelineArgs, args: &TestArgs) -> ExitCode {
    let root = &pipeline.dir;
    if !root.join("pipeline.yaml").is_file() {
        errln!("error: no pipeline.yaml in {}", root.display());
        return ExitCode::from(2);
    }
    let cases = match pipeline_tests::discover(root) {
        Ok(cases) => cases,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cases: Vec<pipeline_tests::Found> = cases
        .into_iter()
        .filter(|c| args.filter.is_empty() || args.filter.iter().any(|f| matches(f, &c.name)))
        .collect();
    if cases.is_empty() {
        errln!(
            "error: no test case{} in {}",
            if args.filter.is_empty() {
                String::new()
            } else {
                format!(" matching {}", args.filter.join(", "))
            },
            root.join(pipeline_tests::TESTS_DIR).display()
        );
        errln!(
            "  help: a case is a folder tests/<case>/ with input/<table>.json and expect/<table>.csv (docs/testing.md)"
        );
        return ExitCode::from(2);
    }
    let options = TestOptions {
        configuration: pipeline.overrides(),
        update: args.update,
        keep: args.keep,
    };
    let name = cdcflow_plan::load(root, &options.configuration)
        .pipeline
        .map(|p| p.config.name)
        .unwrap_or_else(|| root.display().to_string());
    let started = std::time::Instant::now();
    let text = matches!(args.format, TestFormat::Text);
    let reports = crate::runtime().block_on(run_cases(root, cases, options, args.jobs, |r| {
        if text {
            print_case(r, root);
        }
    }));
    let seconds = started.elapsed().as_secs_f64();
    match args.format {
        TestFormat::Text => print_summary(&reports, seconds, args.update),
        TestFormat::Json => {
            for r in &reports {
                outln!("{}", case_json(r));
            }
        }
        TestFormat::Junit => outln!("{}", junit(&name, &reports, seconds)),
    }
    if reports.iter().any(|r| r.error.is_some()) {
        ExitCode::from(2)
    } else if reports.iter().all(CaseReport::passed)
        || (args.update && reports.iter().all(|r| r.failures.is_empty()))
    {
        // Updating writes what the tables hold; a flow that failed is no such thing.
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Runs the cases found, `jobs` at a time (each in a storage of its own), telling
/// `done` of each report in the cases' order as soon as it and those before it are
/// done. A case that cannot be read, or whose run panics, is reported as not runnable.
async fn run_cases(
    root: &std::path::Path,
    found: Vec<pipeline_tests::Found>,
    options: TestOptions,
    jobs: usize,
    done: impl Fn(&CaseReport),
) -> Vec<CaseReport> {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(jobs.max(1)));
    let options = std::sync::Arc::new(options);
    let count = found.len();
    let mut reports: Vec<Option<CaseReport>> = (0..count).map(|_| None).collect();
    let mut running = tokio::task::JoinSet::new();
    let mut tasks = std::collections::HashMap::new();
    for (i, f) in found.into_iter().enumerate() {
        let case = match f.case {
            Ok(case) => case,
            Err(e) => {
                reports[i] = Some(CaseReport::not_runnable(&f.name, e));
                continue;
            }
        };
        let (root, options, slots) = (
            root.to_path_buf(),
            std::sync::Arc::clone(&options),
            std::sync::Arc::clone(&slots),
        );
        let handle = running.spawn(async move {
            let _slot = slots.acquire_owned().await;
            (i, pipeline_tests::run_case(&root, &case, &options).await)
        });
        tasks.insert(handle.id(), (i, f.name));
    }
    let mut next = 0;
    let tell = |reports: &[Option<CaseReport>], next: &mut usize| {
        while *next < count
            && let Some(r) = &reports[*next]
        {
            done(r);
            *next += 1;
        }
    };
    tell(&reports, &mut next);
    while let Some(joined) = running.join_next_with_id().await {
        match joined {
            Ok((_, (i, report))) => reports[i] = Some(report),
            Err(e) => {
                if let Some((i, name)) = tasks.get(&e.id()) {
                    let error =
                        pipeline_tests::CaseError::new(format!("the case's run stopped: {e}"));
                    reports[*i] = Some(CaseReport::not_runnable(name, error));
                }
            }
        }
        tell(&reports, &mut next);
    }
    reports.into_iter().flatten().collect()
}

/// `--filter`: a case's name, or a glob (`late_*`), as `run --flow` takes them.
fn matches(filter: &str, name: &str) -> bool {
    crate::usage::glob_matches(filter, name)
}

fn print_case(report: &CaseReport, root: &std::path::Path) {
    let status = match (&report.error, report.passed()) {
        (Some(_), _) => "ERROR",
        (None, true) => "ok",
        (None, false) => "FAILED",
    };
    outln!("{status:<6} {} ({:.2} s)", report.name, report.seconds);
    if let Some(e) = &report.error {
        outln!("  {}", shown(e, root));
    }
    for f in &report.failures {
        outln!("  {f}");
    }
    for path in &report.updated {
        outln!("  wrote {}", relative(path, root));
    }
    for note in &report.notes {
        outln!("  note: {note}");
    }
    if let Some(kept) = &report.kept {
        outln!("  scratch folder kept: {}", kept.display());
    }
    for check in report.checks.iter().filter(|c| !c.diff.is_empty()) {
        for line in diff_lines(check, root) {
            outln!("{line}");
        }
    }
}

fn shown(e: &pipeline_tests::CaseError, root: &std::path::Path) -> String {
    let mut text = String::new();
    if let Some(path) = &e.path {
        text.push_str(&format!("{}: ", relative(path, root)));
    }
    text.push_str(&e.message);
    if let Some(help) = &e.help {
        text.push_str(&format!("\n  help: {help}"));
    }
    text
}

fn relative(path: &std::path::Path, root: &std::path::Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The diff of one table: a header naming the table, the run and the file; then the
/// rows, `-` expected and missing, `+` found and unexpected, and for a changed row both,
/// with `^` under the cells that differ.
pub fn diff_lines(check: &TableCheck, root: &std::path::Path) -> Vec<String> {
    let d = &check.diff;
    let mut counts = Vec::new();
    for (n, what) in [
        (d.changed.len(), "changed"),
        (d.missing.len(), "missing"),
        (d.unexpected.len(), "unexpected"),
    ] {
        if n > 0 {
            counts.push(format!("{n} {what}"));
        }
    }
    let mut out = vec![format!(
        "  run {}, table `{}` ({}): {} ({} rows expected, {} found)",
        check.run,
        check.table,
        relative(&check.file, root),
        counts.join(", "),
        check.expected_rows,
        check.found_rows
    )];
    let cell = |c: &Option<String>| c.clone().unwrap_or_else(|| "NULL".into());
    let mut shown: Vec<&pipeline_tests::Row> = Vec::new();
    shown.extend(d.changed.iter().take(ROWS_SHOWN).flat_map(|(a, b)| [a, b]));
    shown.extend(d.missing.iter().take(ROWS_SHOWN));
    shown.extend(d.unexpected.iter().take(ROWS_SHOWN));
    let widths: Vec<usize> = (0..check.columns.len())
        .map(|i| {
            shown
                .iter()
                .map(|r| cell(&r[i]).chars().count())
                .chain([check.columns[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line_with = |mark: &str, cells: Vec<String>, separator: &str| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("    {mark} {}", padded.join(separator))
            .trim_end()
            .to_string()
    };
    let line = |mark: &str, cells: Vec<String>| line_with(mark, cells, " | ");
    out.push(line(" ", check.columns.clone()));
    for (expected, found) in d.changed.iter().take(ROWS_SHOWN) {
        out.push(line("-", expected.iter().map(cell).collect()));
        out.push(line("+", found.iter().map(cell).collect()));
        let differ = TableDiff::differing(expected, found);
        let marks: Vec<String> = (0..check.columns.len())
            .map(|i| match differ.contains(&i) {
                true => "^".repeat(widths[i].max(1)),
                false => String::new(),
            })
            .collect();
        out.push(line_with(" ", marks, "   "));
    }
    for row in d.missing.iter().take(ROWS_SHOWN) {
        out.push(line("-", row.iter().map(cell).collect()));
    }
    for row in d.unexpected.iter().take(ROWS_SHOWN) {
        out.push(line("+", row.iter().map(cell).collect()));
    }
    for (n, what) in [
        (d.changed.len(), "changed"),
        (d.missing.len(), "missing"),
        (d.unexpected.len(), "unexpected"),
    ] {
        if n > ROWS_SHOWN {
            out.push(format!("    … and {} more {what} rows", n - ROWS_SHOWN));
        }
    }
    if !check.keys.is_empty() && !d.changed.is_empty() {
        out.push(format!("    (rows paired by {})", check.keys.join(", ")));
    }
    out
}

fn print_summary(reports: &[CaseReport], seconds: f64, update: bool) {
    let passed = reports.iter().filter(|r| r.passed()).count();
    let errors = reports.iter().filter(|r| r.error.is_some()).count();
    let failed = reports.len() - passed - errors;
    outln!();
    if update {
        let wrote: usize = reports.iter().map(|r| r.updated.len()).sum();
        outln!(
            "updated: {wrote} expected file(s) written for {} case(s); review them with `git diff` ({seconds:.2} s)",
            reports.len() - errors
        );
    } else {
        outln!(
            "test result: {}. {passed} passed, {failed} failed, {errors} not runnable ({seconds:.2} s)",
            if passed == reports.len() {
                "ok"
            } else {
                "FAILED"
            }
        );
    }
}

fn case_json(r: &CaseReport) -> serde_json::Value {
    serde_json::json!({
        "case": r.name,
        "status": match (&r.error, r.passed()) {
            (Some(_), _) => "error",
            (None, true) => "passed",
            (None, false) => "failed",
        },
        "seconds": r.seconds,
        "description": r.description,
        "error": r.error,
        "failures": r.failures,
        "tables": r.checks.iter().map(|c| serde_json::json!({
            "run": c.run,
            "table": c.table,
            "file": c.file,
            "columns": c.columns,
            "keys": c.keys,
            "expected_rows": c.expected_rows,
            "found_rows": c.found_rows,
            "passed": c.diff.is_empty(),
            "missing": c.diff.missing,
            "unexpected": c.diff.unexpected,
            "changed": c.diff.changed.iter().map(|(e, f)| serde_json::json!({
                "expected": e,
                "found": f,
                "differing": TableDiff::differing(e, f).iter().map(|&i| &c.columns[i]).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "updated": r.updated,
    })
}

/// A JUnit XML report: one `<testsuite>` for the pipeline, a `<testcase>` per case; a
/// failed case's diff in `<failure>`, a case that cannot run in `<error>`.
fn junit(pipeline: &str, reports: &[CaseReport], seconds: f64) -> String {
    let errors = reports.iter().filter(|r| r.error.is_some()).count();
    let failures = reports
        .iter()
        .filter(|r| r.error.is_none() && !r.passed())
        .count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"cdcflow test\" tests=\"{n}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{seconds:.3}\">\n  <testsuite name=\"{p}\" tests=\"{n}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{seconds:.3}\">\n",
        n = reports.len(),
        p = xml(pipeline),
    ));
    let root = std::path::Path::new("");
    for r in reports {
        out.push_str(&format!(
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
            xml(pipeline),
            xml(&r.name),
            r.seconds
        ));
        if r.passed() {
            out.push_str("/>\n");
            continue;
        }
        out.push_str(">\n");
        if let Some(e) = &r.error {
            out.push_str(&format!(
                "      <error message=\"{}\">{}</error>\n",
                xml(&e.message),
                xml(&shown(e, root))
            ));
        } else {
            let mut body: Vec<String> = r.failures.clone();
            let differing: Vec<&TableCheck> =
                r.checks.iter().filter(|c| !c.diff.is_empty()).collect();
            for c in &differing {
                body.extend(diff_lines(c, root));
            }
            let message = match differing.first() {
                Some(c) => format!(
                    "table `{}` differs from {} after run {}",
                    c.table,
                    c.file.display(),
                    c.run
                ),
                None => r.failures.first().cloned().unwrap_or_default(),
            };
            out.push_str(&format!(
                "      <failure message=\"{}\">{}</failure>\n",
                xml(&message),
                xml(&body.join("\n"))
            ));
        }
        out.push_str("    </testcase>\n");
    }
    out.push_str("  </testsuite>\n</testsuites>");
    out
}

/// Text for an XML attribute or element: the markup characters escaped, and the
/// control characters XML 1.0 cannot hold (a cell of a table may have them) shown as
/// `\u{…}`.
fn xml(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c.to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect::<String>()
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_name_a_case_or_match_it_as_a_glob() {
        assert!(matches("late_event_wins", "late_event_wins"));
        assert!(matches("late_*", "late_event_wins"));
        assert!(matches("*_wins", "late_event_wins"));
        assert!(!matches("late", "late_event_wins"));
    }

    #[test]
    fn xml_text_is_escaped() {
        assert_eq!(xml("a < b & \"c\""), "a &lt; b &amp; &quot;c&quot;");
        assert_eq!(xml("a\u{1}b"), "a\\u{1}b");
    }
}
