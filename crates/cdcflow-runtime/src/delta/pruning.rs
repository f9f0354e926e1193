//! Skipping what cannot hold a key: the minimum, maximum and null count of an integer
//! column, from a Delta file's statistics or a Parquet row group's, decide whether a
//! batch's touched keys (or rows of another kind it must see) can be there. Bounds may
//! be loose (a deletion vector removed rows since), never too tight.

use std::collections::HashMap;

use datafusion::parquet::file::metadata::RowGroupMetaData;
use datafusion::parquet::file::statistics::Statistics;
use deltalake::protocol::{ColumnValueStat, Stats};

/// The statistics of a file or row group, by top-level column name.
pub trait KeyStats {
    /// The column's smallest and largest value, when it is an integer with both.
    fn range(&self, column: &str) -> Option<(i64, i64)>;
    /// The column's null values, when recorded.
    fn nulls(&self, column: &str) -> Option<u64>;

    /// Whether a row whose `column` is one of `values` (ascending) may be here: false
    /// only when every value falls outside the range and the column has no nulls.
    fn may_hold(&self, column: &str, values: &[i64]) -> bool {
        let Some((min, max)) = self.range(column) else {
            return true;
        };
        if self.nulls(column) != Some(0) {
            return true;
        }
        let first = values.partition_point(|&v| v < min);
        values.get(first).is_some_and(|&v| v <= max)
    }

    /// Whether a row whose `op` column is `value` and whose `time` column is before
    /// `before` may be here.
    fn may_hold_before(&self, op: &str, value: i64, time: &str, before: i64) -> bool {
        let (Some((low, high)), Some((earliest, _))) = (self.range(op), self.range(time)) else {
            return true;
        };
        (low..=high).contains(&value) && earliest < before
    }
}

/// A Delta `add`'s statistics.
impl KeyStats for Stats {
    fn range(&self, column: &str) -> Option<(i64, i64)> {
        let bound = |m: &HashMap<String, ColumnValueStat>| {
            m.get(column)
                .and_then(ColumnValueStat::as_value)
                .and_then(serde_json::Value::as_i64)
        };
        Some((bound(&self.min_values)?, bound(&self.max_values)?))
    }

    fn nulls(&self, column: &str) -> Option<u64> {
        let count = self.null_count.get(column)?.as_value()?;
        u64::try_from(count).ok()
    }
}

/// A Parquet row group's column chunk statistics.
impl KeyStats for RowGroupMetaData {
    fn range(&self, column: &str) -> Option<(i64, i64)> {
        match chunk_statistics(self, column)? {
            Statistics::Int64(s) => Some((*s.min_opt()?, *s.max_opt()?)),
            Statistics::Int32(s) => Some((i64::from(*s.min_opt()?), i64::from(*s.max_opt()?))),
            _ => None,
        }
    }

    fn nulls(&self, column: &str) -> Option<u64> {
        chunk_statistics(self, column)?.null_count_opt()
    }
}

fn chunk_statistics<'a>(group: &'a RowGroupMetaData, column: &str) -> Option<&'a Statistics> {
    group
        .columns()
        .iter()
        .find(|c| c.column_path().parts() == [column])?
        .statistics()
}
