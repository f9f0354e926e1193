//! Slices of a batch's keys: what lets one AUTO CDC batch be applied by several tasks
//! at once (`exec/route.rs`, `exec/commit.rs`, docs/scale-out.md). Every key falls in
//! one of [`BUCKETS`] buckets by a hash of its canonical bytes, and slice `s` of `n`
//! owns the contiguous buckets `[s·256/n, (s+1)·256/n)`. Keys are independent of each
//! other, so each slice decides its own keys against the stored rows of those keys
//! only, and the slices' changes together are the batch's.
//!
//! The bytes are cdcflow's own, not DataFusion's or Arrow's hashing, so a key's bucket
//! outlives upgrades of either (a table's files may one day be laid out by bucket):
//! integers as a big-endian `i64`, binary values as they are, everything else as its
//! text (`CAST(… AS STRING)`), each column's bytes length-prefixed.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::arrow::error::ArrowError;
use twox_hash::XxHash3_64;

/// Key buckets: a slice owns a contiguous range of them.
pub const BUCKETS: usize = 256;

/// One slice of a batch's keys: `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Slice {
    pub index: usize,
    pub count: usize,
}

/// The tag of a data file written by a slice (the log's `add.tags`): the buckets of
/// the keys it holds, `lo-hi` inclusive. Delta readers ignore tags; a file without one
/// (written by a batch applied whole, or by another engine) may hold any key.
pub const TAG: &str = "cdcflow.buckets";

impl Slice {
    /// The slice of `count` a key of `bucket` belongs to.
    pub fn of_bucket(bucket: u8, count: usize) -> usize {
        usize::from(bucket) * count / BUCKETS
    }

    /// Whether a key of `bucket` is this slice's.
    pub fn owns(&self, bucket: u8) -> bool {
        Self::of_bucket(bucket, self.count) == self.index
    }

    /// The first and last bucket this slice owns.
    pub fn buckets(&self) -> (usize, usize) {
        let first = |s: usize| (s * BUCKETS).div_ceil(self.count.max(1));
        (first(self.index), first(self.index + 1).saturating_sub(1))
    }

    /// The [`TAG`] of the files this slice writes.
    pub fn tag(&self) -> String {
        let (lo, hi) = self.buckets();
        format!("{lo}-{hi}")
    }

    /// Whether a file tagged `tag` (none: untagged) may hold keys of this slice.
    pub fn may_hold(&self, tag: Option<&str>) -> bool {
        let Some((lo, hi)) = tag.and_then(|t| {
            let (lo, hi) = t.split_once('-')?;
            Some((lo.parse::<usize>().ok()?, hi.parse::<usize>().ok()?))
        }) else {
            return true;
        };
        let (first, last) = self.buckets();
        lo <= last && first <= hi
    }
}

/// The bucket of each row's key, `keys` being its key columns in KEYS order. A null
/// key (a marker's, never a keyed row's) hashes as its own value.
pub fn buckets(keys: &[ArrayRef]) -> Result<Vec<u8>, ArrowError> {
    let rows = keys.first().map_or(0, |c| c.len());
    let columns = keys
        .iter()
        .map(Canonical::of)
        .collect::<Result<Vec<_>, _>>()?;
    let mut bytes = Vec::with_capacity(32);
    let mut out = Vec::with_capacity(rows);
    for row in 0..rows {
        bytes.clear();
        for column in &columns {
            column.append(row, &mut bytes);
        }
        // The top byte of the hash: its best-mixed bits.
        out.push((XxHash3_64::oneshot(&bytes) >> 56) as u8);
    }
    Ok(out)
}

/// A key column as the bytes its buckets are hashed from.
enum Canonical {
    Integer(ArrayRef),
    Binary(ArrayRef),
    Text(ArrayRef),
}

impl Canonical {
    fn of(column: &ArrayRef) -> Result<Self, ArrowError> {
        let t = column.data_type();
        if t.is_integer() {
            return Ok(Self::Integer(cast(column, &DataType::Int64)?));
        }
        if matches!(
            t,
            DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::FixedSizeBinary(_)
        ) {
            return Ok(Self::Binary(cast(column, &DataType::LargeBinary)?));
        }
        Ok(Self::Text(cast(column, &DataType::LargeUtf8)?))
    }

    fn append(&self, row: usize, out: &mut Vec<u8>) {
        let column = match self {
            Self::Integer(c) | Self::Binary(c) | Self::Text(c) => c,
        };
        if column.is_null(row) {
            out.extend_from_slice(&u32::MAX.to_be_bytes());
            return;
        }
        let value: &[u8] = match self {
            Self::Integer(c) => {
                let v = c.as_primitive::<Int64Type>().value(row).to_be_bytes();
                out.extend_from_slice(&8_u32.to_be_bytes());
                out.extend_from_slice(&v);
                return;
            }
            Self::Binary(c) => c.as_binary::<i64>().value(row),
            Self::Text(c) => c.as_string::<i64>().value(row).as_bytes(),
        };
        let len = u32::try_from(value.len()).unwrap_or(u32::MAX - 1);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(value);
    }
}

/// Whether the batches of `spec` may be split in slices of their keys at all, by what
/// the flow declares: APPLY AS TRUNCATE empties the whole table at one event, and
/// generated columns are computed over the batch whole. Whether the tables allow it
/// (merge-on-write with deletion vectors) is the caller's other test.
pub(crate) fn splittable(
    spec: &cdcflow_plan::autocdc::AutoCdcSpec,
    rules: &crate::cdc::kernel::Rules,
) -> bool {
    spec.truncate_when.is_none() && rules.generated.is_empty()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray};

    use super::*;

    #[test]
    fn a_key_has_one_bucket_whatever_its_integer_type() {
        let wide: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 300_000]));
        let narrow: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 300_000]));
        assert_eq!(
            buckets(&[wide]).expect("buckets"),
            buckets(&[narrow]).expect("buckets")
        );
    }

    #[test]
    fn buckets_are_fixed_bytes_not_a_library_hash() {
        // Pinned: a change here moves every stored key to another bucket.
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let names: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        let one = buckets(&[Arc::clone(&ids)]).expect("buckets");
        let two = buckets(&[ids, names]).expect("buckets");
        assert_eq!(one, vec![109, 178, 110]);
        assert_ne!(one, two);
        let again =
            buckets(&[Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef]).expect("buckets");
        assert_eq!(one, again);
    }

    #[test]
    fn a_slice_reads_the_files_tagged_with_its_buckets_and_the_untagged() {
        for count in [1, 2, 3, 7] {
            for index in 0..count {
                let slice = Slice { index, count };
                let (lo, hi) = slice.buckets();
                for b in 0..=255_u8 {
                    assert_eq!(slice.owns(b), (lo..=hi).contains(&usize::from(b)));
                }
                assert!(slice.may_hold(Some(&slice.tag())));
                assert!(slice.may_hold(None) && slice.may_hold(Some("garbled")));
                for other in (0..count).filter(|&o| o != index) {
                    let tag = Slice {
                        index: other,
                        count,
                    }
                    .tag();
                    assert!(!slice.may_hold(Some(&tag)), "{count}: {index} reads {tag}");
                }
            }
        }
        // A file written with another slice count overlaps by its range.
        assert!(Slice { index: 1, count: 2 }.may_hold(Some("0-130")));
        assert!(!Slice { index: 0, count: 2 }.may_hold(Some("128-255")));
    }

    #[test]
    fn slices_cover_every_bucket_once_in_ranges() {
        for count in [1, 2, 3, 7, 256] {
            let mut last = 0;
            for bucket in 0..=255_u8 {
                let s = Slice::of_bucket(bucket, count);
                assert!(s < count && s >= last, "{count} {bucket}");
                last = s;
                let owners = (0..count)
                    .filter(|&index| Slice { index, count }.owns(bucket))
                    .count();
                assert_eq!(owners, 1);
            }
            assert_eq!(last, count - 1);
        }
    }
}
