//! Reading Parquet files on every core: the row groups of the files are shared out in
//! contiguous runs of about equal rows, one thread each, and the batches come back in
//! file and row-group order. With fewer row groups than cores (a landing file is often
//! one row group), the columns of a row group are shared out too, and put back together
//! in file order.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{BooleanArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{FieldRef, Schema, SchemaRef};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
};
use datafusion::parquet::file::metadata::RowGroupMetaData;
use roaring::RoaringTreemap;

use super::remote::Source;
use super::{DataFile, conform, partitioning};
use crate::{RunError, par};

/// Rows per batch read.
const BATCH_ROWS: usize = 64 * 1024;

/// Reads a Parquet file into batches of `schema`, matching columns by name.
pub fn read_parquet(path: &Path, schema: &SchemaRef) -> Result<Vec<RecordBatch>, RunError> {
    read_files(&[DataFile::plain(path.to_path_buf())], schema)
}

/// One row group of one of the files.
struct Group {
    file: usize,
    index: usize,
    rows: usize,
    /// Position in its file of the group's first row.
    first_row: u64,
}

/// Reads the live rows of `files` (those no deletion vector removes) into batches of
/// `schema`, in order, on every core.
pub(crate) fn read_files(
    files: &[DataFile],
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>, RunError> {
    let (metadata, groups) = load(files)?;
    let runs = runs(&groups);
    let shares_per_run = (par::cores() / runs.len().max(1)).max(1);
    let mut units = Vec::new();
    for (i, run) in runs.into_iter().enumerate() {
        match run {
            [group] if shares_per_run > 1 => {
                let meta = &metadata[group.file];
                for columns in column_shares(meta, group.index, shares_per_run) {
                    units.push((i, run, Some(columns)));
                }
            }
            _ => units.push((i, run, None)),
        }
    }
    let parts = par::map(units, |(i, run, columns)| {
        let batches = read_run(files, &metadata, run, columns.as_deref())?;
        Ok::<_, RunError>((i, run, batches))
    })?;
    let mut out = Vec::new();
    for shares in parts.chunk_by(|a, b| a.0 == b.0) {
        let batches: Vec<&[RecordBatch]> = shares.iter().map(|(_, _, b)| b.as_slice()).collect();
        let mut at = Positions::new(shares[0].1);
        for batch in zip_columns(&batches)? {
            let (file, first) = at.next(batch.num_rows());
            let live = match &files[file].deleted {
                Some(deleted) => live(&batch, first, deleted)?.0,
                None => batch,
            };
            let live = partitioning::with_values(live, files[file].add.as_ref(), schema)?;
            out.push(conform(&live, schema)?);
        }
    }
    Ok(out)
}

/// The live rows of `files` that `keep` keeps, batch by batch as they are read, so
/// that what it drops is never held at once; in file order, on every core.
pub(crate) fn read_files_where(
    files: &[DataFile],
    schema: &SchemaRef,
    keep: impl Fn(RecordBatch) -> Result<Option<RecordBatch>, RunError> + Sync,
) -> Result<Vec<RecordBatch>, RunError> {
    let parts = par::map(plan(files)?, |run| {
        let mut kept = Vec::new();
        for batch in run.batches(schema) {
            if let Some(batch) = keep(batch?)?.filter(|b| b.num_rows() > 0) {
                kept.push(batch);
            }
        }
        Ok::<_, RunError>(kept)
    })?;
    Ok(parts.into_iter().flatten().collect())
}

/// The rows of `files`, from their footers, and about the bytes they take in memory once
/// read as `schema`: the memory of the first batch of the first file holding rows,
/// averaged over its rows (files' own sizes say little of it: encodings and compression
/// shrink columns by very different factors).
pub(crate) fn memory_size(files: &[DataFile], schema: &SchemaRef) -> Result<(u64, u64), RunError> {
    let (metadata, groups) = load(files)?;
    let rows: u64 = groups.iter().map(|g| g.rows as u64).sum();
    let Some(first) = groups.iter().find(|g| g.rows > 0) else {
        return Ok((0, 0));
    };
    let (path, meta) = (&files[first.file].path, &metadata[first.file]);
    let roots = named_roots(meta, schema);
    let parquet_schema = meta.metadata().file_metadata().schema_descr();
    let source = open(&files[first.file])?;
    let mut reader = ParquetRecordBatchReaderBuilder::new_with_metadata(source, meta.clone())
        .with_row_groups(vec![first.index])
        .with_projection(ProjectionMask::roots(parquet_schema, roots))
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| file_error(path, e))?;
    let Some(batch) = reader.next().transpose().map_err(|e| file_error(path, e))? else {
        return Ok((rows, 0));
    };
    let per_row = batch.get_array_memory_size() as f64 / batch.num_rows().max(1) as f64;
    // An estimate: a float's cast saturates, and the size is not near u64's range.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "an estimate; the cast saturates"
    )]
    let bytes = (per_row * rows as f64) as u64;
    Ok((rows, bytes))
}

/// Walks a run's batches (which never span files) to the file and position of each.
struct Positions<'a> {
    groups: &'a [Group],
    next_group: usize,
    /// Rows of the current file's groups not yet given out.
    left: usize,
    file: usize,
    position: u64,
}

impl<'a> Positions<'a> {
    fn new(groups: &'a [Group]) -> Self {
        Self {
            groups,
            next_group: 0,
            left: 0,
            file: usize::MAX,
            position: 0,
        }
    }

    /// The file and position of the first row of the next batch, of `rows` rows.
    fn next(&mut self, rows: usize) -> (usize, u64) {
        // Empty groups hold no batch: skip them with the exhausted file.
        while self.left == 0 {
            let Some(g) = self.groups.get(self.next_group) else {
                break;
            };
            let file = g.file;
            self.file = file;
            self.position = g.first_row;
            while let Some(g) = self.groups.get(self.next_group).filter(|g| g.file == file) {
                self.left += g.rows;
                self.next_group += 1;
            }
        }
        let at = (self.file, self.position);
        self.position += rows as u64;
        self.left = self.left.saturating_sub(rows);
        at
    }
}

/// The rows of `batch` (whose first row is at `first` in its file) that `deleted` does
/// not remove, and their positions.
fn live(
    batch: &RecordBatch,
    first: u64,
    deleted: &RoaringTreemap,
) -> Result<(RecordBatch, UInt64Array), RunError> {
    let end = first + batch.num_rows() as u64;
    let mut keep = vec![true; batch.num_rows()];
    let mut at = deleted.iter();
    at.advance_to(first);
    for p in at.take_while(|&p| p < end) {
        if let Some(k) = usize::try_from(p - first)
            .ok()
            .and_then(|i| keep.get_mut(i))
        {
            *k = false;
        }
    }
    let positions =
        UInt64Array::from_iter_values((first..end).zip(&keep).filter(|(_, k)| **k).map(|(p, _)| p));
    if positions.len() == batch.num_rows() {
        return Ok((batch.clone(), positions));
    }
    Ok((
        filter_record_batch(batch, &BooleanArray::from(keep))?,
        positions,
    ))
}

/// The root columns of row group `index`, in `n` sets of about equal bytes (each in
/// file order); fewer when the columns are fewer.
fn column_shares(meta: &ArrowReaderMetadata, index: usize, n: usize) -> Vec<Vec<usize>> {
    let schema = meta.metadata().file_metadata().schema_descr();
    let group = &meta.metadata().row_groups()[index];
    let mut bytes = vec![0i64; schema.root_schema().get_fields().len()];
    for (leaf, column) in group.columns().iter().enumerate() {
        bytes[schema.get_column_root_idx(leaf)] += column.uncompressed_size();
    }
    let mut roots: Vec<usize> = (0..bytes.len()).collect();
    roots.sort_by_key(|&r| std::cmp::Reverse(bytes[r]));
    let mut shares: Vec<(i64, Vec<usize>)> = vec![(0, Vec::new()); n.min(roots.len()).max(1)];
    for root in roots {
        if let Some(lightest) = shares.iter_mut().min_by_key(|(load, _)| *load) {
            lightest.0 += bytes[root];
            lightest.1.push(root);
        }
    }
    shares
        .into_iter()
        .map(|(_, mut roots)| {
            roots.sort_unstable();
            roots
        })
        .collect()
}

/// The batches of the column shares of one run, side by side: batch `i` of every share
/// holds the same rows. Columns come back in file order.
fn zip_columns(shares: &[&[RecordBatch]]) -> Result<Vec<RecordBatch>, RunError> {
    let [first, rest @ ..] = shares else {
        return Ok(vec![]);
    };
    if rest.is_empty() {
        return Ok(first.to_vec());
    }
    let mut out = Vec::with_capacity(first.len());
    for (i, batch) in first.iter().enumerate() {
        let mut fields: Vec<FieldRef> = batch.schema().fields().iter().cloned().collect();
        let mut columns = batch.columns().to_vec();
        for share in rest {
            let Some(part) = share.get(i) else {
                return Err(RunError::internal(
                    "column shares of a row group differ in batches",
                ));
            };
            fields.extend(part.schema().fields().iter().cloned());
            columns.extend(part.columns().iter().cloned());
        }
        out.push(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?);
    }
    Ok(out)
}

/// The metadata of each file, and all their row groups in order.
fn load(files: &[DataFile]) -> Result<(Vec<ArrowReaderMetadata>, Vec<Group>), RunError> {
    let mut metadata = Vec::with_capacity(files.len());
    let mut groups = Vec::new();
    for (file, data_file) in files.iter().enumerate() {
        let path = &data_file.path;
        let meta = ArrowReaderMetadata::load(&open(data_file)?, ArrowReaderOptions::default())
            .map_err(|e| file_error(path, e))?;
        let mut first_row = 0u64;
        for (index, g) in meta.metadata().row_groups().iter().enumerate() {
            let rows = usize::try_from(g.num_rows()).unwrap_or(0);
            groups.push(Group {
                file,
                index,
                rows,
                first_row,
            });
            first_row += rows as u64;
        }
        metadata.push(meta);
    }
    Ok((metadata, groups))
}

/// A core's share of the row groups of some files, for a reader of its own.
pub(crate) struct Run {
    files: Vec<RunFile>,
    pub(crate) rows: usize,
}

/// The row groups of one file that a run reads.
struct RunFile {
    /// Its index among the files planned.
    index: usize,
    file: DataFile,
    meta: ArrowReaderMetadata,
    groups: Vec<usize>,
    /// Position of the first row of its first group.
    first_row: u64,
}

/// Rows of a table read with where they are: the file (its index among the files
/// planned) and each row's position in it, as a deletion vector names rows.
pub(crate) struct Located {
    pub file: usize,
    pub positions: UInt64Array,
    pub batch: RecordBatch,
}

/// The row groups of `files` in contiguous runs of about equal rows, one per core.
pub(crate) fn plan(files: &[DataFile]) -> Result<Vec<Run>, RunError> {
    Ok(plan_where(files, |_| true)?.0)
}

/// [`plan`] of the row groups `keep` accepts by their statistics, and the live rows of
/// those it passed over.
pub(crate) fn plan_where(
    files: &[DataFile],
    keep: impl Fn(&RowGroupMetaData) -> bool,
) -> Result<(Vec<Run>, u64), RunError> {
    let (metadata, mut groups) = load(files)?;
    let mut skipped = 0;
    groups.retain(|g| {
        let kept = keep(metadata[g.file].metadata().row_group(g.index));
        if !kept {
            let end = g.first_row + g.rows as u64;
            let deleted = files[g.file]
                .deleted
                .as_ref()
                .map_or(0, |d| d.range_cardinality(g.first_row..end));
            skipped += g.rows as u64 - deleted;
        }
        kept
    });
    let runs = runs(&groups)
        .into_iter()
        .map(|run| Run {
            // A reader of a file's groups gives their rows one after another: each
            // reader takes adjacent groups only, so positions follow from the first.
            files: run
                .chunk_by(|a, b| a.file == b.file && b.index == a.index + 1)
                .map(|groups| RunFile {
                    index: groups[0].file,
                    file: files[groups[0].file].clone(),
                    meta: metadata[groups[0].file].clone(),
                    groups: groups.iter().map(|g| g.index).collect(),
                    first_row: groups[0].first_row,
                })
                .collect(),
            rows: run.iter().map(|g| g.rows).sum(),
        })
        .collect();
    Ok((runs, skipped))
}

impl Run {
    /// The run's live rows in batches of `schema`, file after file.
    pub(crate) fn batches(
        &self,
        schema: &SchemaRef,
    ) -> impl Iterator<Item = Result<RecordBatch, RunError>> {
        self.located(schema).map(|l| l.map(|l| l.batch))
    }

    /// The run's live rows in batches of `schema` (only the columns it names are
    /// decoded), file after file, each with its file and positions.
    pub(crate) fn located(
        &self,
        schema: &SchemaRef,
    ) -> impl Iterator<Item = Result<Located, RunError>> {
        self.files.iter().flat_map(move |f| {
            let path = &f.file.path;
            let reader = open(&f.file).and_then(|file| {
                let roots = named_roots(&f.meta, schema);
                let parquet_schema = f.meta.metadata().file_metadata().schema_descr();
                ParquetRecordBatchReaderBuilder::new_with_metadata(file, f.meta.clone())
                    .with_row_groups(f.groups.clone())
                    .with_projection(ProjectionMask::roots(parquet_schema, roots))
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| file_error(path, e))
            });
            let (reader, failed) = match reader {
                Ok(r) => (Some(r), None),
                Err(e) => (None, Some(Err(e))),
            };
            let mut position = f.first_row;
            failed
                .into_iter()
                .chain(reader.into_iter().flatten().map(move |batch| {
                    let batch = batch.map_err(|e| file_error(path, e))?;
                    let first = position;
                    position += batch.num_rows() as u64;
                    let (batch, positions) = match &f.file.deleted {
                        Some(deleted) => live(&batch, first, deleted)?,
                        None => {
                            let end = first + batch.num_rows() as u64;
                            (batch, UInt64Array::from_iter_values(first..end))
                        }
                    };
                    let batch = partitioning::with_values(batch, f.file.add.as_ref(), schema)?;
                    Ok(Located {
                        file: f.index,
                        positions,
                        batch: conform(&batch, schema)?,
                    })
                }))
        })
    }
}

/// The root columns of a file that `schema` names (all of them are decoded otherwise).
fn named_roots(meta: &ArrowReaderMetadata, schema: &SchemaRef) -> Vec<usize> {
    meta.schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| schema.field_with_name(f.name()).is_ok())
        .map(|(i, _)| i)
        .collect()
}

/// The rows at `positions` (ascending) of `file`, in batches of `schema`.
pub(crate) fn fetch(
    file: &DataFile,
    positions: &[u64],
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>, RunError> {
    let path = &file.path;
    let meta = ArrowReaderMetadata::load(&open(file)?, ArrowReaderOptions::default())
        .map_err(|e| file_error(path, e))?;
    let total = usize::try_from(meta.metadata().file_metadata().num_rows()).unwrap_or(0);
    let at = |p: u64| usize::try_from(p).unwrap_or(usize::MAX);
    let ranges = positions.iter().map(|&p| at(p)..at(p).saturating_add(1));
    let roots = named_roots(&meta, schema);
    let parquet_schema = meta.metadata().file_metadata().schema_descr();
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(open(file)?, meta.clone())
        .with_projection(ProjectionMask::roots(parquet_schema, roots))
        .with_row_selection(RowSelection::from_consecutive_ranges(ranges, total))
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| file_error(path, e))?;
    reader
        .map(|b| {
            let b = b.map_err(|e| file_error(path, e))?;
            conform(
                &partitioning::with_values(b, file.add.as_ref(), schema)?,
                schema,
            )
        })
        .collect()
}

/// `groups` in contiguous runs of about equal rows, one per core.
fn runs(groups: &[Group]) -> Vec<&[Group]> {
    let cores = par::cores();
    let total: usize = groups.iter().map(|g| g.rows).sum();
    let per_run = total.div_ceil(cores.min(groups.len()).max(1)).max(1);
    let mut out = Vec::new();
    let (mut start, mut filled) = (0, 0);
    for (i, g) in groups.iter().enumerate() {
        // A run ends before a group that would take it further past its share than
        // short of it.
        if i > start && filled + g.rows / 2 > per_run {
            out.push(&groups[start..i]);
            (start, filled) = (i, 0);
        }
        filled += g.rows;
    }
    if start < groups.len() {
        out.push(&groups[start..]);
    }
    out
}

/// The rows of `run` (of the `columns` roots only, when given), as the file has them,
/// deleted rows included.
fn read_run(
    files: &[DataFile],
    metadata: &[ArrowReaderMetadata],
    run: &[Group],
    columns: Option<&[usize]>,
) -> Result<Vec<RecordBatch>, RunError> {
    let mut out = Vec::new();
    for file_groups in run.chunk_by(|a, b| a.file == b.file) {
        let file = file_groups[0].file;
        let path = &files[file].path;
        let source = open(&files[file])?;
        let indexes: Vec<usize> = file_groups.iter().map(|g| g.index).collect();
        let meta = &metadata[file];
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(source, meta.clone())
            .with_row_groups(indexes)
            .with_batch_size(BATCH_ROWS);
        if let Some(roots) = columns {
            let schema = meta.metadata().file_metadata().schema_descr();
            builder = builder.with_projection(ProjectionMask::roots(schema, roots.iter().copied()));
        }
        let reader = builder.build().map_err(|e| file_error(path, e))?;
        for batch in reader {
            out.push(batch.map_err(|e| file_error(path, e))?);
        }
    }
    Ok(out)
}

/// The Parquet file of `file`: from the disk, or a remote table's fetched bytes.
pub(super) fn open(file: &DataFile) -> Result<Source, RunError> {
    match &file.remote {
        Some(remote) => Ok(Source::Bytes(remote.fetched.bytes(&remote.relative)?)),
        None => File::open(&file.path)
            .map(Source::File)
            .map_err(|e| RunError::io(&file.path, e)),
    }
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> RunError {
    RunError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, StructArray};
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::parquet::arrow::ArrowWriter;

    #[test]
    fn row_groups_whose_statistics_hold_no_wanted_key_are_passed_over_and_counted() {
        use crate::delta::pruning::KeyStats;
        use datafusion::parquet::file::properties::WriterProperties;
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..300));
        let written = RecordBatch::try_from_iter(vec![("id", ids)]).expect("batch");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("three_groups.parquet");
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(100))
            .build();
        let mut writer = ArrowWriter::try_new(
            File::create(&path).expect("create"),
            written.schema(),
            Some(properties),
        )
        .expect("writer");
        writer.write(&written).expect("write");
        writer.close().expect("close");
        // Rows 150 and 250 deleted: the middle group's and the last group's.
        let file = DataFile {
            deleted: Some(Arc::new([150u64, 250].into_iter().collect())),
            ..DataFile::plain(path)
        };
        let (runs, skipped) = plan_where(std::slice::from_ref(&file), |g| {
            g.may_hold("id", &[120, 260])
        })
        .expect("plan");
        assert_eq!(skipped, 100, "the first group, none of it deleted");
        let schema = written.schema();
        let mut seen = Vec::new();
        for run in &runs {
            for located in run.located(&schema) {
                let located = located.expect("read");
                let ids = located
                    .batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("ids");
                for (id, position) in ids.values().iter().zip(located.positions.values()) {
                    assert_eq!(
                        *id as u64, *position,
                        "a row's position is its place in the file"
                    );
                    seen.push(*id);
                }
            }
        }
        let want: Vec<i64> = (100..300).filter(|i| *i != 150 && *i != 250).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn a_row_group_read_by_column_shares_gives_the_written_rows() {
        let rows = 3 * BATCH_ROWS as i64 / 2; // two batches per share
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows));
        let names: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("name {i}")),
        ));
        let point: ArrayRef = Arc::new(StructArray::from(vec![
            (
                Arc::new(Field::new("x", DataType::Int64, false)),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i * 2))) as ArrayRef,
            ),
            (
                Arc::new(Field::new("y", DataType::Int64, false)),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| -i))) as ArrayRef,
            ),
        ]));
        let written =
            RecordBatch::try_from_iter(vec![("id", ids), ("point", point), ("name", names)])
                .expect("batch");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("one_group.parquet");
        let file = File::create(&path).expect("create");
        let mut writer = ArrowWriter::try_new(file, written.schema(), None).expect("writer");
        writer.write(&written).expect("write");
        writer.close().expect("close");

        // Asked in another column order, as a table schema may be.
        let schema = Arc::new(Schema::new(vec![
            written.schema().field(2).clone(),
            written.schema().field(0).clone(),
            written.schema().field(1).clone(),
        ]));
        let read = read_parquet(&path, &schema).expect("read");
        let all = datafusion::arrow::compute::concat_batches(&schema, &read).expect("concat");
        let want = written.project(&[2, 0, 1]).expect("project");
        assert_eq!(all.num_rows(), want.num_rows());
        assert_eq!(all.columns(), want.columns());
    }
}
