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
    pub path: PathBuf,
    pub format: InputFormat,
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
    pub path: PathBuf,
    /// `<table>.empty`: the table has no rows.
    pub empty: bool,
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
pub fn discover(pipeline_root: &Path) -> Result<Vec<Case>, CaseError> {
    let tests = pipeline_root.join(TESTS_DIR);
    if !tests.is_dir() {
        return Ok(vec![]);
    }
    let mut cases = Vec::new();
    for dir in sorted_dirs(&tests)? {
        cases.push(read_case(&dir)?);
    }
    Ok(cases)
}

fn read_case(dir: &Path) -> Result<Case, CaseError> {
    let name = file_name(dir);
    let config_path = dir.join("case.yaml");
    let config = match std::fs::read_to_string(&config_path) {
        Ok(text) => serde_yaml::from_str::<Option<CaseConfig>>(&text)
            .map_err(|e| {
                CaseError::at(&config_path, format!("invalid case.yaml: {e}")).help(
                    "case.yaml takes description, configuration (a mapping, as --conf), now (an RFC 3339 time) and syncs (per sync, its server's tables: - {table: schema.name, keys: [id]})",
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
        let mut runs = Vec::new();
        for (i, (_, run)) in numbered.into_iter().enumerate() {
            runs.push(read_run(i + 1, &run)?);
        }
        runs
    } else {
        vec![read_run(1, dir)?]
    };
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
    let mut inputs = Vec::new();
    for path in files(&dir.join("input"))? {
        let format = InputFormat::of(&path).ok_or_else(|| {
            CaseError::at(&path, "an input file is .json (JSON lines), .csv (with a header), .yaml, .parquet or .txt".into())
        })?;
        inputs.push(InputFile {
            table: stem(&path),
            path,
            format,
        });
    }
    let mut expected = Vec::new();
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
        expected.push(ExpectedFile {
            table: stem(&path),
            path,
            empty,
        });
    }
    Ok(CaseRun {
        number,
        dir: dir.to_path_buf(),
        inputs,
        expected,
    })
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
