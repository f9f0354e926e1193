//! `cdcflow test`: a pipeline's test cases (docs/testing.md). Each case runs the
//! pipeline's own flows in a scratch storage of its own, never the pipeline's, on rows
//! the case gives for its sources, one run per `runs/<n>` (or one), and compares the
//! tables it names with its expected rows after each run.

pub mod case;
mod diff;
mod feed;
mod fixtures;
mod rows;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cdcflow_plan::{DatasetKind, Discovered, Pipeline};

pub use case::{Case, CaseRun, Found, TESTS_DIR, discover};
pub use diff::TableDiff;
pub use rows::Row;

use crate::{FlowOutcome, RunOptions};

/// A case that cannot be run as written (a file in the wrong shape, a table the
/// pipeline does not have), naming the file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CaseError {
    pub path: Option<PathBuf>,
    pub message: String,
    pub help: Option<String>,
}

impl CaseError {
    pub fn new(message: String) -> Self {
        Self {
            path: None,
            message,
            help: None,
        }
    }

    pub fn at(path: &Path, message: String) -> Self {
        Self {
            path: Some(path.to_path_buf()),
            message,
            help: None,
        }
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

impl std::fmt::Display for CaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(path) = &self.path {
            write!(f, "{}: ", path.display())?;
        }
        f.write_str(&self.message)?;
        if let Some(help) = &self.help {
            write!(f, " (help: {help})")?;
        }
        Ok(())
    }
}

/// How cases are run.
#[derive(Debug, Clone, Default)]
pub struct TestOptions {
    /// `--conf` values, under each case's own `configuration:`.
    pub configuration: BTreeMap<String, String>,
    /// Write each checked table's rows as its expected file instead of comparing.
    pub update: bool,
    /// Keep each case's scratch folder (its storage and landing files) for a look.
    pub keep: bool,
}

/// What running one case found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseReport {
    pub name: String,
    pub description: Option<String>,
    pub seconds: f64,
    /// The tables compared, run by run.
    pub checks: Vec<TableCheck>,
    /// Flows that failed in a run: `run n: flow x failed: …`.
    pub failures: Vec<String>,
    /// The case could not be run as written.
    pub error: Option<CaseError>,
    /// Expected files `--update` wrote.
    pub updated: Vec<PathBuf>,
    /// What a reader should know that is no failure (expected rows `--update` left).
    pub notes: Vec<String>,
    /// The scratch folder, when kept.
    pub kept: Option<PathBuf>,
}

impl CaseReport {
    /// The report of `name` before anything was found.
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            description: None,
            seconds: 0.0,
            checks: vec![],
            failures: vec![],
            error: None,
            updated: vec![],
            notes: vec![],
            kept: None,
        }
    }

    /// The report of a case that could not be run: `error` says why.
    pub fn not_runnable(name: &str, error: CaseError) -> Self {
        Self {
            error: Some(error),
            ..Self::new(name)
        }
    }

    pub fn passed(&self) -> bool {
        self.error.is_none()
            && self.failures.is_empty()
            && self.checks.iter().all(|c| c.diff.is_empty())
    }
}

/// One table compared after one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableCheck {
    pub run: usize,
    pub table: String,
    pub file: PathBuf,
    /// The columns compared, as the expected file names them.
    pub columns: Vec<String>,
    /// The columns rows were paired by as changed.
    pub keys: Vec<String>,
    pub expected_rows: usize,
    pub found_rows: usize,
    pub diff: TableDiff,
}

/// Runs `case` of the pipeline in `root`.
pub async fn run_case(root: &Path, case: &Case, options: &TestOptions) -> CaseReport {
    let started = Instant::now();
    let mut report = CaseReport::new(&case.name);
    report.description = case.description.clone();
    if !options.update && case.runs.iter().all(|r| r.expected.is_empty()) {
        report.error = Some(
            CaseError::at(
                &case.dir,
                "the case checks nothing: no run has an expected file".into(),
            )
            .help("add expect/<table>.csv (or run `cdcflow test --update` to write them)"),
        );
        return report;
    }
    let scratch = match tempfile::Builder::new()
        .prefix(&format!("cdcflow-test-{}-", case.name))
        .tempdir()
    {
        Ok(dir) => dir,
        Err(e) => {
            report.error = Some(CaseError::new(format!("no scratch folder: {e}")));
            return report;
        }
    };
    if let Err(e) = run_in(root, case, options, scratch.path(), &mut report).await {
        report.error = Some(e);
    }
    if options.keep {
        report.kept = Some(scratch.keep());
    }
    report.seconds = started.elapsed().as_secs_f64();
    report
}

async fn run_in(
    root: &Path,
    case: &Case,
    options: &TestOptions,
    scratch: &Path,
    report: &mut CaseReport,
) -> Result<(), CaseError> {
    let mut discovered = Discovered {
        landing: Some(scratch.join("landing")),
        storage: Some(scratch.join("storage").display().to_string()),
        tables: case.sync_tables.clone(),
        ..Discovered::default()
    };
    let mut configuration = options.configuration.clone();
    configuration.extend(case.configuration.clone());
    let fixtures = fixtures::Fixtures::default();
    for run in &case.runs {
        // Loaded to know where each source's rows go; again when a server source's
        // columns were first found in them, so that its flows are planned; and again
        // once they landed when a landing folder's columns are inferred from its files.
        let mut pipeline = load(root, &configuration, &discovered)?;
        let mut found_columns = false;
        for input in &run.inputs {
            let source = feed::source_of(&pipeline, input)?;
            if let Some((key, columns)) = fixtures::discovered_columns(source, input)?
                && let std::collections::btree_map::Entry::Vacant(slot) =
                    discovered.columns.entry(key)
            {
                slot.insert(columns);
                found_columns = true;
            }
        }
        if found_columns {
            pipeline = load(root, &configuration, &discovered)?;
        }
        feed::land(&pipeline, run, &fixtures)?;
        if feed::infers_columns(&pipeline) {
            pipeline = load(root, &configuration, &discovered)?;
        }
        let run_options = RunOptions {
            now_micros: case.now_micros,
            sources: Some(crate::sources::Sources(std::sync::Arc::new(
                fixtures.clone(),
            ))),
            ..RunOptions::default()
        };
        let outcome = crate::run(&pipeline, &run_options)
            .await
            .map_err(|e| CaseError::new(format!("run {}: {}", run.number, e.with_help_inline())))?;
        for flow in &outcome.flows {
            if let FlowOutcome::Failed { error, help } = &flow.outcome {
                let help = help
                    .as_ref()
                    .map(|h| format!(" (help: {h})"))
                    .unwrap_or_default();
                report.failures.push(format!(
                    "run {}: flow `{}` failed: {error}{help}",
                    run.number, flow.flow
                ));
            }
        }
        check_run(&pipeline, run, options.update, report).await?;
    }
    Ok(())
}

/// The pipeline in `root` as a case runs it.
fn load(
    root: &Path,
    configuration: &BTreeMap<String, String>,
    discovered: &Discovered,
) -> Result<Pipeline, CaseError> {
    let loaded = cdcflow_plan::load_discovered(root, configuration, discovered);
    if let Some(d) = loaded.diagnostics.iter().find(|d| d.is_error()) {
        let at =
            d.at.as_ref()
                .map(|a| format!("{}:{}:{}: ", a.path, a.span.start.line, a.span.start.column))
                .unwrap_or_default();
        return Err(
            CaseError::new(format!("the pipeline has errors: {at}{}", d.message))
                .help("`cdcflow validate` shows them all"),
        );
    }
    let mut pipeline = loaded
        .pipeline
        .ok_or_else(|| CaseError::new("the pipeline cannot be loaded".into()))?;
    // A case's files are whole when they land: no run waits for them to settle.
    pipeline.config.landing_settle_seconds = 0.0;
    Ok(pipeline)
}

/// Compares (or, updating, writes) the expected tables of `run`.
async fn check_run(
    pipeline: &Pipeline,
    run: &CaseRun,
    update: bool,
    report: &mut CaseReport,
) -> Result<(), CaseError> {
    let ctx = crate::catalog::session(pipeline)
        .await
        .map_err(|e| CaseError::new(e.with_help_inline()))?;
    let mut expected = run.expected.clone();
    if update && expected.is_empty() {
        // A run with nothing expected yet: every stored table becomes expected, and
        // every quarantine table a run made (the records it set apart).
        let dir = run.dir.join("expect");
        let quarantines = pipeline
            .datasets
            .iter()
            .map(|d| crate::quarantine::table_name(&d.name))
            .filter(|q| {
                ctx.table_exist(crate::catalog::reference(q))
                    .unwrap_or(false)
            });
        expected = stored_tables(pipeline)
            .into_iter()
            .chain(quarantines)
            .map(|table| case::ExpectedFile {
                path: dir.join(format!("{table}.csv")),
                table,
                empty: false,
                inline: None,
            })
            .collect();
    }
    for file in &expected {
        let stored = pipeline
            .dataset(&file.table)
            .is_some_and(|d| d.kind != DatasetKind::View && d.is_published());
        if !stored && !is_quarantine(pipeline, &file.table) {
            let what = match pipeline.dataset(&file.table) {
                Some(_) => format!(
                    "`{}` is no table the pipeline stores (a view or a private table)",
                    file.table
                ),
                None => format!("the pipeline has no table `{}`", file.table),
            };
            return Err(CaseError::at(&file.path, what).help(format!(
                "an expected file is named by its table: {}",
                stored_tables(pipeline).join(", ")
            )));
        }
        let found = rows::TableRows::read(&ctx, &file.table).await?;
        if found.is_none() {
            // Left out of the session although it exists: it cannot be read.
            let located = crate::catalog::locate(pipeline, &file.table)
                .await
                .map_err(|e| CaseError::at(&file.path, e.with_help_inline()))?;
            if crate::catalog::exists(&located.dir).await.unwrap_or(false) {
                return Err(CaseError::at(
                    &file.path,
                    format!("table `{}` exists but cannot be read", file.table),
                ));
            }
        }
        match (update, &file.inline) {
            (false, _) => report
                .checks
                .push(compare(pipeline, run.number, file, found.as_ref())?),
            (true, Some(_)) => report.notes.push(format!(
                "the rows of `{}` are given in case.yaml: --update leaves them; move them to expect/{}.csv to have them written",
                file.table, file.table
            )),
            (true, None) => report.updated.extend(write_expected(file, found.as_ref())?),
        }
    }
    Ok(())
}

fn compare(
    pipeline: &Pipeline,
    run: usize,
    file: &case::ExpectedFile,
    found: Option<&rows::TableRows>,
) -> Result<TableCheck, CaseError> {
    let (columns, expected, found_rows) = match (file.empty, found) {
        (true, None) => (vec![], vec![], vec![]),
        (true, Some(t)) => {
            let columns: Vec<String> = t.schema.fields().iter().map(|f| f.name().clone()).collect();
            let positions: Vec<usize> = (0..columns.len()).collect();
            (columns, vec![], t.rows(&positions)?)
        }
        (false, found) => {
            let text = file.bytes()?;
            let columns = rows::header(&text).map_err(|e| CaseError::at(&file.path, e))?;
            match found {
                Some(t) => {
                    let positions = t.positions(&columns, &file.path, &file.table)?;
                    let types: Vec<_> = positions
                        .iter()
                        .map(|&p| t.schema.field(p).data_type().clone())
                        .collect();
                    let expected = rows::expected_rows(&file.path, &text, &types)?;
                    (columns, expected, t.rows(&positions)?)
                }
                // Not created yet: no rows; the expected ones are compared as text.
                None => {
                    let types = vec![datafusion::arrow::datatypes::DataType::Utf8; columns.len()];
                    let expected = rows::expected_rows(&file.path, &text, &types)?;
                    (columns, expected, vec![])
                }
            }
        }
    };
    let keys = key_columns(pipeline, &file.table, &columns);
    let key_positions: Vec<usize> = keys
        .iter()
        .filter_map(|k| columns.iter().position(|c| c.eq_ignore_ascii_case(k)))
        .collect();
    Ok(TableCheck {
        run,
        table: file.table.clone(),
        file: file.path.clone(),
        expected_rows: expected.len(),
        found_rows: found_rows.len(),
        diff: diff::diff(&expected, &found_rows, &key_positions),
        columns,
        keys,
    })
}

/// The columns naming a row of `table` across changes, when the compared `columns`
/// hold them all: an AUTO CDC target's keys, with `__START_AT` for SCD type 2 history.
fn key_columns(pipeline: &Pipeline, table: &str, columns: &[String]) -> Vec<String> {
    let has = |c: &str| columns.iter().any(|x| x.eq_ignore_ascii_case(c));
    for flow in pipeline.flows_into(table) {
        let Some(node) = flow
            .plan
            .as_ref()
            .and_then(cdcflow_plan::autocdc::AutoCdcNode::of)
        else {
            continue;
        };
        let mut keys = node.spec.keys.clone();
        if node.spec.scd_type == 2 && has("__START_AT") {
            keys.push("__START_AT".into());
        }
        if keys.iter().all(|k| has(k)) {
            return keys;
        }
    }
    vec![]
}

/// The tables a case can expect rows of: streaming tables and materialized views.
fn stored_tables(pipeline: &Pipeline) -> Vec<String> {
    pipeline
        .datasets
        .iter()
        .filter(|d| d.kind != DatasetKind::View && d.is_published())
        .map(|d| d.name.clone())
        .collect()
}

fn is_quarantine(pipeline: &Pipeline, table: &str) -> bool {
    pipeline
        .datasets
        .iter()
        .any(|d| crate::quarantine::table_name(&d.name).eq_ignore_ascii_case(table))
}

/// Writes the rows of `found` as the expected file `file`: over the columns it names
/// already, else every column; sorted, so a review sees only what changed.
fn write_expected(
    file: &case::ExpectedFile,
    found: Option<&rows::TableRows>,
) -> Result<Option<PathBuf>, CaseError> {
    let Some(table) = found else {
        let empty = file.path.with_extension("empty");
        if file.path != empty {
            let _ = std::fs::remove_file(&file.path);
        }
        write_file(&empty, b"")?;
        return Ok(Some(empty));
    };
    let existing = std::fs::read(&file.path)
        .ok()
        .and_then(|t| rows::header(&t).ok());
    let columns = match existing {
        Some(c) if !file.empty => c,
        _ => table
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
    };
    let positions = table.positions(&columns, &file.path, &file.table)?;
    let found_rows = table.sorted_rows(&positions)?;
    let path = file.path.with_extension("csv");
    if found_rows.is_empty() {
        let empty = file.path.with_extension("empty");
        let _ = std::fs::remove_file(&path);
        write_file(&empty, b"")?;
        return Ok(Some(empty));
    }
    if file.empty {
        let _ = std::fs::remove_file(&file.path);
    }
    let mut text = case::csv_line(&columns.iter().map(|c| Some(c.clone())).collect::<Vec<_>>());
    for row in &found_rows {
        text.push_str(&case::csv_line(row));
    }
    write_file(&path, text.as_bytes())?;
    Ok(Some(path))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), CaseError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CaseError::at(dir, e.to_string()))?;
    }
    std::fs::write(path, bytes).map_err(|e| CaseError::at(path, e.to_string()))
}
