//! Which landing files a table's rows came from. The commit that appends a batch read
//! from landing files names them in its `commitInfo` (`cdcflow.landing_files`), so a
//! reader of the table can name them, not the table's internal Parquet files, when
//! it reports rows it cannot use.

use std::collections::HashMap;

use deltalake::DeltaTable;
use deltalake::kernel::Action;

use super::Table;
use crate::RunError;

/// The `commitInfo` key of the landing files a commit's rows were read from.
pub const LANDING_KEY: &str = "cdcflow.landing_files";

/// How many landing files a label names before it counts the rest.
const SHOWN: usize = 3;

/// The landing files a commit's `actions` name, as a label for its rows.
pub fn label_of(actions: &[Action]) -> Option<String> {
    let files = actions.iter().find_map(|a| match a {
        Action::CommitInfo(info) => info.info.get(LANDING_KEY),
        _ => None,
    })?;
    let files: Vec<&str> = files
        .as_array()?
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    let (first, rest) = files.split_at(files.len().min(SHOWN));
    match (first, rest.len()) {
        ([], _) => None,
        (_, 0) => Some(first.join(", ")),
        (_, n) => Some(format!("{} and {n} more landing file(s)", first.join(", "))),
    }
}

impl Table {
    /// The landing-file label of each data file (by its path in the log) added by the
    /// commits still in the log, newest first, until every path of `wanted` is found.
    pub(crate) async fn landing_labels(
        &self,
        t: &DeltaTable,
        wanted: &[String],
    ) -> Result<HashMap<String, String>, RunError> {
        let mut out = HashMap::new();
        for v in (0..=self.version().unwrap_or(-1)).rev() {
            if wanted.iter().all(|w| out.contains_key(w)) {
                break;
            }
            // Older commits are gone after a log cleanup: their files keep no label.
            let Some(actions) = self.commit_actions(t, v).await? else {
                break;
            };
            let Some(label) = label_of(&actions) else {
                continue;
            };
            for a in &actions {
                if let Action::Add(add) = a {
                    out.entry(add.path.clone()).or_insert_with(|| label.clone());
                }
            }
        }
        Ok(out)
    }
}
