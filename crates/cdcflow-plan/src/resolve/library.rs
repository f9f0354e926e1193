//! Reading the library files named by `pipeline.yaml`, with `${key}` substitution.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::*;

impl Resolver<'_> {
    // ---- files -------------------------------------------------------------------

    pub(super) fn read_libraries(
        &mut self,
        config: &PipelineConfig,
        config_text: &Arc<str>,
        conf: &BTreeMap<String, String>,
    ) -> BTreeSet<String> {
        // The `${key}`s the files name, known or not.
        let used = RefCell::new(BTreeSet::new());
        let storage = self.root.join(&config.storage);
        let mut paths = Vec::new();
        for pattern in &config.libraries {
            let full = self.root.join(pattern);
            let found: Vec<_> = match glob::Pattern::new(&full.to_string_lossy()) {
                Ok(g) => matching_files(&g, &full, &storage),
                Err(e) => {
                    self.config_error(
                        config_text,
                        pattern,
                        format!("invalid library glob `{pattern}`: {e}"),
                    );
                    continue;
                }
            };
            let found: Vec<_> = found
                .into_iter()
                .filter(|p| !p.starts_with(&storage))
                .collect();
            // A pipeline of syncs alone needs no SQL file of its own.
            let only_syncs =
                !config.syncs.is_empty() && config.libraries == crate::config::default_libraries();
            if found.is_empty() && !only_syncs {
                self.config_error(
                    config_text,
                    pattern,
                    format!("library `{pattern}` matches no file"),
                );
            }
            paths.extend(found);
        }
        paths.sort();
        paths.dedup();
        for path in paths {
            let rel = path
                .strip_prefix(self.root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    self.diags.push(Diagnostic::error(
                        "cdcflow::io",
                        format!("cannot read {rel}: {e}"),
                    ));
                    continue;
                }
            };
            // Notebook exports: %sql magic cells are uncommented in place.
            let sql = cdcflow_sql::notebook::sql_of_notebook(&text);
            let sql = sql.as_deref().unwrap_or(&text);
            let pre = if sql.contains("${") {
                substitute(sql, |k| {
                    used.borrow_mut().insert(k.to_string());
                    conf.get(k).cloned()
                })
            } else {
                Preprocessed::verbatim(sql)
            };
            self.files.push(SourceFile {
                path: rel,
                text: text.into(),
                pre,
            });
        }
        if self.files.is_empty() && !config.libraries.is_empty() && config.syncs.is_empty() {
            self.diags.push(Diagnostic::warning(
                "cdcflow::empty_pipeline",
                "the pipeline has no SQL files",
            ));
        }
        used.into_inner()
    }

    /// A `--conf` key that pipeline.yaml's configuration does not define and no file
    /// names as `${key}` changes nothing: most likely a misspelt key, so a warning.
    pub(super) fn check_overrides(
        &mut self,
        config: &PipelineConfig,
        overrides: &BTreeMap<String, String>,
        used: &BTreeSet<String>,
    ) {
        let defined = config.configuration_strings();
        for key in overrides.keys() {
            if defined.contains_key(key) || used.contains(key) {
                continue;
            }
            let known = defined.keys().chain(used).map(String::as_str);
            let mut help = "--conf sets the value of a `${key}` in the SQL files".to_string();
            if let Some(near) = suggest::did_you_mean(key, known) {
                help = format!("{near} {help}");
            }
            self.diags.push(
                Diagnostic::warning(
                    "cdcflow::unused_conf",
                    format!(
                        "--conf `{key}` is not used: no SQL file has `${{{key}}}` and pipeline.yaml does not define it"
                    ),
                )
                .help(help),
            );
        }
    }

    pub(super) fn config_error(&mut self, text: &Arc<str>, needle: &str, message: String) {
        self.config_error_labelled(text, needle, message, "this glob", None);
    }

    /// A `cdcflow::config` error at the first line of pipeline.yaml holding `needle`.
    pub(super) fn config_error_labelled(
        &mut self,
        text: &Arc<str>,
        needle: &str,
        message: String,
        label: &str,
        help: Option<&str>,
    ) {
        let mut d = Diagnostic::error("cdcflow::config", message);
        if let Some(help) = help {
            d = d.help(help.to_string());
        }
        if let Some((line_idx, line)) = text.lines().enumerate().find(|(_, l)| l.contains(needle)) {
            let col = line[..line.find(needle).unwrap_or(0)].chars().count() as u64 + 1;
            let line_no = line_idx as u64 + 1;
            d = d.at(Located {
                path: CONFIG_FILE.into(),
                text: Arc::clone(text),
                span: Span::new(
                    Location::new(line_no, col),
                    Location::new(line_no, col + needle.chars().count() as u64),
                ),
                label: label.into(),
            });
        }
        self.diags.push(d);
    }

    /// `storage:` is a folder of this machine or a bucket prefix (`s3://bucket/prefix`, `gs://…`, `az://…`);
    /// any other URL would be taken for a local folder named after its scheme, and the
    /// tables written where nobody looks.
    pub(super) fn check_storage_location(&mut self, config: &PipelineConfig, text: &Arc<str>) {
        if !config.storage.contains("://") {
            return;
        }
        let why = match crate::location::Location::parse(Path::new(""), &config.storage) {
            Err(why) => Some(why),
            // A `file://` URL: the storage's folder is given as a path.
            Ok(location) if !location.is_remote() => {
                Some("is a file:// URL: give the folder as a path".to_string())
            }
            Ok(_) => None,
        };
        if let Some(why) = why {
            self.config_error_labelled(
                text,
                &config.storage,
                format!("`storage:` {why}"),
                "not a storage cdcflow writes",
                Some("give a local folder, or an object-store prefix (s3://, gs://, az://, abfss://) (docs/storage.md, \"The pipeline's storage in a bucket\")"),
            );
        }
    }
}

/// The files `pattern` (the pipeline folder joined with a `libraries` glob) matches, as
/// `glob::glob` would list them but without following links to folders: a link loop
/// under the pipeline folder (in a landing folder, say) would otherwise be walked
/// without end. The storage folder is not walked.
fn matching_files(pattern: &glob::Pattern, full: &Path, storage: &Path) -> Vec<PathBuf> {
    // Walk from the longest leading part of the pattern that holds no wildcard.
    let mut base = PathBuf::new();
    for part in full.components() {
        let text = part.as_os_str().to_string_lossy();
        if text.contains(['*', '?', '[']) {
            break;
        }
        base.push(part);
    }
    let options = glob::MatchOptions {
        require_literal_separator: true,
        ..glob::MatchOptions::new()
    };
    let mut found = Vec::new();
    // The folder named in the pattern may itself be reached through a link.
    let mut todo = vec![(base, true)];
    while let Some((path, follow)) = todo.pop() {
        let meta = match follow {
            true => std::fs::metadata(&path),
            false => std::fs::symlink_metadata(&path),
        };
        let Ok(meta) = meta else {
            continue;
        };
        if meta.is_dir() {
            if path.starts_with(storage) {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&path) else {
                continue;
            };
            todo.extend(entries.filter_map(|e| e.ok().map(|e| (e.path(), false))));
        } else if path.is_file() && pattern.matches_path_with(&path, options) {
            found.push(path);
        }
    }
    found
}
