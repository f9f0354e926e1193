//! The distinct keys of a few rows (the keys a batch touches), found again among many
//! rows (a whole table): the many are hashed a column at a time, and rows are compared
//! only where hashes meet.

use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::cdc::apply_error::ApplyError;
use crate::cdc::decision::small;
use datafusion::arrow::array::{ArrayRef, DynComparator, RecordBatch, make_comparator};
use datafusion::arrow::compute::SortOptions;
use datafusion::common::HashMap;
use datafusion::common::hash_utils::{RandomState, create_hashes};

/// No row.
pub(crate) const NONE: u32 = u32::MAX;

/// A hasher for keys that are hashes already.
#[derive(Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

#[derive(Default)]
pub(crate) struct KeySet {
    columns: Vec<ArrayRef>,
    /// Hash → the first row with it.
    heads: HashMap<u64, u32, BuildHasherDefault<PreHashed>>,
    /// Row → the next row with the same hash and another key.
    next: Vec<u32>,
    len: usize,
}

fn random_state() -> RandomState {
    RandomState::with_seed(0x0cdc_f10e)
}

/// The hash of each row's key.
pub(crate) fn hashes(columns: &[ArrayRef]) -> Result<Vec<u64>, ApplyError> {
    let rows = columns.first().map_or(0, |c| c.len());
    let mut out = vec![0; rows];
    create_hashes(columns, &random_state(), &mut out)
        .map_err(|e| ApplyError::Defect(format!("hashing keys: {e}")))?;
    Ok(out)
}

fn comparators(a: &[ArrayRef], b: &[ArrayRef]) -> Result<Vec<DynComparator>, ApplyError> {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            make_comparator(x.as_ref(), y.as_ref(), SortOptions::default()).map_err(Into::into)
        })
        .collect()
}

fn equal(cmps: &[DynComparator], i: usize, j: usize) -> bool {
    cmps.iter().all(|c| c(i, j).is_eq())
}

impl KeySet {
    /// The keys of `rows` of the key `columns`; of rows with equal keys the first
    /// stands for them.
    pub(crate) fn new(
        columns: Vec<ArrayRef>,
        rows: impl IntoIterator<Item = usize>,
    ) -> Result<Self, ApplyError> {
        let hashes = hashes(&columns)?;
        // Rows are chained by u32 position, NONE (u32::MAX) ending a chain.
        if hashes.len() >= NONE as usize {
            return Err(ApplyError::too_many("keys"));
        }
        let cmps = comparators(&columns, &columns)?;
        let mut set = Self {
            heads: HashMap::default(),
            next: vec![NONE; hashes.len()],
            columns,
            len: 0,
        };
        for r in rows {
            let h = hashes[r];
            if set.find_in_chain(&cmps, h, r) != NONE {
                continue;
            }
            let head = set.heads.entry(h).or_insert(NONE);
            set.next[r] = *head;
            *head = small(r);
            set.len += 1;
        }
        Ok(set)
    }

    /// Distinct keys in the set.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// How many keys of the set `other` holds too.
    pub(crate) fn count_in(&self, other: &KeySet) -> Result<usize, ApplyError> {
        let mut rows = Vec::with_capacity(self.len);
        for &head in self.heads.values() {
            let mut at = head;
            while at != NONE {
                rows.push(at as usize);
                at = self.next[at as usize];
            }
        }
        let hashes = hashes(&self.columns)?;
        Ok(other.find_rows(&self.columns, &hashes, rows)?.len())
    }

    fn find_in_chain(&self, cmps: &[DynComparator], hash: u64, row: usize) -> u32 {
        let mut at = self.heads.get(&hash).copied().unwrap_or(NONE);
        while at != NONE {
            if equal(cmps, row, at as usize) {
                return at;
            }
            at = self.next[at as usize];
        }
        NONE
    }

    /// For each row of `columns` (hashed as `hashes`), the row of the set holding its
    /// key, or [`NONE`].
    pub(crate) fn find(
        &self,
        columns: &[ArrayRef],
        hashes: &[u64],
    ) -> Result<Vec<u32>, ApplyError> {
        if self.len == 0 {
            return Ok(vec![NONE; hashes.len()]);
        }
        let cmps = comparators(columns, &self.columns)?;
        Ok(hashes
            .iter()
            .enumerate()
            .map(|(r, &h)| self.find_in_chain(&cmps, h, r))
            .collect())
    }

    /// [`KeySet::find`] for the given `rows` only: (row, row of the set) where found.
    pub(crate) fn find_rows(
        &self,
        columns: &[ArrayRef],
        hashes: &[u64],
        rows: impl IntoIterator<Item = usize>,
    ) -> Result<Vec<(usize, u32)>, ApplyError> {
        if self.len == 0 {
            return Ok(vec![]);
        }
        let cmps = comparators(columns, &self.columns)?;
        Ok(rows
            .into_iter()
            .map(|r| (r, self.find_in_chain(&cmps, hashes[r], r)))
            .filter(|&(_, m)| m != NONE)
            .collect())
    }
}

/// The key columns `keys` of `batch`.
pub(super) fn key_columns(batch: &RecordBatch, keys: &[usize]) -> Vec<ArrayRef> {
    keys.iter().map(|&k| Arc::clone(batch.column(k))).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};

    use super::*;

    #[test]
    fn finds_equal_keys_of_several_columns_and_nothing_else() {
        let build: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1, 2, 1, 3])),
            Arc::new(StringArray::from(vec!["a", "b", "a", "c"])),
        ];
        let set = KeySet::new(build, 0..4).expect("set");
        assert_eq!(set.len, 3);
        let probe: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![3, 1, 1, 9])),
            Arc::new(StringArray::from(vec!["c", "a", "b", "a"])),
        ];
        let found = set
            .find(&probe, &hashes(&probe).expect("hashes"))
            .expect("find");
        assert_eq!(found, vec![3, 0, NONE, NONE]);
    }
}
