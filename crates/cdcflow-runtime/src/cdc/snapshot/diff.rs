//! The comparison of a snapshot with the target's current rows, without holding
//! either: the target is read once into its keys and a 128-bit digest of each row's
//! other values, and the snapshot streams past them. A snapshot row whose key is new
//! is an insert, one whose digest differs an update; the keys no row matched are the
//! deletes. Only those rows are kept, as the change events of the batch.
//!
//! Keys are compared by 95 bits of the XXH3-128 hash of their bytes (arrow's row
//! format, which equates as the values do): two different keys are taken for one only
//! if they share those bits, for n keys a chance of about n²/2^96 (10^-15 at 10^7
//! keys), and the index so holds 32 bytes a key, looked up with one or two cache
//! misses (comparing the keys' bytes cost three more, and the bytes themselves). Values
//! are compared by an XXH3-128 digest of their row bytes, so a changed row is taken for
//! unchanged only if two different rows share a 128-bit digest (about 2^-128 per
//! changed row). The keys' bytes are kept apart, read only to write the deletes.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, FixedSizeBinaryArray,
    FixedSizeBinaryBuilder, RecordBatch, new_null_array,
};
use datafusion::arrow::compute::{cast_with_options, filter_record_batch, is_null};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::common::ScalarValue;
use twox_hash::XxHash3_128;

use cdcflow_plan::snapshot::{DELETED_COLUMN, VERSION_COLUMN};

use super::STRICT;
use super::counts::Counts;
use crate::RunError;
use crate::delta::DataFile;

/// Rows per batch of deletes.
const DELETE_ROWS: usize = 64 * 1024;

/// The columns compared: the keys, the other columns, and their types (the snapshot's).
pub(super) struct Columns {
    pub keys: Vec<Field>,
    pub values: Vec<Field>,
    /// SCD type 2: the target's `__END_AT`, of the version type (open rows have none).
    pub end_at: Option<Field>,
}

impl Columns {
    fn read_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self.keys.iter().chain(&self.values).cloned().collect();
        fields.extend(self.end_at.clone());
        Arc::new(Schema::new(fields))
    }

    fn converter(fields: &[Field]) -> Result<Option<RowConverter>, RunError> {
        if fields.is_empty() {
            return Ok(None);
        }
        let sort = fields
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Some(RowConverter::new(sort)?))
    }
}

/// A key as the index holds it: 96 bits of its XXH3-128 hash (`lo` and the high bits
/// of `hi`), whether the snapshot had it (the lowest bit of `hi`), its number (where
/// its bytes are, for a delete) and the XXH3-128 digest of its row's other values.
/// 32 bytes a key.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    lo: u64,
    hi: u32,
    at: u32,
    digest: [u64; 2],
}

/// The bit of [`Entry::hi`] that says the snapshot had the key.
const SEEN: u32 = 1;

/// A key's hash: its low 64 bits, and 31 more (the lowest bit left for [`SEEN`]).
fn key_hash(key: &[u8]) -> (u64, u32) {
    let h = XxHash3_128::oneshot(key);
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the hash's parts, taken apart"
    )]
    (h as u64, ((h >> 64) as u32) & !SEEN)
}

/// The target's current keys with their digests, and which of them the snapshot had.
pub(super) struct Current {
    columns: Columns,
    keys: RowConverter,
    values: Option<RowConverter>,
    /// Key bytes, in chunks; a key's number runs over all chunks in order. Read only
    /// for the deletes.
    chunks: Vec<BinaryArray>,
    /// The number of each chunk's first key.
    starts: Vec<u32>,
    /// The keys, bucketed by the top bits of their hash: bucket `b` holds
    /// `entries[directory[b]..directory[b + 1]]`, about four keys. A lookup reads one
    /// directory slot and one or two cache lines of entries: the index is sized
    /// exactly (no hash table's spare capacity), and a probe costs few cache misses.
    directory: Vec<u32>,
    entries: Vec<Entry>,
    /// 64 less the bits of a bucket number.
    shift: u32,
    /// The keys new in this snapshot, to find one given twice.
    fresh: HashSet<(u64, u32)>,
    pub counts: Counts,
}

impl Current {
    /// The current rows of the target `files` (for SCD type 2, its open versions).
    pub fn read(files: &[DataFile], columns: Columns) -> Result<Self, RunError> {
        let mut current = Self::new(columns)?;
        let compact = crate::delta::read::read_files_where(
            files,
            &current.columns.read_schema(),
            |batch: RecordBatch| current.compact(batch).map(Some),
        )?;
        current.add_compact(compact)?;
        Ok(current)
    }

    fn new(columns: Columns) -> Result<Self, RunError> {
        let keys = Columns::converter(&columns.keys)?
            .ok_or_else(|| RunError::internal("a snapshot flow without keys"))?;
        let values = Columns::converter(&columns.values)?;
        Ok(Self {
            columns,
            keys,
            values,
            chunks: Vec::new(),
            starts: Vec::new(),
            directory: vec![0; 3],
            entries: Vec::new(),
            shift: 63,
            fresh: HashSet::new(),
            counts: Counts::default(),
        })
    }

    /// A batch of the target's rows (of the read schema) as its current rows' keys and
    /// digests.
    fn compact(&self, batch: RecordBatch) -> Result<RecordBatch, RunError> {
        let (nkeys, nvalues) = (self.columns.keys.len(), self.columns.values.len());
        let batch = match self.columns.end_at.is_some() {
            true => {
                let open = is_null(batch.column(nkeys + nvalues))?;
                filter_record_batch(&batch, &open)?
            }
            false => batch,
        };
        let key_rows = self.keys.convert_columns(&batch.columns()[..nkeys])?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(key_rows.try_into_binary()?)];
        if let Some(v) = &self.values {
            let values = v.convert_columns(&batch.columns()[nkeys..nkeys + nvalues])?;
            columns.push(Arc::new(digests(&values)?));
        }
        let schema = compact_schema(columns.len() > 1);
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    /// Indexes the target's keys and digests (batches of [`Current::compact`]): counts
    /// the keys of each bucket, then places each key in its bucket.
    fn add_compact(&mut self, compact: Vec<RecordBatch>) -> Result<(), RunError> {
        let rows: usize = compact.iter().map(|b| b.num_rows()).sum();
        index(rows)?;
        // About four keys a bucket; at least two buckets.
        let bits = (rows / 4)
            .max(2)
            .next_power_of_two()
            .trailing_zeros()
            .min(32);
        self.shift = 64 - bits;
        let buckets = 1usize << bits;
        let mut directory = vec![0u32; buckets + 1];
        for batch in &compact {
            for key in batch.column(0).as_binary::<i32>().iter() {
                let (lo, _) = key_hash(key.unwrap_or_default());
                directory[self.bucket(lo) + 1] += 1;
            }
        }
        for b in 0..buckets {
            directory[b + 1] += directory[b];
        }
        let mut next = directory.clone();
        let mut entries = vec![Entry::default(); rows];
        let mut at = 0u32;
        for batch in compact {
            let keys = batch.column(0).as_binary::<i32>().clone();
            let digests = batch.columns().get(1).map(|d| d.as_fixed_size_binary());
            self.starts.push(at);
            for (i, key) in keys.iter().enumerate() {
                let (lo, hi) = key_hash(key.unwrap_or_default());
                let slot = &mut next[self.bucket(lo)];
                entries[*slot as usize] = Entry {
                    lo,
                    hi,
                    at,
                    digest: digests.map_or([0, 0], |d| digest_words(d.value(i))),
                };
                *slot += 1;
                at += 1;
            }
            self.chunks.push(keys);
        }
        // A key twice among the target's current rows is a fault of the table.
        for b in 0..buckets {
            let bucket = &mut entries[directory[b] as usize..directory[b + 1] as usize];
            bucket.sort_unstable_by_key(|e| (e.lo, e.hi));
            if bucket
                .windows(2)
                .any(|w| (w[0].lo, w[0].hi) == (w[1].lo, w[1].hi))
            {
                return Err(RunError::internal(
                    "the target holds a key twice among its current rows",
                ));
            }
        }
        self.directory = directory;
        self.entries = entries;
        Ok(())
    }

    fn bucket(&self, lo: u64) -> usize {
        usize::try_from(lo >> self.shift).unwrap_or(0)
    }

    /// The entry of the key of hash `(lo, hi)`, when the target has it.
    fn entry(&mut self, lo: u64, hi: u32) -> Option<&mut Entry> {
        let b = self.bucket(lo);
        let range = self.directory[b] as usize..self.directory[b + 1] as usize;
        self.entries[range]
            .iter_mut()
            .find(|e| e.lo == lo && e.hi & !SEEN == hi)
    }

    fn locate(&self, at: u32) -> (usize, usize) {
        let chunk = self.starts.partition_point(|&s| s <= at) - 1;
        (chunk, (at - self.starts[chunk]) as usize)
    }

    /// Compares one batch of the snapshot (of the snapshot's schema) with the target:
    /// the rows to write, new or changed. Fails on a null or repeated key, naming
    /// `snapshot` (which snapshot this is).
    pub fn probe(&mut self, batch: &RecordBatch, snapshot: &str) -> Result<RecordBatch, RunError> {
        let key_columns = self.columns_of(batch, &self.columns.keys, snapshot)?;
        for (field, column) in self.columns.keys.iter().zip(&key_columns) {
            if column.null_count() > 0 {
                return Err(RunError::input(format!(
                    "{snapshot} has a row whose key `{}` is null",
                    field.name()
                ))
                .with_help("every row of a snapshot needs its key: filter such rows out in the snapshot query, or choose other KEYS"));
            }
        }
        let key_rows = self.keys.convert_columns(&key_columns)?;
        let digests = match &self.values {
            Some(v) => {
                let values = self.columns_of(batch, &self.columns.values, snapshot)?;
                Some(v.convert_columns(&values)?)
            }
            None => None,
        };
        let mut write = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            let (lo, hi) = key_hash(key_rows.row(i).data());
            let digest = digests.as_ref().map_or([0, 0], |d| {
                digest_words(&XxHash3_128::oneshot(d.row(i).data()).to_le_bytes())
            });
            let found = self.entry(lo, hi).map(|e| {
                let again = e.hi & SEEN != 0;
                e.hi |= SEEN;
                (again, e.digest != digest)
            });
            let changed = match found {
                Some((true, _)) => return Err(self.repeated(&key_columns, i, snapshot)),
                Some((false, changed)) => {
                    match changed {
                        true => self.counts.updated += 1,
                        false => self.counts.unchanged += 1,
                    }
                    changed
                }
                None => {
                    if !self.fresh.insert((lo, hi)) {
                        return Err(self.repeated(&key_columns, i, snapshot));
                    }
                    self.counts.inserted += 1;
                    true
                }
            };
            write.push(changed);
        }
        Ok(filter_record_batch(batch, &BooleanArray::from(write))?)
    }

    /// `batch`'s columns of `fields`, as the comparison types them.
    fn columns_of(
        &self,
        batch: &RecordBatch,
        fields: &[Field],
        snapshot: &str,
    ) -> Result<Vec<ArrayRef>, RunError> {
        fields
            .iter()
            .map(|f| {
                let column = batch.column_by_name(f.name()).ok_or_else(|| {
                    RunError::input(format!("{snapshot} has no column `{}`", f.name()))
                })?;
                match column.data_type() == f.data_type() {
                    true => Ok(Arc::clone(column)),
                    false => Ok(cast_with_options(column, f.data_type(), &STRICT)?),
                }
            })
            .collect()
    }

    fn repeated(&self, keys: &[ArrayRef], row: usize, snapshot: &str) -> RunError {
        let values: Vec<String> = self
            .columns
            .keys
            .iter()
            .zip(keys)
            .map(|(f, c)| {
                let v = array_value_to_string(c, row).unwrap_or_else(|_| "?".into());
                format!("{} = {v}", f.name())
            })
            .collect();
        RunError::input(format!(
            "{snapshot} has two rows of key ({})",
            values.join(", ")
        ))
        .with_help("a snapshot holds each key once: deduplicate it in the snapshot query (e.g. QUALIFY row_number() OVER (PARTITION BY key ORDER BY …) = 1), or choose KEYS that identify a row")
    }

    /// The keys no snapshot row matched, as delete events of `schema` (the flow's
    /// events: other columns null) sequenced by `version`.
    pub fn deletes(
        &mut self,
        schema: &SchemaRef,
        version: &ScalarValue,
    ) -> Result<Vec<RecordBatch>, RunError> {
        let mut gone: Vec<u32> = self
            .entries
            .iter()
            .filter(|e| e.hi & SEEN == 0)
            .map(|e| e.at)
            .collect();
        gone.sort_unstable();
        self.counts.deleted += gone.len() as u64;
        let parser = self.keys.parser();
        let mut out = Vec::new();
        for part in gone.chunks(DELETE_ROWS) {
            let rows = part.iter().map(|&at| {
                let (chunk, i) = self.locate(at);
                parser.parse(self.chunks[chunk].value(i))
            });
            let keys = self.keys.convert_rows(rows)?;
            let n = part.len();
            let columns = schema
                .fields()
                .iter()
                .map(|field| {
                    if let Some(k) = self
                        .columns
                        .keys
                        .iter()
                        .position(|k| k.name() == field.name())
                    {
                        return cast_with_options(&keys[k], field.data_type(), &STRICT)
                            .map_err(RunError::from);
                    }
                    if field.name() == DELETED_COLUMN {
                        return Ok(Arc::new(BooleanArray::from(vec![true; n])) as ArrayRef);
                    }
                    if field.name() == VERSION_COLUMN {
                        return Ok(version.to_array_of_size(n)?);
                    }
                    Ok(new_null_array(field.data_type(), n))
                })
                .collect::<Result<Vec<_>, RunError>>()?;
            out.push(RecordBatch::try_new(Arc::clone(schema), columns)?);
        }
        Ok(out)
    }
}

/// Key number `n`: keys are numbered in 32 bits (4 bytes a key in the index).
fn index(n: usize) -> Result<u32, RunError> {
    u32::try_from(n).map_err(|_| {
        RunError::input(format!(
            "a snapshot flow compares at most {} keys, and this one has {n}",
            u32::MAX
        ))
    })
}

/// The XXH3-128 digest of each row.
fn digests(rows: &Rows) -> Result<FixedSizeBinaryArray, RunError> {
    let mut out = FixedSizeBinaryBuilder::with_capacity(rows.num_rows(), 16);
    for row in rows.iter() {
        out.append_value(XxHash3_128::oneshot(row.as_ref()).to_le_bytes())?;
    }
    Ok(out.finish())
}

/// A 16-byte digest as two words.
fn digest_words(bytes: &[u8]) -> [u64; 2] {
    let word = |part: Option<&[u8]>| {
        part.and_then(|p| <[u8; 8]>::try_from(p).ok())
            .map_or(0, u64::from_le_bytes)
    };
    [word(bytes.get(..8)), word(bytes.get(8..16))]
}

fn compact_schema(with_digests: bool) -> SchemaRef {
    let mut fields = vec![Field::new("key", DataType::Binary, false)];
    if with_digests {
        fields.push(Field::new("digest", DataType::FixedSizeBinary(16), false));
    }
    Arc::new(Schema::new(fields))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray};

    use super::*;

    fn columns(scd2: bool) -> Columns {
        Columns {
            keys: vec![Field::new("id", DataType::Int32, false)],
            values: vec![Field::new("city", DataType::Utf8, true)],
            end_at: scd2.then(|| Field::new("__END_AT", DataType::Int64, true)),
        }
    }

    fn rows(ids: &[i32], cities: &[Option<&str>]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("city", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int32Array::from(ids.to_vec())),
                Arc::new(StringArray::from(cities.to_vec())),
            ],
        )
        .expect("batch")
    }

    /// A comparison against a target holding `ids`/`cities` now.
    fn current(ids: &[i32], cities: &[Option<&str>]) -> Current {
        let mut current = Current::new(columns(false)).expect("current");
        let compact = current.compact(rows(ids, cities)).expect("compact");
        current.add_compact(vec![compact]).expect("add");
        current
    }

    fn ids(batch: &RecordBatch) -> Vec<i32> {
        batch
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
            .values()
            .to_vec()
    }

    fn events() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("city", DataType::Utf8, true),
            Field::new(VERSION_COLUMN, DataType::Int64, false),
            Field::new(DELETED_COLUMN, DataType::Boolean, false),
        ]))
    }

    #[test]
    fn a_snapshot_gives_its_inserts_updates_and_deletes_and_nothing_for_unchanged_rows() {
        let mut c = current(&[1, 2, 3, 4], &[Some("a"), Some("b"), None, Some("d")]);
        // In two batches: 2 changed, 3 unchanged (null = null), 5 new; 1 and 4 gone.
        let first = c
            .probe(&rows(&[2, 3], &[Some("B"), None]), "s")
            .expect("probe");
        let second = c.probe(&rows(&[5], &[Some("e")]), "s").expect("probe");
        assert_eq!((ids(&first), ids(&second)), (vec![2], vec![5]));
        let deletes = c
            .deletes(&events(), &ScalarValue::Int64(Some(7)))
            .expect("deletes");
        assert_eq!(ids(&deletes[0]), vec![1, 4]);
        assert_eq!(deletes[0].column(1).null_count(), 2);
        assert_eq!(
            deletes[0]
                .column(2)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .value(0),
            7
        );
        assert!(deletes[0].column(3).as_boolean().value(0));
        assert_eq!(
            c.counts,
            Counts {
                inserted: 1,
                updated: 1,
                deleted: 2,
                unchanged: 1
            }
        );
    }

    #[test]
    fn many_keys_over_many_buckets_give_exact_counts_and_deletes() {
        let target: Vec<i32> = (0..20_000).collect();
        let cities: Vec<Option<String>> = target.iter().map(|i| Some(format!("c{i}"))).collect();
        let city_refs: Vec<Option<&str>> = cities.iter().map(|c| c.as_deref()).collect();
        let mut c = current(&target, &city_refs);
        // Every 10th key gone, every 7th (not gone) changed, 100 new; in batches of 999.
        let kept: Vec<i32> = target.iter().copied().filter(|i| i % 10 != 0).collect();
        let snapshot: Vec<(i32, String)> = kept
            .iter()
            .map(|&i| {
                (
                    i,
                    if i % 7 == 0 {
                        format!("x{i}")
                    } else {
                        format!("c{i}")
                    },
                )
            })
            .chain((20_000..20_100).map(|i| (i, format!("c{i}"))))
            .collect();
        let mut written = Vec::new();
        for part in snapshot.chunks(999) {
            let part_ids: Vec<i32> = part.iter().map(|(i, _)| *i).collect();
            let part_cities: Vec<Option<&str>> =
                part.iter().map(|(_, c)| Some(c.as_str())).collect();
            written.extend(ids(&c
                .probe(&rows(&part_ids, &part_cities), "s")
                .expect("probe")));
        }
        let changed = kept.iter().filter(|i| *i % 7 == 0).count();
        assert_eq!(written.len(), changed + 100);
        let deletes = c
            .deletes(&events(), &ScalarValue::Int64(Some(1)))
            .expect("deletes");
        let deleted: Vec<i32> = deletes.iter().flat_map(ids).collect();
        assert_eq!(deleted, (0..20_000).step_by(10).collect::<Vec<i32>>());
        assert_eq!(
            c.counts,
            Counts {
                inserted: 100,
                updated: changed as u64,
                deleted: 2_000,
                unchanged: (kept.len() - changed) as u64
            }
        );
    }

    #[test]
    fn a_key_twice_in_the_target_is_a_fault_of_the_table() {
        let mut c = Current::new(columns(false)).expect("current");
        let compact = c
            .compact(rows(&[1, 2, 1], &[Some("a"), Some("b"), Some("c")]))
            .expect("compact");
        let err = c.add_compact(vec![compact]).expect_err("a key twice");
        assert!(err.to_string().contains("holds a key twice"), "{err}");
    }

    #[test]
    fn an_empty_snapshot_deletes_every_key() {
        let mut c = current(&[1, 2], &[Some("a"), Some("b")]);
        c.probe(&rows(&[], &[]), "s").expect("probe");
        let deletes = c
            .deletes(&events(), &ScalarValue::Int64(Some(2)))
            .expect("deletes");
        assert_eq!(ids(&deletes[0]), vec![1, 2]);
        assert_eq!(c.counts.deleted, 2);
    }

    #[test]
    fn a_key_twice_or_null_fails_naming_the_snapshot_and_the_key() {
        let repeated = |c: &mut Current, batches: &[RecordBatch]| {
            let mut last = Ok(());
            for b in batches {
                last = c.probe(b, "snapshot 3 of flow `f`").map(|_| ());
                if last.is_err() {
                    break;
                }
            }
            last.expect_err("repeated key").to_string()
        };
        // Twice among the target's keys, twice in one batch, and across batches.
        let err = repeated(
            &mut current(&[1], &[Some("a")]),
            &[rows(&[1, 1], &[None, None])],
        );
        assert!(
            err.contains("snapshot 3 of flow `f` has two rows of key (id = 1)"),
            "{err}"
        );
        let err = repeated(&mut current(&[], &[]), &[rows(&[9, 9], &[None, None])]);
        assert!(err.contains("key (id = 9)"), "{err}");
        let err = repeated(
            &mut current(&[], &[]),
            &[rows(&[8], &[None]), rows(&[8], &[None])],
        );
        assert!(err.contains("key (id = 8)"), "{err}");
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("city", DataType::Utf8, true),
        ]);
        let null_key = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int32Array::from(vec![None, Some(1)])),
                Arc::new(StringArray::from(vec![Some("x"), None])),
            ],
        )
        .expect("batch");
        let err = current(&[], &[])
            .probe(&null_key, "snapshot 3")
            .expect_err("null key");
        assert!(
            err.to_string()
                .contains("snapshot 3 has a row whose key `id` is null")
        );
    }

    #[test]
    fn scd2_compares_with_the_open_versions_only() {
        let mut c = Current::new(columns(true)).expect("current");
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("city", DataType::Utf8, true),
            Field::new("__END_AT", DataType::Int64, true),
        ]);
        // Key 1 has a closed version (a) and an open one (b); key 2 only a closed one.
        let target = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int32Array::from(vec![1, 1, 2])),
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
                Arc::new(Int64Array::from(vec![Some(5), None, Some(5)])),
            ],
        )
        .expect("batch");
        let compact = c.compact(target).expect("compact");
        c.add_compact(vec![compact]).expect("add");
        let written = c
            .probe(&rows(&[1, 2], &[Some("b"), Some("c")]), "s")
            .expect("probe");
        // 1 is unchanged against its open version; 2 was deleted, so it is new again.
        assert_eq!(ids(&written), vec![2]);
        assert_eq!((c.counts.unchanged, c.counts.inserted), (1, 1));
    }
}
