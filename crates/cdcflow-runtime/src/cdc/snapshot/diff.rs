//! The comparison of a snapshot with the target's current rows, without holding
//! either: the target is read once into its keys and a 128-bit digest of each row's
//! other values, and the snapshot streams past them. A snapshot row whose key is new
//! is an insert, one whose digest differs an update; the keys no row matched are the
//! deletes. Only those rows are kept, as the change events of the batch.
//!
//! Keys are compared by their bytes (arrow's row format, which orders and equates as
//! the values do), so two keys are never confused; values by an XXH3-128 digest of
//! their row bytes, so a changed row is taken for unchanged only if two different rows
//! share a 128-bit digest (about 2^-128 per changed row).

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
use datafusion::common::{HashMap, ScalarValue};
use twox_hash::{XxHash3_64, XxHash3_128};

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

/// The target's current keys with their digests, and which of them the snapshot had.
pub(super) struct Current {
    columns: Columns,
    keys: RowConverter,
    values: Option<RowConverter>,
    /// Key bytes and digests, in chunks; a key's index runs over all chunks in order.
    chunks: Vec<(BinaryArray, Option<FixedSizeBinaryArray>)>,
    /// The index of each chunk's first key.
    starts: Vec<u32>,
    seen: Vec<bool>,
    /// Keys by the 64-bit hash of their bytes; a second key of the same hash goes to
    /// `collided`.
    index: HashMap<u64, u32>,
    collided: std::collections::HashMap<Vec<u8>, u32>,
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
            seen: Vec::new(),
            index: HashMap::new(),
            collided: std::collections::HashMap::new(),
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

    fn add_compact(&mut self, compact: Vec<RecordBatch>) -> Result<(), RunError> {
        let rows: usize = compact.iter().map(|b| b.num_rows()).sum();
        self.index.reserve(rows);
        self.seen.reserve(rows);
        for batch in compact {
            let keys = batch.column(0).as_binary::<i32>().clone();
            let digests = batch
                .columns()
                .get(1)
                .map(|d| d.as_fixed_size_binary().clone());
            self.push_chunk(keys, digests, false)?;
        }
        Ok(())
    }

    /// Adds a chunk of keys, each seen already or not, to the index.
    fn push_chunk(
        &mut self,
        keys: BinaryArray,
        digests: Option<FixedSizeBinaryArray>,
        seen: bool,
    ) -> Result<(), RunError> {
        let start = index(self.seen.len())?;
        index(self.seen.len() + keys.len())?;
        for (at, key) in (start..).zip(keys.iter()) {
            let key = key.unwrap_or_default();
            let hash = XxHash3_64::oneshot(key);
            match self.index.get(&hash).copied() {
                None => {
                    self.index.insert(hash, at);
                }
                Some(other) => {
                    if self.key_bytes_in(&keys, start, other) == key
                        || self.collided.contains_key(key)
                    {
                        return Err(RunError::internal(
                            "the target holds a key twice among its current rows",
                        ));
                    }
                    self.collided.insert(key.to_vec(), at);
                }
            }
        }
        self.seen.resize(self.seen.len() + keys.len(), seen);
        self.starts.push(start);
        self.chunks.push((keys, digests));
        Ok(())
    }

    /// The bytes of key `at`, which is in the chunks or in `pending` (starting at
    /// `pending_start`, not yet pushed).
    fn key_bytes_in<'a>(
        &'a self,
        pending: &'a BinaryArray,
        pending_start: u32,
        at: u32,
    ) -> &'a [u8] {
        if at >= pending_start {
            return pending.value((at - pending_start) as usize);
        }
        let (chunk, i) = self.locate(at);
        self.chunks[chunk].0.value(i)
    }

    fn locate(&self, at: u32) -> (usize, usize) {
        let chunk = self.starts.partition_point(|&s| s <= at) - 1;
        (chunk, (at - self.starts[chunk]) as usize)
    }

    /// The index of `key`, when the target (or an earlier part of the snapshot) has it.
    fn find(&self, key: &[u8]) -> Option<u32> {
        let at = *self.index.get(&XxHash3_64::oneshot(key))?;
        let (chunk, i) = self.locate(at);
        if self.chunks[chunk].0.value(i) == key {
            return Some(at);
        }
        self.collided.get(key).copied()
    }

    fn digest(&self, at: u32) -> Option<&[u8]> {
        let (chunk, i) = self.locate(at);
        self.chunks[chunk].1.as_ref().map(|d| d.value(i))
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
                Some(digests(&v.convert_columns(&values)?)?)
            }
            None => None,
        };
        let mut write = Vec::with_capacity(batch.num_rows());
        let mut fresh: Vec<usize> = Vec::new();
        let mut fresh_keys: HashSet<&[u8]> = HashSet::new();
        for i in 0..batch.num_rows() {
            let key = key_rows.row(i).data();
            match self.find(key) {
                Some(at) => {
                    if std::mem::replace(&mut self.seen[at as usize], true) {
                        return Err(self.repeated(&key_columns, i, snapshot));
                    }
                    let changed = match (&digests, self.digest(at)) {
                        (Some(new), Some(old)) => new.value(i) != old,
                        _ => false,
                    };
                    match changed {
                        true => self.counts.updated += 1,
                        false => self.counts.unchanged += 1,
                    }
                    write.push(changed);
                }
                None => {
                    if !fresh_keys.insert(key) {
                        return Err(self.repeated(&key_columns, i, snapshot));
                    }
                    fresh.push(i);
                    self.counts.inserted += 1;
                    write.push(true);
                }
            }
        }
        drop(fresh_keys);
        if !fresh.is_empty() {
            let keys = BinaryArray::from_iter_values(fresh.iter().map(|&i| key_rows.row(i)));
            self.push_chunk(keys, None, true)?;
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
        let gone: Vec<u32> = (0..index(self.seen.len())?)
            .filter(|&i| !self.seen[i as usize])
            .collect();
        self.counts.deleted += gone.len() as u64;
        let parser = self.keys.parser();
        let mut out = Vec::new();
        for part in gone.chunks(DELETE_ROWS) {
            let rows = part.iter().map(|&at| {
                let (chunk, i) = self.locate(at);
                parser.parse(self.chunks[chunk].0.value(i))
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
