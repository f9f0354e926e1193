//! A data file of a table's current version as cdcflow reads it: where it is on the
//! local disk, the rows its deletion vector removes, and its log entry (which a
//! merge-on-write re-adds with a larger vector).

use std::path::PathBuf;
use std::sync::Arc;

use deltalake::kernel::Add;
use deltalake::protocol::Stats;
use roaring::RoaringTreemap;

use super::pruning::KeyStats;

/// One data file of a table version.
#[derive(Debug, Clone)]
pub struct DataFile {
    /// On the local disk; for a remote table's file, its URL (for messages).
    pub path: PathBuf,
    /// The row positions its deletion vector removes.
    pub deleted: Option<Arc<RoaringTreemap>>,
    /// Its `add` action in the log; none for a file outside a table.
    pub(crate) add: Option<Add>,
    /// A remote table's file: read from what was fetched, not from `path`.
    pub(crate) remote: Option<super::remote::RemoteFile>,
}

impl DataFile {
    /// A Parquet file read whole: no table, no deletion vector.
    pub fn plain(path: PathBuf) -> Self {
        Self {
            path,
            deleted: None,
            add: None,
            remote: None,
        }
    }

    /// Whether the file may hold a row whose integer `column` is one of `values`
    /// (ascending), by its statistics ([`KeyStats::may_hold`]).
    pub fn may_hold(&self, column: &str, values: &[i64]) -> bool {
        self.stats().is_none_or(|s| s.may_hold(column, values))
    }

    /// Whether the file may hold a row whose integer `op` column is `value` and whose
    /// integer `time` column is before `before`, by its statistics.
    pub fn may_hold_before(&self, op: &str, value: i64, time: &str, before: i64) -> bool {
        self.stats()
            .is_none_or(|s| s.may_hold_before(op, value, time, before))
    }

    fn stats(&self) -> Option<Stats> {
        self.add.as_ref()?.get_stats().ok().flatten()
    }

    /// Rows a reader sees: the file's rows less those deleted (the log's count).
    /// The value of its log entry's tag `name`.
    pub fn tag(&self, name: &str) -> Option<&str> {
        self.add.as_ref()?.tags.as_ref()?.get(name)?.as_deref()
    }

    /// Its path as the table's log names it; none for a file outside a table.
    pub fn log_path(&self) -> Option<&str> {
        self.add.as_ref().map(|a| a.path.as_str())
    }

    pub fn live_rows(&self) -> Option<u64> {
        let physical = self.add.as_ref()?.get_stats().ok()??.num_records;
        let deleted = self.deleted.as_ref().map_or(0, |d| d.len());
        u64::try_from(physical).ok()?.checked_sub(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_stats(stats: &str) -> DataFile {
        DataFile {
            path: PathBuf::from("f.parquet"),
            deleted: None,
            add: Some(Add {
                stats: Some(stats.to_string()),
                ..Add::default()
            }),
            remote: None,
        }
    }

    #[test]
    fn a_file_is_skipped_only_when_its_statistics_exclude_every_key() {
        let file = with_stats(
            r#"{"numRecords":10,"minValues":{"id":100},"maxValues":{"id":200},"nullCount":{"id":0}}"#,
        );
        assert!(file.may_hold("id", &[5, 150]));
        assert!(file.may_hold("id", &[100]));
        assert!(file.may_hold("id", &[200, 300]));
        assert!(!file.may_hold("id", &[5, 99, 201]));
        assert!(!file.may_hold("id", &[]));
        assert!(file.may_hold("other", &[5]), "no statistics for the column");
        let with_nulls = with_stats(
            r#"{"numRecords":10,"minValues":{"id":100},"maxValues":{"id":200},"nullCount":{"id":1}}"#,
        );
        assert!(
            with_nulls.may_hold("id", &[5]),
            "a null key may be a marker"
        );
        assert!(DataFile::plain(PathBuf::from("x")).may_hold("id", &[5]));
    }
}
