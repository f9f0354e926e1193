//! The difference between a table's rows and its expected rows, as a multiset: rows
//! expected and not found, rows found and not expected, and, when the table has keys
//! (an AUTO CDC target), rows of the same key paired as changed, so that a report can
//! mark the cells that differ.

use std::collections::BTreeMap;

use super::rows::Row;

/// How a table differs from what a case expects.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TableDiff {
    /// Expected, not in the table.
    pub missing: Vec<Row>,
    /// In the table, not expected.
    pub unexpected: Vec<Row>,
    /// A missing row and an unexpected one of the same key: (expected, found).
    pub changed: Vec<(Row, Row)>,
}

impl TableDiff {
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.changed.is_empty()
    }

    /// Of a changed pair, the positions of the cells that differ.
    pub fn differing(expected: &Row, found: &Row) -> Vec<usize> {
        (0..expected.len())
            .filter(|&i| expected.get(i) != found.get(i))
            .collect()
    }
}

/// `expected` against `found` as multisets; rows with equal cells at `keys` (when
/// given) are paired as changed, first with first.
pub fn diff(expected: &[Row], found: &[Row], keys: &[usize]) -> TableDiff {
    let mut counts: BTreeMap<&Row, i64> = BTreeMap::new();
    for row in expected {
        *counts.entry(row).or_default() += 1;
    }
    for row in found {
        *counts.entry(row).or_default() -= 1;
    }
    let mut missing = Vec::new();
    let mut unexpected = Vec::new();
    for (row, n) in counts {
        let target = if n > 0 { &mut missing } else { &mut unexpected };
        for _ in 0..n.unsigned_abs() {
            target.push(row.clone());
        }
    }
    let mut changed = Vec::new();
    if !keys.is_empty() {
        let key = |row: &Row| keys.iter().map(|&k| row[k].clone()).collect::<Vec<_>>();
        let mut left = Vec::new();
        for m in missing {
            match unexpected.iter().position(|u| key(u) == key(&m)) {
                Some(i) => changed.push((m, unexpected.remove(i))),
                None => left.push(m),
            }
        }
        missing = left;
    }
    TableDiff {
        missing,
        unexpected,
        changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Row {
        cells
            .iter()
            .map(|c| (*c != "NULL").then(|| c.to_string()))
            .collect()
    }

    #[test]
    fn equal_multisets_differ_in_nothing_whatever_the_order() {
        let a = vec![row(&["1", "a"]), row(&["2", "b"]), row(&["1", "a"])];
        let b = vec![row(&["1", "a"]), row(&["1", "a"]), row(&["2", "b"])];
        assert!(diff(&a, &b, &[0]).is_empty());
    }

    #[test]
    fn a_duplicate_row_is_a_difference() {
        let a = vec![row(&["1", "a"])];
        let b = vec![row(&["1", "a"]), row(&["1", "a"])];
        let d = diff(&a, &b, &[]);
        assert_eq!(d.unexpected, vec![row(&["1", "a"])]);
        assert!(d.missing.is_empty());
    }

    #[test]
    fn rows_of_one_key_pair_as_changed_and_others_stay_missing_or_unexpected() {
        let expected = vec![row(&["1", "paid"]), row(&["3", "open"])];
        let found = vec![row(&["1", "shipped"]), row(&["4", "open"])];
        let d = diff(&expected, &found, &[0]);
        assert_eq!(
            d.changed,
            vec![(row(&["1", "paid"]), row(&["1", "shipped"]))]
        );
        assert_eq!(d.missing, vec![row(&["3", "open"])]);
        assert_eq!(d.unexpected, vec![row(&["4", "open"])]);
        assert_eq!(
            TableDiff::differing(&d.changed[0].0, &d.changed[0].1),
            vec![1]
        );
    }

    #[test]
    fn null_differs_from_every_value() {
        let d = diff(&[row(&["1", "NULL"])], &[row(&["1", ""])], &[0]);
        assert_eq!(d.changed.len(), 1);
    }
}
