//! `read_files(path, format => …, schema => …, header => …)`: a landing folder as a
//! source. This module knows the options, lists the files and infers a schema from
//! them when none is declared.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cdcflow_sql::Span;
use datafusion::arrow::csv::reader::Format;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

mod infer;

/// The file formats cdcflow reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileFormat {
    /// Newline-delimited JSON.
    Json,
    Csv,
    Parquet,
    /// Lines of text, each a row of one `value STRING` column (Spark's `text`), for
    /// records a function decodes (`debezium(value, …)`, `from_json(value, …)`).
    Text,
}

impl FileFormat {
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "json" | "ndjson" | "jsonl" => Some(Self::Json),
            "csv" => Some(Self::Csv),
            "parquet" => Some(Self::Parquet),
            "text" | "txt" => Some(Self::Text),
            _ => None,
        }
    }

    fn from_extension(path: &Path) -> Option<Self> {
        Self::parse(path.extension()?.to_str()?)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Csv => "csv",
            Self::Parquet => "parquet",
            Self::Text => "text",
        }
    }
}

/// Why the files of a `read_files` call give no schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// Two files give a column different types.
    #[error("{0}")]
    Conflict(String),
    /// The folder cannot be listed, or no file in it can be read.
    #[error("{0}")]
    Unreadable(String),
}

impl SchemaError {
    /// What the user can do about it.
    pub fn help(&self) -> &'static str {
        match self {
            Self::Conflict(_) => {
                "write the files with the column's first type, or declare the schema and --full-refresh the tables reading them"
            }
            Self::Unreadable(_) => {
                "fix the file and land the fixed copy, or declare the schema (schema => '…') so that unreadable records are quarantined while the rest is read"
            }
        }
    }
}

/// A resolved `read_files` call.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadFiles {
    /// The table name that stands for this call in the flow's rewritten query.
    pub table: String,
    /// The path as written.
    pub path_text: String,
    /// Absolute: relative paths are taken from the pipeline folder.
    pub path: PathBuf,
    pub format: FileFormat,
    /// From `schema => 'ddl'`.
    pub declared_schema: Option<SchemaRef>,
    /// Every option, keys lower-cased, values as text.
    pub options: BTreeMap<String, String>,
    /// `STREAM read_files(…)`: each file is read once.
    pub streaming: bool,
    /// Written as the older `cloud_files(…)` (Auto Loader): its defaults apply.
    pub auto_loader: bool,
    /// Types for some columns, over the inferred ones (`cloudFiles.schemaHints`).
    pub schema_hints: Option<SchemaRef>,
    /// The schema inferred when the pipeline was loaded, so a run does not infer it
    /// from the landing files again.
    pub inferred_schema: Option<SchemaRef>,
    /// The reading query names `_metadata` or `input_file_name()`: each row carries its
    /// file's (`crate::file_metadata`).
    pub metadata: bool,
    /// A landing folder (`read_files`, `cloud_files`), not the files of an external
    /// table.
    pub landing: bool,
    pub span: Span,
}

/// Options we read; others are accepted and ignored with a note.
pub const KNOWN_OPTIONS: &[&str] = &[
    "format",
    "schema",
    "header",
    "sep",
    "delimiter",
    "cloudfiles.allowoverwrites",
    "allowoverwrites",
];

impl ReadFiles {
    /// CSV: whether the first line holds column names (default true, as for landing
    /// exports; Databricks' own default is false, so set it explicitly to be portable).
    pub fn csv_header(&self) -> bool {
        match self.options.get("header") {
            Some(v) => v.eq_ignore_ascii_case("true"),
            // Auto Loader, like Spark's CSV reader, assumes no header line.
            None => !self.auto_loader,
        }
    }

    /// Whether inferred JSON and CSV columns get their types, or stay strings as Auto
    /// Loader leaves them unless `cloudFiles.inferColumnTypes` is true.
    pub fn infer_column_types(&self) -> bool {
        let set = self
            .options
            .get("cloudfiles.infercolumntypes")
            .or_else(|| self.options.get("infercolumntypes"));
        match set {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => !self.auto_loader,
        }
    }

    pub fn csv_delimiter(&self) -> u8 {
        self.options
            .get("sep")
            .or_else(|| self.options.get("delimiter"))
            .and_then(|s| s.bytes().next())
            .unwrap_or(b',')
    }

    /// The data files under `path`, sorted by path: hidden and `_`-prefixed entries
    /// and `.tmp`/`.crc` files are skipped (files still being written, engine metadata),
    /// and so are symbolic links out of the landing folder.
    pub fn list_files(&self) -> std::io::Result<Vec<PathBuf>> {
        self.list(Links::InsideOnly).map(|l| l.files)
    }

    /// The data files under `path`, sorted by path, and the symbolic links `links`
    /// refused to follow.
    pub fn list(&self, links: Links) -> std::io::Result<Listing> {
        list_folder(&self.path, links)
    }

    /// The declared schema, or one inferred from the files present; `Ok(None)` when
    /// there is neither.
    pub fn schema(&self) -> Result<Option<SchemaRef>, SchemaError> {
        if let Some(s) = self
            .declared_schema
            .as_ref()
            .or(self.inferred_schema.as_ref())
        {
            return Ok(Some(Arc::clone(s)));
        }
        let files = self.list_files().map_err(|e| {
            SchemaError::Unreadable(format!("cannot list {}: {e}", self.path.display()))
        })?;
        if files.is_empty() {
            return Ok(None);
        }
        // Unreadable and empty files are skipped here: the run quarantines the former
        // and reads nothing from the latter; only when no file gives a schema is the
        // first problem reported.
        let mut schemas: Vec<(Schema, &PathBuf)> = Vec::new();
        let mut first_error = None;
        for f in files
            .iter()
            .filter(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > 0))
        {
            match self.infer_file(f) {
                Ok(s) if !s.fields().is_empty() => schemas.push((s, f)),
                Ok(_) => {}
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("{}: {e}", f.display()));
                }
            }
            // Text files are sampled; a Parquet file names its columns in its footer,
            // cheap to read, so every one is looked at and none is read without its
            // new columns.
            if schemas.len() == 64 && self.format != FileFormat::Parquet {
                break;
            }
        }
        if schemas.is_empty() {
            return match first_error {
                Some(e) => Err(SchemaError::Unreadable(e)),
                None => Ok(None),
            };
        }
        let merged = infer::merge_schemas(&schemas).map_err(SchemaError::Conflict)?;
        Ok(Some(Arc::new(self.with_hints(&merged))))
    }

    /// The inferred schema as Auto Loader would give it: strings unless types are
    /// inferred, then the schema hints on top (a hinted column the files lack is added).
    fn with_hints(&self, inferred: &Schema) -> Schema {
        let mut fields: Vec<Field> = inferred
            .fields()
            .iter()
            .map(|f| {
                let f = f.as_ref().clone();
                match self.infer_column_types() || self.format == FileFormat::Parquet {
                    true => f,
                    false => f.with_data_type(DataType::Utf8),
                }
            })
            .collect();
        if let Some(hints) = &self.schema_hints {
            for hint in hints.fields() {
                match fields
                    .iter_mut()
                    .find(|f| f.name().eq_ignore_ascii_case(hint.name()))
                {
                    Some(f) => *f = f.clone().with_data_type(hint.data_type().clone()),
                    None => fields.push(hint.as_ref().clone().with_nullable(true)),
                }
            }
        }
        Schema::new(fields)
    }

    /// The columns of one file, all nullable.
    fn infer_file(&self, path: &Path) -> Result<Schema, String> {
        let schema = match self.format {
            FileFormat::Json => infer::json_schema(path)?,
            FileFormat::Csv => {
                let file = File::open(path).map_err(|e| e.to_string())?;
                let (schema, _) = Format::default()
                    .with_header(self.csv_header())
                    .with_delimiter(self.csv_delimiter())
                    .infer_schema(file, Some(infer::SAMPLED_RECORDS))
                    .map_err(|e| e.to_string())?;
                schema
            }
            FileFormat::Text => Schema::new(vec![Field::new("value", DataType::Utf8, true)]),
            FileFormat::Parquet => {
                let file = File::open(path).map_err(|e| e.to_string())?;
                let builder =
                    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| e.to_string())?;
                builder.schema().as_ref().clone()
            }
        };
        Ok(infer::nullable(&schema))
    }

    /// The format for a call without `format =>`: the extension of its files.
    pub fn detect_format(path: &Path) -> Option<FileFormat> {
        if let Some(f) = FileFormat::from_extension(path) {
            return Some(f);
        }
        let mut files = Vec::new();
        collect(path, &mut files).ok()?;
        files.sort();
        files.iter().find_map(|f| FileFormat::from_extension(f))
    }
}

/// The data files under `path` (or the file `path`), sorted by path, and the symbolic
/// links `links` refused to follow; nothing when `path` does not exist.
pub fn list_folder(path: &Path, links: Links) -> std::io::Result<Listing> {
    if path.is_file() {
        return Ok(Listing {
            files: vec![path.to_path_buf()],
            refused_links: vec![],
        });
    }
    if !path.exists() {
        return Ok(Listing::default());
    }
    let root = path.canonicalize()?;
    let mut walk = Walk {
        root: &root,
        links,
        visited: Default::default(),
        pending: Default::default(),
        found: vec![],
        refused: vec![],
    };
    walk.all(path, &root)?;
    Ok(walk.finish())
}

/// Entries a listing leaves out: hidden and `_`-prefixed names (engine metadata) and
/// `.tmp`/`.crc` files (files still being written, checksums).
pub fn skipped(name: &str) -> bool {
    name.starts_with('.')
        || name.starts_with('_')
        || name.ends_with(".tmp")
        || name.ends_with(".crc")
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if skipped(&name.to_string_lossy()) {
            continue;
        }
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// Which symbolic links in a landing folder are followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Links {
    /// Only links to files and folders inside the landing folder: a link elsewhere
    /// (`/etc/shadow`) would publish a file nobody landed.
    #[default]
    InsideOnly,
    /// Every link (`follow_symlinks_out_of_landing: true` in pipeline.yaml).
    Anywhere,
}

/// What listing a landing folder found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    pub files: Vec<PathBuf>,
    /// Links not followed: they lead out of the landing folder.
    pub refused_links: Vec<PathBuf>,
}

/// A walk of one landing folder. Every folder is listed once, however many links lead
/// to it (links between sibling folders would otherwise be walked along every path, a
/// number of walks that grows with the factorial of the folders), and the folders
/// reachable without links are listed first, so their files keep their own names.
struct Walk<'a> {
    root: &'a Path,
    links: Links,
    /// The folders listed, resolved.
    visited: std::collections::HashSet<PathBuf>,
    /// Links met and not yet followed, in the order met.
    pending: std::collections::VecDeque<PathBuf>,
    /// Files found: (resolved path, reached through a link, path).
    found: Vec<(PathBuf, bool, PathBuf)>,
    refused: Vec<PathBuf>,
}

impl Walk<'_> {
    /// Lists the folder `dir` (`root` resolved), then follows the links met, each
    /// folder once.
    fn all(&mut self, dir: &Path, root: &Path) -> std::io::Result<()> {
        self.dir(dir, root, false)?;
        while let Some(link) = self.pending.pop_front() {
            self.link(link)?;
        }
        Ok(())
    }

    /// Lists `dir` (resolved: `real`) and the folders in it; `linked` when reached
    /// through a link. Links are set aside for [`Walk::all`].
    fn dir(&mut self, dir: &Path, real: &Path, linked: bool) -> std::io::Result<()> {
        if !self.visited.insert(real.to_path_buf()) {
            return Ok(());
        }
        let mut entries = std::fs::read_dir(dir)?.collect::<std::io::Result<Vec<_>>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if skipped(&entry.file_name().to_string_lossy()) {
                continue;
            }
            let path = entry.path();
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                self.pending.push_back(path);
            } else if kind.is_dir() {
                self.dir(&path, &real.join(entry.file_name()), linked)?;
            } else {
                self.found
                    .push((real.join(entry.file_name()), linked, path));
            }
        }
        Ok(())
    }

    fn link(&mut self, path: PathBuf) -> std::io::Result<()> {
        // A dangling link has nothing to read.
        let Ok(target) = path.canonicalize() else {
            return Ok(());
        };
        if self.links == Links::InsideOnly && !target.starts_with(self.root) {
            self.refused.push(path);
            return Ok(());
        }
        if !target.is_dir() {
            self.found.push((target, true, path));
        } else {
            self.dir(&path, &target, true)?;
        }
        Ok(())
    }

    /// The files found, each once: a file reached under several names (a link beside
    /// its target) keeps the name it has without links, else the first in order, so
    /// every run names it the same.
    fn finish(mut self) -> Listing {
        self.found.sort();
        self.found.dedup_by(|later, first| later.0 == first.0);
        let mut files: Vec<PathBuf> = self.found.into_iter().map(|(_, _, p)| p).collect();
        files.sort();
        self.refused.sort();
        Listing {
            files,
            refused_links: self.refused,
        }
    }
}
