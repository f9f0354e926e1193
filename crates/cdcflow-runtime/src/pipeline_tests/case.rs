//! A test case on disk (docs/testing.md): a folder under the pipeline's `tests/`, whose
//! name is the case's name, holding `input/` (rows per source, named by the table the
//! source feeds) and `expect/` (rows per table), or `runs/<n>/input|expect` for a case
//! in several runs, and optionally `case.yaml`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::CaseError;

/// The folder of a pipeline that holds its test cases.
pub const TESTS_DIR: &str = "tests";

/// A test case as found on disk.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub dir: PathBuf,
    pub description: Option<String>,
    /// Values of pipeline.yaml's `configuration:` for this case (as `--conf`).
    pub configuration: BTreeMap<String, String>,
    /// The wall clock the case's runs see, µs since the epoch (`now:`).
    pub now_micros: Option<i64>,
    /// The tables each `syncs:` entry finds on its server, by sync (`syncs:`).
    pub sync_tables: BTreeMap<String, Vec<cdcflow_plan::syncs::SourceTable>>,
    pub runs: Vec<CaseRun>,
}

/// One run of a case: its inputs land, the pipeline runs once, its tables are checked.
#[derive(Debug, Clone)]
pub struct CaseRun {
    /// From 1.
    pub number: usize,
    /// The folder holding `input/` and `expect/`.
    pub dir: PathBuf,
    pub inputs: Vec<InputFile>,
    pub expected: Vec<ExpectedFile>,
}

/// Rows for the source(s) feeding `table`.
#[derive(Debug, Clone)]
pub struct InputFile {
    pub table: String,
    /// The file; for rows given in `case.yaml`, `case.yaml#input.<table>`.
    pub path: PathBuf,
    pub format: InputFormat,
    /// Rows given in `case.yaml` (as YAML), not in a file.
    pub inline: Option<Vec<u8>>,
}

impl InputFile {
    /// The file's bytes.
    pub fn bytes(&self) -> Result<Vec<u8>, CaseError> {
        read_or_inline(&self.path, self.inline.as_ref())
    }
}

fn read_or_inline(path: &Path, inline: Option<&Vec<u8>>) -> Result<Vec<u8>, CaseError> {
    match inline {
        Some(bytes) => Ok(bytes.clone()),
        None => std::fs::read(path).map_err(|e| CaseError::at(path, e.to_string())),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// JSON lines.
    Json,
    /// CSV with a header line.
    Csv,
    /// A YAML list of mappings.
    Yaml,
    Parquet,
    /// Lines of text (a `format => 'text'` source).
    Text,
}

impl InputFormat {
    fn of(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "json" | "jsonl" | "ndjson" => Self::Json,
            "csv" => Self::Csv,
            "yaml" | "yml" => Self::Yaml,
            "parquet" => Self::Parquet,
            "txt" | "text" => Self::Text,
            _ => return None,
        })
    }
}

/// The rows `table` must hold after a run: `<table>.csv`, or `<table>.empty` for none.
#[derive(Debug, Clone)]
pub struct ExpectedFile {
    pub table: String,
    /// The file; for rows given in `case.yaml`, `case.yaml#expect.<table>`.
    pub path: PathBuf,
    /// `<table>.empty`: the table has no rows.
    pub empty: bool,
    /// Rows given in `case.yaml` (as CSV), not in a file.
    pub inline: Option<Vec<u8>>,
}

impl ExpectedFile {
    /// The file's bytes.
    pub fn bytes(&self) -> Result<Vec<u8>, CaseError> {
        read_or_inline(&self.path, self.inline.as_ref())
    }
}

/// `case.yaml`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseConfig {
    description: Option<String>,
    #[serde(default)]
    configuration: BTreeMap<String, serde_yaml::Value>,
    now: Option<String>,
    #[serde(default)]
    syncs: BTreeMap<String, Vec<SyncTable>>,
    /// Rows per source, inline: a list of mappings per table.
    #[serde(default)]
    input: BTreeMap<String, serde_yaml::Value>,
    /// Expected rows per table, inline: CSV text with a header, or a list of mappings.
    #[serde(default)]
    expect: BTreeMap<String, serde_yaml::Value>,
}

/// A table a sync's server has, as `case.yaml` gives it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SyncTable {
    /// `schema.table`.
    table: String,
    #[serde(default)]
    keys: Vec<String>,
}

/// The cases in `<pipeline>/tests`, by name; none when there is no such folder.
/// Each case is read on its own: one written wrong is reported as such, and the others
/// still run.
pub fn discover(pipeline_root: &Path) -> Result<Vec<Found>, CaseError> {
    let tests = pipeline_root.join(TESTS_DIR);
    if !tests.is_dir() {
        return Ok(vec![]);
    }
    Ok(sorted_dirs(&tests)?
        .into_iter()
        .map(|dir| Found {
            name: file_name(&dir),
            case: read_case(&dir),
        })
        .collect())
}

/// A case folder, read or not.
#[derive(Debug)]
pub struct Found {
    pub name: String,
    pub case: Result<Case, CaseError>,
}

fn read_case(dir: &Path) -> Result<Case, CaseError> {
    let name = file_name(dir);
    let config_path = dir.join("case.yaml");
    let config = match std::fs::read_to_string(&config_path) {
        Ok(text) => serde_yaml::from_str::<Option<CaseConfig>>(&text)
            .map_err(|e| {
                CaseError::at(&config_path, format!("invalid case.yaml: {e}")).help(
                    "case.yaml takes description, configuration (a mapping, as --conf), now (an RFC 3339 time), syncs (per sync, its server's tables: - {table: schema.name, keys: [id]}), input (rows per table, a list of mappings) and expect (per table, CSV text or a list of mappings)",
                )
            })?
            .unwrap_or_default(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => CaseConfig::default(),
        Err(e) => return Err(CaseError::at(&config_path, e.to_string())),
    };
    let now_micros = match &config.now {
        Some(text) => Some(
            chrono::DateTime::parse_from_rfc3339(text)
                .map_err(|e| {
                    CaseError::at(&config_path, format!("`now: {text}` is no time: {e}"))
                        .help("now: 2024-08-01T00:00:00Z")
                })?
                .timestamp_micros(),
        ),
        None => None,
    };
    let configuration = config
        .configuration
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_yaml::Value::String(s) => s,
                other => serde_yaml::to_string(&other)
                    .unwrap_or_default()
                    .trim_end()
                    .to_string(),
            };
            (k, text)
        })
        .collect();
    let mut sync_tables = BTreeMap::new();
    for (sync, tables) in config.syncs {
        let mut found = Vec::new();
        for t in tables {
            let Some((schema, name)) = t.table.split_once('.') else {
                return Err(CaseError::at(
                    &config_path,
                    format!("syncs: `{}` is no schema.table", t.table),
                )
                .help("syncs: {shop: [{table: shop.customers, keys: [id]}]}"));
            };
            found.push(cdcflow_plan::syncs::SourceTable {
                schema: schema.to_string(),
                name: name.to_string(),
                keys: t.keys,
            });
        }
        sync_tables.insert(sync, found);
    }
    let runs_dir = dir.join("runs");
    only_folders(dir, &["input", "expect", "runs"])?;
    if runs_dir.is_dir() && (dir.join("input").is_dir() || dir.join("expect").is_dir()) {
        return Err(CaseError::at(dir, "the case has both runs/ and input/ or expect/: the runs would leave the latter unread".into())
            .help("a case of one run keeps input/ and expect/; a case of several keeps them in runs/1/, runs/2/, …"));
    }
    let runs = if runs_dir.is_dir() {
        let mut numbered = Vec::new();
        for run in sorted_dirs(&runs_dir)? {
            let Ok(n) = file_name(&run).parse::<usize>() else {
                return Err(CaseError::at(&run, "a folder under runs/ is named by its run's number".into())
                    .help("runs/1, runs/2, …: each run's input lands, the pipeline runs once, its expect is checked"));
            };
            numbered.push((n, run));
        }
        numbered.sort();
        if numbered.is_empty() {
            return Err(CaseError::at(&runs_dir, "runs/ holds no run".into())
                .help("runs/1/input, runs/1/expect, runs/2/…"));
        }
        let mut runs = Vec::new();
        for (i, (_, run)) in numbered.into_iter().enumerate() {
            runs.push(read_run(i + 1, &run)?);
        }
        runs
    } else {
        vec![read_run(1, dir)?]
    };
    let mut runs = runs;
    if !config.input.is_empty() || !config.expect.is_empty() {
        if runs_dir.is_dir() {
            return Err(CaseError::at(
                &config_path,
                "input: and expect: in case.yaml are for a case of one run".into(),
            )
            .help(
                "a case in runs/<n>/ keeps each run's rows in runs/<n>/input and runs/<n>/expect",
            ));
        }
        add_inline(&mut runs[0], dir, &config.input, &config.expect)?;
    }
    if runs.iter().all(|r| r.inputs.is_empty()) && !dir.join("input").is_dir() {
        return Err(CaseError::at(dir, "the case has no input/ folder".into()).help(
            "put the rows of each source in input/<table>.json (or .csv, .yaml), named by the table the source feeds; docs/testing.md",
        ));
    }
    Ok(Case {
        name,
        dir: dir.to_path_buf(),
        description: config.description,
        configuration,
        now_micros,
        sync_tables,
        runs,
    })
}

fn read_run(number: usize, dir: &Path) -> Result<CaseRun, CaseError> {
    if dir.file_name().is_some_and(|n| n != "runs")
        && dir.parent().is_some_and(|p| p.ends_with("runs"))
    {
        only_folders(dir, &["input", "expect"])?;
    }
    let mut inputs: Vec<InputFile> = Vec::new();
    for path in files(&dir.join("input"))? {
        let format = InputFormat::of(&path).ok_or_else(|| {
            CaseError::at(&path, "an input file is .json (JSON lines), .csv (with a header), .yaml, .parquet or .txt".into())
        })?;
        let table = stem(&path);
        if let Some(other) = inputs.iter().find(|i| i.table.eq_ignore_ascii_case(&table)) {
            return Err(CaseError::at(
                &path,
                format!(
                    "`{table}` is given rows twice in one run, here and in {}",
                    other.path.display()
                ),
            )
            .help("one file per table and run"));
        }
        inputs.push(InputFile {
            table,
            path,
            format,
            inline: None,
        });
    }
    let mut expected: Vec<ExpectedFile> = Vec::new();
    for path in files(&dir.join("expect"))? {
        let empty = match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => false,
            Some("empty") => true,
            _ => {
                return Err(CaseError::at(
                    &path,
                    "an expected file is <table>.csv (with a header) or <table>.empty".into(),
                ));
            }
        };
        let table = stem(&path);
        if let Some(other) = expected
            .iter()
            .find(|e| e.table.eq_ignore_ascii_case(&table))
        {
            return Err(CaseError::at(
                &path,
                format!(
                    "`{table}` is expected twice in one run, here and in {}",
                    other.path.display()
                ),
            ));
        }
        expected.push(ExpectedFile {
            table,
            path,
            empty,
            inline: None,
        });
    }
    Ok(CaseRun {
        number,
        dir: dir.to_path_buf(),
        inputs,
        expected,
    })
}

/// Adds the rows `case.yaml` gives inline to `run`: a table given rows both inline and
/// in a file is an error.
fn add_inline(
    run: &mut CaseRun,
    dir: &Path,
    input: &BTreeMap<String, serde_yaml::Value>,
    expect: &BTreeMap<String, serde_yaml::Value>,
) -> Result<(), CaseError> {
    let config = dir.join("case.yaml");
    for (table, rows) in input {
        let path = dir.join(format!("case.yaml#input.{table}"));
        if !rows.is_sequence() {
            return Err(
                CaseError::at(&config, format!("input.{table} is no list of rows"))
                    .help("input:\n  bronze_orders:\n    - {order_id: 1, status: placed}"),
            );
        }
        if run
            .inputs
            .iter()
            .any(|i| i.table.eq_ignore_ascii_case(table))
        {
            return Err(CaseError::at(
                &config,
                format!("`{table}` is given rows both in case.yaml and in input/"),
            ));
        }
        let bytes =
            serde_yaml::to_string(rows).map_err(|e| CaseError::at(&config, e.to_string()))?;
        run.inputs.push(InputFile {
            table: table.clone(),
            path,
            format: InputFormat::Yaml,
            inline: Some(bytes.into_bytes()),
        });
    }
    for (table, rows) in expect {
        let path = dir.join(format!("case.yaml#expect.{table}"));
        if run
            .expected
            .iter()
            .any(|e| e.table.eq_ignore_ascii_case(table))
        {
            return Err(CaseError::at(
                &config,
                format!("`{table}` is expected both in case.yaml and in expect/"),
            ));
        }
        let csv = match rows {
            serde_yaml::Value::String(text) => text.clone(),
            serde_yaml::Value::Sequence(list) => mappings_as_csv(list)
                .map_err(|e| CaseError::at(&config, format!("expect.{table}: {e}")))?,
            _ => {
                return Err(CaseError::at(
                    &config,
                    format!("expect.{table} is neither CSV text nor a list of rows"),
                )
                .help("expect:\n  orders: |\n    order_id,status\n    1,paid"));
            }
        };
        run.expected.push(ExpectedFile {
            table: table.clone(),
            path,
            empty: csv.trim().is_empty(),
            inline: Some(csv.into_bytes()),
        });
    }
    Ok(())
}

/// A list of YAML mappings as CSV: the first row's keys, in its order, are the header;
/// NULL (`~`, `null`) is an empty cell.
fn mappings_as_csv(rows: &[serde_yaml::Value]) -> Result<String, String> {
    let Some(first) = rows.first() else {
        return Ok(String::new());
    };
    let header: Vec<String> = first
        .as_mapping()
        .ok_or("each row is a mapping of column to value")?
        .keys()
        .map(|k| scalar(k).unwrap_or_default())
        .collect();
    let mut out = csv_line(&header.iter().cloned().map(Some).collect::<Vec<_>>());
    for row in rows {
        let row = row
            .as_mapping()
            .ok_or("each row is a mapping of column to value")?;
        if row.len() != header.len() {
            return Err(format!(
                "every row names the columns the first one does: {}",
                header.join(", ")
            ));
        }
        let cells: Vec<Option<String>> = header
            .iter()
            .map(|h| {
                row.get(serde_yaml::Value::String(h.clone()))
                    .ok_or_else(|| format!("a row without `{h}`"))
                    .map(scalar)
            })
            .collect::<Result<_, _>>()?;
        out.push_str(&csv_line(&cells));
    }
    Ok(out)
}

/// A YAML scalar as text; `None` for NULL.
fn scalar(v: &serde_yaml::Value) -> Option<String> {
    match v {
        serde_yaml::Value::Null => None,
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        other => serde_yaml::to_string(other)
            .ok()
            .map(|t| t.trim_end().to_string()),
    }
}

/// One CSV line: NULL is an empty cell, the empty string `""`; a cell with a comma,
/// quote or line end is quoted.
pub(super) fn csv_line(cells: &[Option<String>]) -> String {
    let mut line = cells
        .iter()
        .map(|c| match c.as_deref() {
            None => String::new(),
            // Quoted, the empty string is told apart from NULL.
            Some("") => "\"\"".to_string(),
            Some(v) if v.contains([',', '"', '\n', '\r']) => {
                format!("\"{}\"", v.replace('"', "\"\""))
            }
            Some(v) => v.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",");
    line.push('\n');
    line
}

/// Fails naming a folder in `dir` other than `allowed`: a misspelt `expected/` would
/// otherwise be a case that checks nothing.
fn only_folders(dir: &Path, allowed: &[&str]) -> Result<(), CaseError> {
    for folder in sorted_dirs(dir)? {
        let name = file_name(&folder);
        if !allowed.contains(&name.as_str()) {
            return Err(
                CaseError::at(&folder, format!("a case has no folder `{name}`")).help(format!(
                    "it holds case.yaml and the folders {}",
                    allowed.join(", ")
                )),
            );
        }
    }
    Ok(())
}

/// The visible files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Result<Vec<PathBuf>, CaseError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(CaseError::at(dir, e.to_string())),
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && !file_name(p).starts_with('.'))
        .collect();
    out.sort();
    Ok(out)
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>, CaseError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CaseError::at(dir, e.to_string()))?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && !file_name(p).starts_with(['.', '_']))
        .collect();
    out.sort();
    Ok(out)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The file name without its last extension: the table's name (which may hold dots,
/// `schema.table.csv`).
fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
