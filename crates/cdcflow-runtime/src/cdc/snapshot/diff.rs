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
use rayon::prelude::*;
use twox_hash::XxHash3_128;

use cdcflow_plan::snapshot::{DELETED_COLUMN, VERSION_COLUMN};

use super::STRICT;
use super::counts::Counts;
use crate::delta::DataFile;
use crate::{RunError, par};

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
    /// The target's columns the comparison reads: keys, values and (SCD type 2)
    /// `__END_AT`.
    pub fn read_schema(&self) -> SchemaRef {
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

/// The parts the index is built in: a power of two, enough for each to fit a core's
/// cache at 10^7 keys (about 1.2 MB each), few enough for their write streams to stay
/// in cache.
const PARTS: usize = 256;

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
    hasher: Arc<Hasher>,
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
            &current.hasher.columns.read_schema(),
            |batch: RecordBatch| current.hasher.compact(batch).map(Some),
        )?;
        current.add_compact(compact)?;
        Ok(current)
    }

    fn new(columns: Columns) -> Result<Self, RunError> {
        let keys = Columns::converter(&columns.keys)?
            .ok_or_else(|| RunError::internal("a snapshot flow without keys"))?;
        let values = Columns::converter(&columns.values)?;
        Ok(Self {
            hasher: Arc::new(Hasher {
                columns,
                keys,
                values,
            }),
            chunks: Vec::new(),
            starts: Vec::new(),
            directory: vec![0; 3],
            entries: Vec::new(),
            shift: 63,
            fresh: HashSet::new(),
            counts: Counts::default(),
        })
    }

    /// Indexes the target's keys and digests (batches of [`Hasher::compact`]) in two
    /// radix passes, so that no key is written to a random place in memory: each core
    /// takes a share of the batches and writes their entries, in order, into the
    /// [`PARTS`] parts of the index by the top bits of their hash (a few hundred write
    /// streams, which the caches hold); then each part, small enough for a core's own
    /// cache, is placed into its buckets, sorted within them and checked for a key
    /// twice, the parts on every core.
    fn add_compact(&mut self, compact: Vec<RecordBatch>) -> Result<(), RunError> {
        let rows: usize = compact.iter().map(|b| b.num_rows()).sum();
        index(rows)?;
        // About four keys a bucket; at least as many buckets as parts.
        let bits = (rows / 4)
            .max(PARTS)
            .next_power_of_two()
            .trailing_zeros()
            .min(32);
        self.shift = 64 - bits;
        let buckets = 1usize << bits;
        let per_part = buckets / PARTS;
        let shift = self.shift;
        let bucket_of = move |lo: u64| usize::try_from(lo >> shift).unwrap_or(0);
        let keys_of = |b: &RecordBatch| b.column(0).as_binary::<i32>().clone();
        let mut firsts = Vec::with_capacity(compact.len());
        let mut at = 0u32;
        for batch in &compact {
            firsts.push(at);
            at += index(batch.num_rows())?;
        }
        // Each core's share of the batches, and how many of its keys fall in each part.
        let shares: Vec<std::ops::Range<usize>> = {
            let n = compact.len();
            let cores = par::cores().clamp(1, n.max(1));
            (0..cores)
                .map(|c| c * n / cores..(c + 1) * n / cores)
                .collect()
        };
        // Keys are hashed again when placed rather than their hashes kept between the
        // passes: hashing a key costs less than the 12 bytes a row would add to the
        // build's peak memory.
        let counts: Vec<Vec<u32>> = shares
            .par_iter()
            .map(|share| {
                let mut counts = vec![0u32; PARTS];
                for batch in &compact[share.clone()] {
                    for key in keys_of(batch).iter() {
                        let (lo, _) = key_hash(key.unwrap_or_default());
                        counts[bucket_of(lo) / per_part] += 1;
                    }
                }
                counts
            })
            .collect();
        // Where each part starts; in each part, a run of places for each share, in
        // order, given to that share as its own slices.
        let mut part_starts = vec![0usize; PARTS + 1];
        let mut entries = vec![Entry::default(); rows];
        let mut runs: Vec<Vec<&mut [Entry]>> = (0..shares.len())
            .map(|_| Vec::with_capacity(PARTS))
            .collect();
        let mut rest = entries.as_mut_slice();
        let mut offset = 0usize;
        for part in 0..PARTS {
            part_starts[part] = offset;
            for (share, share_counts) in counts.iter().enumerate() {
                let len = share_counts[part] as usize;
                let (head, tail) = rest.split_at_mut(len);
                runs[share].push(head);
                rest = tail;
                offset += len;
            }
        }
        part_starts[PARTS] = offset;
        shares
            .par_iter()
            .zip(runs)
            .try_for_each(|(share, mut runs)| -> Result<(), RunError> {
                let mut filled = vec![0usize; PARTS];
                for b in share.clone() {
                    let (batch, first) = (&compact[b], firsts[b]);
                    let digests = batch.columns().get(1).map(|d| d.as_fixed_size_binary());
                    for (i, key) in keys_of(batch).iter().enumerate() {
                        let (lo, hi) = key_hash(key.unwrap_or_default());
                        let part = bucket_of(lo) / per_part;
                        runs[part][filled[part]] = Entry {
                            lo,
                            hi,
                            at: first + index(i)?,
                            digest: digests.map_or([0, 0], |d| digest_words(d.value(i))),
                        };
                        filled[part] += 1;
                    }
                }
                Ok(())
            })?;
        // Each part into its buckets.
        let mut parts = Vec::with_capacity(PARTS);
        let mut rest = entries.as_mut_slice();
        for part in 0..PARTS {
            let (head, tail) = rest.split_at_mut(part_starts[part + 1] - part_starts[part]);
            parts.push(head);
            rest = tail;
        }
        let local: Vec<Vec<u32>> = parts
            .into_par_iter()
            .enumerate()
            .map(|(part, slice)| -> Result<Vec<u32>, RunError> {
                let first_bucket = part * per_part;
                let mut starts = vec![0u32; per_part + 1];
                for e in slice.iter() {
                    starts[bucket_of(e.lo) - first_bucket + 1] += 1;
                }
                for b in 0..per_part {
                    starts[b + 1] += starts[b];
                }
                let taken = slice.to_vec();
                let mut next = starts.clone();
                for e in taken {
                    let slot = &mut next[bucket_of(e.lo) - first_bucket];
                    slice[*slot as usize] = e;
                    *slot += 1;
                }
                // A key twice among the target's current rows is a fault of the table.
                for b in 0..per_part {
                    let bucket = &mut slice[starts[b] as usize..starts[b + 1] as usize];
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
                Ok(starts)
            })
            .collect::<Result<_, _>>()?;
        let mut directory = Vec::with_capacity(buckets + 1);
        for (part, starts) in local.iter().enumerate() {
            let base = index(part_starts[part])?;
            directory.extend(starts[..per_part].iter().map(|s| base + s));
        }
        directory.push(index(rows)?);
        self.starts = firsts;
        self.chunks = compact.into_iter().map(|b| keys_of(&b)).collect();
        self.directory = directory;
        self.entries = entries;
        Ok(())
    }

    fn bucket(&self, lo: u64) -> usize {
        usize::try_from(lo >> self.shift).unwrap_or(0)
    }

    fn locate(&self, at: u32) -> (usize, usize) {
        let chunk = self.starts.partition_point(|&s| s <= at) - 1;
        (chunk, (at - self.starts[chunk]) as usize)
    }

    /// What hashes the snapshot's batches: shared with the threads that hash them while
    /// the index is looked up.
    pub fn hasher(&self) -> Arc<Hasher> {
        Arc::clone(&self.hasher)
    }

    /// Compares one batch of the snapshot (of the snapshot's schema) with the target:
    /// the rows to write, new or changed. Fails on a null or repeated key, naming
    /// `snapshot` (which snapshot this is).
    #[cfg(test)]
    pub fn probe(&mut self, batch: &RecordBatch, snapshot: &str) -> Result<RecordBatch, RunError> {
        let hashed = self.hasher.hash(batch.clone(), snapshot)?;
        self.probe_hashed(hashed, snapshot)
    }

    /// [`Current::probe`] of a batch [`Hasher::hash`] hashed.
    pub fn probe_hashed(
        &mut self,
        hashed: Hashed,
        snapshot: &str,
    ) -> Result<RecordBatch, RunError> {
        let Hashed {
            batch,
            key_columns,
            keys,
            digests,
        } = hashed;
        // Each row's bucket, then its entries, each read in a loop of independent
        // loads that the processor overlaps: the lookups below then find them in
        // cache rather than waiting on memory one row at a time.
        let places: Vec<(usize, usize)> = keys
            .iter()
            .map(|&(lo, _)| {
                let b = self.bucket(lo);
                (self.directory[b] as usize, self.directory[b + 1] as usize)
            })
            .collect();
        let touched = places
            .iter()
            .filter(|(start, end)| start < end)
            .fold(0u64, |t, &(start, end)| {
                t ^ self.entries[start].lo ^ self.entries[end - 1].lo
            });
        std::hint::black_box(touched);
        let mut write = Vec::with_capacity(batch.num_rows());
        for (i, ((&(lo, hi), digest), &(start, end))) in
            keys.iter().zip(&digests).zip(&places).enumerate()
        {
            let found = self.entries[start..end]
                .iter_mut()
                .find(|e| e.lo == lo && e.hi & !SEEN == hi)
                .map(|e| {
                    let again = e.hi & SEEN != 0;
                    e.hi |= SEEN;
                    (again, e.digest != *digest)
                });
            let changed = match found {
                Some((true, _)) => {
                    return Err(self.hasher.repeated(&key_columns, i, snapshot));
                }
                Some((false, changed)) => {
                    match changed {
                        true => self.counts.updated += 1,
                        false => self.counts.unchanged += 1,
                    }
                    changed
                }
                None => {
                    if !self.fresh.insert((lo, hi)) {
                        return Err(self.hasher.repeated(&key_columns, i, snapshot));
                    }
                    self.counts.inserted += 1;
                    true
                }
            };
            write.push(changed);
        }
        Ok(filter_record_batch(&batch, &BooleanArray::from(write))?)
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
        let parser = self.hasher.keys.parser();
        let mut out = Vec::new();
        for part in gone.chunks(DELETE_ROWS) {
            let rows = part.iter().map(|&at| {
                let (chunk, i) = self.locate(at);
                parser.parse(self.chunks[chunk].value(i))
            });
            let keys = self.hasher.keys.convert_rows(rows)?;
            let n = part.len();
            let columns = schema
                .fields()
                .iter()
                .map(|field| {
                    if let Some(k) = self
                        .hasher
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

/// The comparison's columns and how their rows are hashed, shared by the threads that
/// hash the target's and the snapshot's batches.
pub(super) struct Hasher {
    columns: Columns,
    keys: RowConverter,
    values: Option<RowConverter>,
}

/// A snapshot batch with each row's key hash and values digest.
pub(super) struct Hashed {
    batch: RecordBatch,
    key_columns: Vec<ArrayRef>,
    keys: Vec<(u64, u32)>,
    digests: Vec<[u64; 2]>,
}

impl Hasher {
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

    /// The key hashes and value digests of a snapshot batch. Fails on a null key.
    pub fn hash(&self, batch: RecordBatch, snapshot: &str) -> Result<Hashed, RunError> {
        let key_columns = self.columns_of(&batch, &self.columns.keys, snapshot)?;
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
        let keys = key_rows.iter().map(|r| key_hash(r.data())).collect();
        let digests = match &self.values {
            Some(v) => {
                let values = self.columns_of(&batch, &self.columns.values, snapshot)?;
                v.convert_columns(&values)?
                    .iter()
                    .map(|r| digest_words(&XxHash3_128::oneshot(r.data()).to_le_bytes()))
                    .collect()
            }
            None => vec![[0, 0]; batch.num_rows()],
        };
        Ok(Hashed {
            batch,
            key_columns,
            keys,
            digests,
        })
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
        let compact = current.hasher.compact(rows(ids, cities)).expect("compact");
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
            .hasher
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
        let compact = c.hasher.compact(target).expect("compact");
        c.add_compact(vec![compact]).expect("add");
        let written = c
            .probe(&rows(&[1, 2], &[Some("b"), Some("c")]), "s")
            .expect("probe");
        // 1 is unchanged against its open version; 2 was deleted, so it is new again.
        assert_eq!(ids(&written), vec![2]);
        assert_eq!((c.counts.unchanged, c.counts.inserted), (1, 1));
    }
}
