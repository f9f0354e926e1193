//! How the Parquet files of a write are encoded, chosen from the rows being written.
//!
//! Parquet writers try a dictionary for every column and fall back to plain values once
//! the dictionary outgrows its page limit. For a column of mostly distinct values (keys,
//! amounts, timestamps, sequence values) that trial is pure cost: every value is hashed
//! and interned, then abandoned, in every file. A sample of the rows tells which columns
//! a dictionary would hold whole; only those get one.
//!
//! Likewise Snappy is spent only where it pays: dictionary indices of fixed-width
//! columns are already packed to a few bits, and fixed-width values such as timestamps
//! or amounts often do not compress; a run of the values is compressed to tell. Text
//! keeps Snappy. Codecs are per column chunk in Parquet, so every reader handles the mix.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::{
    DEFAULT_DICTIONARY_PAGE_SIZE_LIMIT, EnabledStatistics, WriterProperties,
};
use datafusion::parquet::schema::types::ColumnPath;

/// Rows sampled to estimate each column's distinct values.
const SAMPLE_ROWS: usize = 4096;

/// Writer settings for `batches` of `schema`: Snappy (the default of Spark and of
/// delta-rs's own writers; DataFusion's zstd level 3 encodes several times slower),
/// row-group statistics only, and a dictionary for the columns it would hold whole.
pub(crate) fn writer_properties(schema: &SchemaRef, batches: &[RecordBatch]) -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        // Min/max per row group is what Delta's file statistics and readers' pruning
        // use; page-level statistics and indexes cost encode time and are not read.
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_dictionary_enabled(true);
    for (index, field) in schema.fields().iter().enumerate() {
        let Some(value_bytes) = plain_width(field.data_type()) else {
            continue;
        };
        let Some(sample) = sample_column(batches, index) else {
            continue;
        };
        let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let width = value_bytes.unwrap_or_else(|| mean_bytes(&sample));
        let distinct = estimated_distinct(&sample, total);
        let dictionary = distinct * width as f64 <= DEFAULT_DICTIONARY_PAGE_SIZE_LIMIT as f64;
        let path = ColumnPath::new(vec![field.name().clone()]);
        if !dictionary {
            builder = builder.set_column_dictionary_enabled(path.clone(), false);
        }
        let compress = match (value_bytes, dictionary) {
            (None, _) => true,
            (Some(_), true) => false,
            (Some(_), false) => snappy_pays(batches, index),
        };
        if !compress {
            builder = builder.set_column_compression(path, Compression::UNCOMPRESSED);
        }
    }
    builder.build()
}

/// Bytes per plain-encoded value: `Some(Some(n))` for fixed-width types, `Some(None)`
/// for variable-width ones (measured on the sample), `None` for columns left to the
/// writer's default (nested and boolean ones).
fn plain_width(data_type: &DataType) -> Option<Option<usize>> {
    match data_type {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => Some(None),
        DataType::Boolean => None,
        t if t.is_primitive() => t.primitive_width().map(Some),
        DataType::FixedSizeBinary(n) => usize::try_from(*n).ok().map(Some),
        _ => None,
    }
}

/// Up to [`SAMPLE_ROWS`] rows of column `index`, evenly spaced over all batches.
fn sample_column(batches: &[RecordBatch], index: usize) -> Option<ArrayRef> {
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if total == 0 {
        return None;
    }
    let step = total.div_ceil(SAMPLE_ROWS).max(1);
    let mut parts = Vec::new();
    let mut offset = 0usize; // global row number of the current batch's first row
    for batch in batches {
        let rows = batch.num_rows();
        let first = offset.next_multiple_of(step) - offset;
        let picks: Vec<u32> = (first..rows)
            .step_by(step)
            .filter_map(|r| u32::try_from(r).ok())
            .collect();
        offset += rows;
        if picks.is_empty() {
            continue;
        }
        parts.push(take(batch.column(index), &UInt32Array::from(picks), None).ok()?);
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    datafusion::arrow::compute::concat(&refs).ok()
}

/// Values compressed per column to judge Snappy: contiguous, since compression finds
/// repeats between neighbours, which an evenly spaced sample would not show.
const COMPRESSION_SAMPLE_ROWS: usize = 8192;

/// Whether Snappy shrinks the plain values of fixed-width column `index` by at least a
/// tenth, judged on a run of its values from the middle of the largest batch.
fn snappy_pays(batches: &[RecordBatch], index: usize) -> bool {
    let Some(batch) = batches.iter().max_by_key(|b| b.num_rows()) else {
        return true;
    };
    let len = batch.num_rows().min(COMPRESSION_SAMPLE_ROWS);
    let run = batch
        .column(index)
        .slice((batch.num_rows() - len) / 2, len)
        .to_data();
    let Some(values) = run.buffers().first() else {
        return true;
    };
    let Some(width) = run.data_type().primitive_width() else {
        return true;
    };
    let Some(raw) = values
        .as_slice()
        .get(run.offset() * width..(run.offset() + len) * width)
    else {
        return true;
    };
    match snap::raw::Encoder::new().compress_vec(raw) {
        Ok(packed) => packed.len() * 10 <= raw.len() * 9,
        Err(_) => true,
    }
}

/// Mean plain-encoded bytes of the sampled values (Parquet adds a 4-byte length).
fn mean_bytes(sample: &ArrayRef) -> usize {
    let data = sample.to_data();
    let bytes = match sample.data_type() {
        DataType::Utf8View | DataType::BinaryView => sample.get_buffer_memory_size(),
        _ => data.buffers().last().map_or(0, |b| b.len()),
    };
    bytes / sample.len().max(1) + 4
}

/// The distinct values of a column of `total` rows, estimated from `sample` by the
/// bias-corrected Chao1 estimator: values seen once in the sample stand for the values
/// it missed. Exact when the sample is the whole column.
fn estimated_distinct(sample: &ArrayRef, total: usize) -> f64 {
    let mut hashes = vec![0u64; sample.len()];
    if create_hashes(
        &[std::sync::Arc::clone(sample)],
        &RandomState::with_seed(0x5a3b1e),
        &mut hashes,
    )
    .is_err()
    {
        return total as f64;
    }
    let mut counts: HashMap<u64, u32> = HashMap::with_capacity(hashes.len());
    for h in hashes {
        *counts.entry(h).or_default() += 1;
    }
    let seen = counts.len() as f64;
    if sample.len() >= total {
        return seen;
    }
    let once = counts.values().filter(|&&c| c == 1).count() as f64;
    let twice = counts.values().filter(|&&c| c == 2).count() as f64;
    (seen + once * (once - 1.0).max(0.0) / (2.0 * (twice + 1.0))).min(total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, Int8Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    /// `i` mapped pseudo-randomly onto `0..n` (`n` a power of two).
    fn scatter(i: i64, n: i64) -> i64 {
        // splitmix64's finalizer
        let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as i64
    }

    fn dictionary(properties: &WriterProperties, column: &str) -> bool {
        properties.dictionary_enabled(&ColumnPath::new(vec![column.into()]))
    }

    #[test]
    fn only_columns_a_dictionary_would_hold_get_one() {
        let rows = 300_000i64;
        let schema = Arc::new(Schema::new(vec![
            Field::new("key", DataType::Int64, false),
            Field::new("amount", DataType::Float64, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("tier", DataType::Utf8, false),
            Field::new("op", DataType::Int8, false),
        ]));
        // Two batches, so the sample spans a batch boundary.
        let batch = |range: std::ops::Range<i64>| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(range.clone())),
                    Arc::new(Float64Array::from_iter_values(
                        range.clone().map(|i| scatter(i, 1 << 40) as f64 / 100.0),
                    )),
                    // 4,096 names scattered over the rows, as a customer table's.
                    Arc::new(StringArray::from_iter_values(
                        range.clone().map(|i| format!("name {}", scatter(i, 4096))),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        range.clone().map(|i| ["gold", "silver"][(i % 2) as usize]),
                    )),
                    Arc::new(Int8Array::from_iter_values(range.map(|_| 1))),
                ],
            )
            .expect("batch")
        };
        let batches = [batch(0..rows / 3), batch(rows / 3..rows)];
        let properties = writer_properties(&schema, &batches);
        assert!(!dictionary(&properties, "key"));
        assert!(!dictionary(&properties, "amount"));
        assert!(dictionary(&properties, "name"));
        assert!(dictionary(&properties, "tier"));
        assert!(dictionary(&properties, "op"));
        // Snappy where it shrinks the column: counting keys share their high bytes,
        // scattered amounts share nothing, dictionary indices are packed already, and
        // text keeps it.
        let compressed = |c: &str| {
            properties.compression(&ColumnPath::new(vec![c.into()])) != Compression::UNCOMPRESSED
        };
        assert!(compressed("key"));
        assert!(!compressed("amount"));
        assert!(!compressed("op"));
        assert!(compressed("name"));
        assert!(compressed("tier"));
        // A small write keeps every dictionary: its values fit whatever they are.
        let properties = writer_properties(&schema, &[batch(0..1000)]);
        assert!(dictionary(&properties, "key"));
        // No rows: the writer's defaults.
        assert!(dictionary(&writer_properties(&schema, &[]), "key"));
    }

    #[test]
    fn the_estimate_is_exact_on_a_whole_column_and_close_on_a_sample() {
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values((0..1000).map(|i| i % 10)));
        assert_eq!(estimated_distinct(&values, 1000), 10.0);
        let sample: ArrayRef = Arc::new(Int64Array::from_iter_values(
            (0..4096i64).map(|i| scatter(i, 4096)),
        ));
        let estimate = estimated_distinct(&sample, 1_000_000);
        assert!((3000.0..6000.0).contains(&estimate), "{estimate}");
    }
}
