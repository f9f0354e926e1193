//! `list_files(path [, recursive => true|false])`, Databricks' table function that
//! lists a folder: one row per file with its `path` (a `file://` URL, as
//! `_metadata.file_path` of `read_files` gives it, so the two compare), `size` in bytes
//! and `modification_time`. Recursive (the default) lists the files under the folder
//! and not the folders; `recursive => false` lists the folder's own entries, a folder
//! with size 0 and its path ending in `/`. Databricks' `file` column (a FILE reference)
//! has no counterpart here; a `connection =>` is refused (`resolve/references.rs`).
//!
//! Hidden and `_`-prefixed entries and `.tmp`/`.crc` files are left out, as
//! `read_files` leaves them out: a file still being written does not become a
//! snapshot version. The folder is listed when the query runs, not when it is planned,
//! so `validate` needs no folder and every run sees the folder as it is.
//!
//! The relation rewrite (`crate::relations`) makes the path absolute (relative to the
//! pipeline folder) and the arguments positional: `list_files('/abs/path', true)`.
//! `cdcflow query` rewrites its statement the same way (`rewrite_calls`) and has the
//! function registered in its session (`Function`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableFunctionImpl, TableProvider};
use datafusion::common::{ScalarValue, exec_datafusion_err, plan_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::provider_as_source;
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableSource, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::sqlparser::ast::Query;

use crate::file_metadata::{file_url, modified_micros};
use crate::read_files::{Links, list_folder, skipped};
use crate::relations::{FilesCall, Relation};

/// The function's name.
pub const NAME: &str = "list_files";

/// The columns of a listing.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("size", DataType::Int64, false),
        Field::new(
            "modification_time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
    ]))
}

/// The source of `list_files(path, recursive)` as the relation rewrite leaves it.
pub(crate) fn source(args: &[Expr]) -> Result<Arc<dyn TableSource>> {
    Ok(provider_as_source(provider(args)?))
}

fn provider(args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
    let (path, recursive) = match args {
        [
            Expr::Literal(ScalarValue::Utf8(Some(path)), _),
            Expr::Literal(ScalarValue::Boolean(Some(recursive)), _),
        ] => (PathBuf::from(path), *recursive),
        _ => return plan_err!("list_files takes a literal path and recursive => true|false"),
    };
    Ok(Arc::new(ListFiles { path, recursive }))
}

/// `list_files` as a DataFusion table function, for a session planning SQL itself
/// (`cdcflow query`) once `rewrite_calls` has made its calls positional.
#[derive(Debug)]
pub struct Function;

impl TableFunctionImpl for Function {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        provider(args)
    }
}

/// Makes every `list_files` call of `query` positional with its path absolute
/// (relative paths start at `root`), as a flow's query is rewritten; the first mistake
/// in a call, as text, if there is one.
pub fn rewrite_calls(query: &mut Query, root: &Path) -> std::result::Result<(), String> {
    let mut mistake = None;
    crate::relations::rewrite_relations(query, &mut |relation| match relation {
        Relation::ListFiles(call) => {
            let fault = call_fault(&call);
            let path = call.path.as_ref().map(|p| root.join(p));
            match (fault, path) {
                (None, Some(path)) => Some(path.display().to_string()),
                (fault, _) => {
                    mistake = mistake.take().or(fault);
                    None
                }
            }
        }
        _ => None,
    });
    mistake.map_or(Ok(()), Err)
}

/// What is wrong with `call`, its first fault as the pipeline's diagnostics say it.
fn call_fault(call: &FilesCall) -> Option<String> {
    if !call.invalid.is_empty() {
        return Some("list_files takes literal arguments".into());
    }
    if call.path.is_none() {
        return Some("list_files needs a path: list_files('landing/customers')".into());
    }
    call.options
        .iter()
        .find_map(|(key, value, _)| option_fault(key, value))
        .map(|f| match f.message.starts_with(NAME) {
            true => f.message,
            false => format!("{NAME}: {}", f.message),
        })
}

/// A `list_files` option that cannot be taken: what to say, the label at the option,
/// and the help.
pub(crate) struct OptionFault {
    pub message: String,
    pub label: &'static str,
    pub help: &'static str,
}

/// What is wrong with option `key => value` of a `list_files` call, if anything: one
/// rule for flows (`resolve/references.rs`) and `cdcflow query` ([`rewrite_calls`]).
pub(crate) fn option_fault(key: &str, value: &str) -> Option<OptionFault> {
    let fault = |message: String, label, help| {
        Some(OptionFault {
            message,
            label,
            help,
        })
    };
    match key {
        "recursive" if ["true", "false"].contains(&value.to_ascii_lowercase().as_str()) => None,
        "recursive" => fault(
            format!("recursive => {value} is not a boolean"),
            "not true or false",
            "recursive => true lists every file under the folder; false its own files and folders",
        ),
        "connection" => fault(
            "list_files lists folders of this machine: connection => is not supported".into(),
            "not supported",
            "list a local folder, relative to the pipeline folder",
        ),
        _ => fault(
            format!("list_files has no option `{key}`"),
            "unknown option",
            "list_files(path [, recursive => true|false])",
        ),
    }
}

/// A folder, listed when scanned.
#[derive(Debug)]
struct ListFiles {
    path: PathBuf,
    recursive: bool,
}

#[async_trait::async_trait]
impl TableProvider for ListFiles {
    fn schema(&self) -> SchemaRef {
        schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let entries = listing(&self.path, self.recursive)
            .map_err(|e| exec_datafusion_err!("list_files('{}'): {e}", self.path.display()))?;
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    entries.iter().map(|e| e.path.as_str()),
                )),
                Arc::new(Int64Array::from_iter_values(entries.iter().map(|e| e.size))),
                Arc::new(
                    TimestampMicrosecondArray::from_iter(entries.iter().map(|e| e.modified))
                        .with_timezone("UTC"),
                ),
            ],
        )?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            schema(),
            projection.cloned(),
        )?)
    }
}

/// One row of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub path: String,
    pub size: i64,
    /// Microseconds since the epoch.
    pub modified: Option<i64>,
}

/// The entries of `path`, sorted by path: every file under it (`recursive`), or its
/// own files and folders. A file path lists that file. Fails when nothing is there.
pub fn listing(path: &Path, recursive: bool) -> std::io::Result<Vec<Entry>> {
    if !path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such file or folder",
        ));
    }
    let mut entries = match (recursive, path.is_dir()) {
        (_, false) => vec![entry(path, false)?],
        (true, true) => list_folder(path, Links::InsideOnly)?
            .files
            .iter()
            .map(|f| entry(f, false))
            .collect::<std::io::Result<_>>()?,
        (false, true) => {
            let mut entries = Vec::new();
            for e in std::fs::read_dir(path)? {
                let e = e?;
                if skipped(&e.file_name().to_string_lossy()) {
                    continue;
                }
                entries.push(entry(&e.path(), e.path().is_dir())?);
            }
            entries
        }
    };
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

fn entry(path: &Path, folder: bool) -> std::io::Result<Entry> {
    let meta = std::fs::metadata(path)?;
    let modified = modified_micros(&meta);
    let mut url = file_url(path);
    if folder && !url.ends_with('/') {
        url.push('/');
    }
    Ok(Entry {
        path: url,
        size: match folder {
            true => 0,
            false => i64::try_from(meta.len()).unwrap_or(i64::MAX),
        },
        modified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(entries: &[Entry], root: &Path) -> Vec<String> {
        let base = file_url(root);
        entries
            .iter()
            .map(|e| e.path.trim_start_matches(base.as_str()).to_string())
            .collect()
    }

    #[test]
    fn a_folder_lists_its_files_recursively_or_its_own_entries_with_folders() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let root = dir.path();
        std::fs::create_dir_all(root.join("v2")).expect("a test file");
        std::fs::create_dir_all(root.join("v1")).expect("a test file");
        std::fs::write(root.join("v1/a.csv"), "id\n1\n").expect("a test file");
        std::fs::write(root.join("v2/a.csv"), "id\n").expect("a test file");
        std::fs::write(root.join("top.csv"), "id\n1\n2\n").expect("a test file");
        std::fs::write(root.join(".hidden.csv"), "x").expect("a test file");
        std::fs::write(root.join("v1/b.csv.tmp"), "x").expect("a test file");

        let all = listing(root, true).expect("a listing");
        assert_eq!(names(&all, root), ["/top.csv", "/v1/a.csv", "/v2/a.csv"]);
        assert_eq!(all[0].size, 7);
        assert!(all[0].modified.is_some());

        let own = listing(root, false).expect("a listing");
        assert_eq!(names(&own, root), ["/top.csv", "/v1/", "/v2/"]);
        assert_eq!(own[1].size, 0);

        let one = listing(&root.join("top.csv"), false).expect("a listing");
        assert_eq!(one.len(), 1);
        assert!(listing(&root.join("missing"), true).is_err());
    }
}
