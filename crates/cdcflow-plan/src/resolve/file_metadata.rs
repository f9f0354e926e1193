//! A query's `_metadata` and `input_file_name()` (`crate::file_metadata`): its file
//! sources get the column, and what cannot be read is said where it is written.

use super::*;
use crate::file_metadata::{self as metadata, COLUMN, Use};

impl Resolver<'_> {
    /// Gives `inputs`' file sources the `_metadata` column when `query` reads it, and
    /// rewrites `query` to read it; reports a use the query's sources cannot give.
    pub(super) fn file_metadata(&mut self, query: &mut Query, inputs: &mut [Input], file: FileId) {
        let uses = metadata::uses(query);
        if uses.is_empty() {
            return;
        }
        let mut files = Vec::new();
        for input in inputs.iter_mut() {
            if let Input::Files(rf) = input {
                rf.metadata = true;
                files.push(rf.table.clone());
            }
        }
        // Without a file source, `_metadata` may be a column a table stored (`SELECT *,
        // _metadata FROM read_files(…)` keeps it): planning says whether it is.
        if files.is_empty() {
            if let Some(span) = uses.iter().find_map(|u| match u {
                Use::Function(span) => Some(*span),
                Use::Column(..) => None,
            }) {
                self.error(
                    file,
                    span,
                    "cdcflow::file_metadata",
                    "input_file_name() names the file a row was read from, and this query reads no files".into(),
                    "no file source",
                    Some("call it where the files are read (read_files, an external table stored as files, json.`path`) and keep it as a column: `input_file_name() AS source_file`".into()),
                );
            }
            return;
        }
        let known: Vec<String> = metadata::fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        for u in uses {
            if let Use::Column(_, Some(field)) = u
                && !known.iter().any(|k| k.eq_ignore_ascii_case(&field.value))
            {
                self.error(
                    file,
                    field.span,
                    "cdcflow::unknown_column",
                    format!("`{COLUMN}` has no field `{}`", field.value),
                    "unknown field",
                    Some(format!("its fields: {}", known.join(", "))),
                );
            }
        }
        metadata::rewrite(query, &files);
    }
}
