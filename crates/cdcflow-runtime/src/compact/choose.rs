//! Which files of a table a compaction rewrites, and in which groups, decided from the
//! Delta log alone (each file's size, row count, deletion-vector cardinality and key
//! statistics): no Parquet file is opened to decide.

use std::cmp::Ordering;

/// Rows a compacted file holds at most: one row group of cdcflow's writer
/// (`delta/encoding.rs`), the unit its readers share out over the cores.
pub const TARGET_ROWS: usize = 128 * 1024;
/// Bytes a compacted file holds at most, for tables of wide rows.
pub const TARGET_BYTES: u64 = 128 * 1024 * 1024;
/// A file is small below this share of the target (a quarter).
const SMALL_SHARE: usize = 4;
/// Rows read, sorted and written together at most: what a compaction holds in memory.
const GROUP_TARGETS: usize = 4;

/// When a table is worth compacting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Small files are compacted once there are at least this many.
    pub min_small_files: usize,
    /// A file whose deletion vector deletes at least this share of its rows is
    /// rewritten (any deleted row when 0).
    pub deleted_share: f64,
}

impl Policy {
    /// After a run's batches: a table is rewritten only when it has drifted far enough
    /// for the rewrite to pay off (see docs/runtime.md, "Compaction").
    pub const AUTOMATIC: Self = Self {
        min_small_files: 16,
        deleted_share: 0.2,
    };
    /// `cdcflow optimize`: every file that is small or carries deleted rows.
    pub const ON_DEMAND: Self = Self {
        min_small_files: 2,
        deleted_share: 0.0,
    };
}

/// What the log says about one data file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileFacts {
    pub size: u64,
    /// Rows in the file (`numRecords`), deleted ones included; `None` without stats.
    pub records: Option<usize>,
    /// Rows its deletion vector deletes (0 without one).
    pub deleted: usize,
    /// The smallest value of the table's first key column in the file, for ordering.
    pub min_key: Option<serde_json::Value>,
}

impl FileFacts {
    /// Rows still live; a file without stats counts as full.
    pub fn live_rows(&self) -> usize {
        self.records
            .unwrap_or(TARGET_ROWS)
            .saturating_sub(self.deleted)
    }

    fn deleted_share(&self) -> Option<f64> {
        let records = self.records.filter(|r| *r > 0)?;
        Some(self.deleted as f64 / records as f64)
    }
}

/// Rows per compacted file for a table of these files: [`TARGET_ROWS`], fewer where
/// rows are so wide that they would pass [`TARGET_BYTES`].
pub fn target_rows(files: &[FileFacts]) -> usize {
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let rows: usize = files.iter().filter_map(|f| f.records).sum();
    if rows == 0 {
        return TARGET_ROWS;
    }
    let per_row = (bytes / rows as u64).max(1);
    usize::try_from(TARGET_BYTES / per_row)
        .unwrap_or(TARGET_ROWS)
        .clamp(1024, TARGET_ROWS)
}

/// The files to rewrite: those whose deletion vectors delete a large share of their
/// rows, and the small files once there are enough of them. In the order their rows
/// are best written: by their first key's smallest value for a keyed table (files
/// without it last), else as given (the log's order).
pub fn victims(files: &[FileFacts], policy: Policy, keyed: bool) -> Vec<usize> {
    let target = target_rows(files);
    let small = |f: &FileFacts| {
        f.records.is_some_and(|r| r * SMALL_SHARE < target)
            && f.size * (SMALL_SHARE as u64) < TARGET_BYTES
    };
    let deleted = |f: &FileFacts| {
        f.deleted > 0 && f.deleted_share().is_some_and(|s| s >= policy.deleted_share)
    };
    let small_count = files.iter().filter(|f| small(f)).count();
    let take_small = small_count >= policy.min_small_files.max(2);
    let mut chosen: Vec<usize> = (0..files.len())
        .filter(|&i| deleted(&files[i]) || (take_small && small(&files[i])))
        .collect();
    if keyed {
        chosen.sort_by(|&a, &b| key_order(files[a].min_key.as_ref(), files[b].min_key.as_ref()));
    }
    chosen
}

/// `victims` in consecutive groups of about [`GROUP_TARGETS`] compacted files' rows:
/// each group is read, sorted and written on its own, so memory follows the group.
pub fn groups(files: &[FileFacts], victims: &[usize]) -> Vec<Vec<usize>> {
    let limit = target_rows(files) * GROUP_TARGETS;
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut filled = 0;
    for &i in victims {
        let rows = files[i].live_rows();
        match out.last_mut() {
            Some(group) if filled + rows <= limit || group.is_empty() => group.push(i),
            _ => {
                out.push(vec![i]);
                filled = 0;
            }
        }
        filled += rows;
    }
    out
}

/// Rows per file to write `rows` as files of at most `target` rows, as even as can be
/// (no small remainder file).
pub fn rows_per_file(rows: usize, target: usize) -> usize {
    let files = rows.div_ceil(target.max(1)).max(1);
    rows.div_ceil(files).max(1)
}

/// Ascending by JSON statistics value: numbers as numbers, text as text; values
/// missing or of other types after all others.
fn key_order(a: Option<&serde_json::Value>, b: Option<&serde_json::Value>) -> Ordering {
    use serde_json::Value;
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.total_cmp(&y)
        }
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(records: usize, deleted: usize, min_key: i64) -> FileFacts {
        FileFacts {
            size: records as u64 * 40,
            records: Some(records),
            deleted,
            min_key: Some(serde_json::json!(min_key)),
        }
    }

    #[test]
    fn small_files_wait_for_enough_of_them_and_full_files_stay() {
        let mut files = vec![file(TARGET_ROWS, 0, 0)];
        files.extend((0..15).map(|k| file(100, 0, k)));
        assert!(victims(&files, Policy::AUTOMATIC, true).is_empty());
        files.push(file(100, 0, 99));
        let chosen = victims(&files, Policy::AUTOMATIC, true);
        assert_eq!(chosen.len(), 16);
        assert!(!chosen.contains(&0), "a full file is left alone");
        assert_eq!(victims(&files[..3], Policy::ON_DEMAND, true), vec![1, 2]);
    }

    #[test]
    fn a_file_with_a_fifth_of_its_rows_deleted_is_rewritten_alone() {
        let files = vec![
            file(TARGET_ROWS, TARGET_ROWS / 5, 0),
            file(TARGET_ROWS, TARGET_ROWS / 5 + 1, 1),
        ];
        assert_eq!(victims(&files, Policy::AUTOMATIC, true), vec![1]);
        assert_eq!(victims(&files, Policy::ON_DEMAND, true), vec![0, 1]);
    }

    #[test]
    fn keyed_files_are_taken_in_key_order_and_grouped_within_memory() {
        let files: Vec<FileFacts> = (0..12)
            .map(|k| file(TARGET_ROWS, TARGET_ROWS / 2, 11 - k))
            .collect();
        let chosen = victims(&files, Policy::AUTOMATIC, true);
        assert_eq!(chosen, (0..12).rev().collect::<Vec<_>>());
        let grouped = groups(&files, &chosen);
        // Half of each file is live: eight files make the rows of four full ones.
        assert_eq!(grouped.iter().map(Vec::len).collect::<Vec<_>>(), [8, 4]);
        assert_eq!(
            victims(&files, Policy::AUTOMATIC, false),
            (0..12).collect::<Vec<_>>()
        );
    }

    #[test]
    fn files_are_cut_evenly_and_wide_rows_make_smaller_files() {
        assert_eq!(rows_per_file(10, TARGET_ROWS), 10);
        assert_eq!(
            rows_per_file(TARGET_ROWS + 2, TARGET_ROWS),
            TARGET_ROWS / 2 + 1
        );
        let wide = vec![FileFacts {
            size: 1 << 30,
            records: Some(1 << 20),
            deleted: 0,
            min_key: None,
        }];
        assert_eq!(target_rows(&wide), 128 * 1024);
        let wider = vec![FileFacts {
            size: 1 << 32,
            ..wide[0].clone()
        }];
        assert_eq!(target_rows(&wider), 32 * 1024);
    }
}
