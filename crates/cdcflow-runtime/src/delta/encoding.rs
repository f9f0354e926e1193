//! How the Parquet files of a write are encoded, chosen from the rows being written.
//!
//! Parquet writers try a dictionary for every column and fall back to plain values once
//! the dictionary outgrows its page limit. For a column of mostly distinct values (keys,
//! amounts, timestamps, sequence values) that trial is pure cost: every value is hashed
//! and interned, then abandoned, in every file. A sample of the rows tells which columns
//! a dictionary would hold whole; only those get one.
//!
//! Integer columns that mostly ascend (keys, counters, commit times) are delta encoded,
//! which packs them to a few bits a value, far smaller than Snappy makes them and
//! cheaper to write and read. Snappy is spent only where it pays: dictionary indices
//! are packed to a few bits already, and fixed-width values such as amounts or times in
//! no order often do not compress; a run of the values tells. Text keeps Snappy.
//! Encodings and codecs are per column chunk in Parquet, so readers handle the mix;
//! delta encoding needs Spark 3.3 or later (every other engine reads it).

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::parquet::basic::{Compression, Encoding};
use datafusion::parquet::file::properties::{
    DEFAULT_DICTIONARY_PAGE_SIZE_LIMIT, EnabledStatistics, WriterProperties,
};
use datafusion::parquet::schema::types::ColumnPath;

/// Rows per row group: small enough that a file's row groups are shared out evenly over
/// the cores when read and go to disk while the file is still being written, large
/// enough for its min/max statistics to prune (DuckDB writes 122,880).
const ROW_GROUP_ROWS: usize = 128 * 1024;

/// Rows sampled to estimate each column's distinct values.
const SAMPLE_ROWS: usize = 4096;

/// Writer settings for `batches` of `schema`: row-group statistics only, and per column a
/// dictionary, delta encoding and Snappy as the module docs say (Snappy is the default
/// of Spark and of delta-rs's own writers; DataFusion's zstd level 3 encodes several
/// times slower).
pub(crate) fn writer_properties(schema: &SchemaRef, batches: &[RecordBatch]) -> WriterProperties {
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    writer_properties_for(schema, batches, total)
}

/// [`writer_properties`] for a file of `total` rows judged by the first of them,
/// `batches` (a file written as its rows are read).
pub(crate) fn writer_properties_for(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    total: usize,
) -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        // Min/max per row group is what Delta's file statistics and readers' pruning
        // use; page-level statistics and indexes cost encode time and are not read.
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_dictionary_enabled(true);
    for (index, field) in schema.fields().iter().enumerate() {
        let Some(value_bytes) = plain_width(field.data_type()) else {
            continue;
        };
        let Some(sample) = sample_column(batches, index) else {
            continue;
        };
        let width = value_bytes.unwrap_or_else(|| mean_bytes(&sample));
        let distinct = estimated_distinct(&sample, total);
        let dictionary = distinct * width as f64 <= DEFAULT_DICTIONARY_PAGE_SIZE_LIMIT as f64;
        let path = ColumnPath::new(vec![field.name().clone()]);
        if !dictionary {
            builder = builder.set_column_dictionary_enabled(path.clone(), false);
        }
        let run = value_bytes.and_then(|_| values_run(batches, index));
        let (encoding, compress) = match (&run, dictionary) {
            // Text, and columns the run cannot be read of.
            (None, _) => (None, true),
            // Indices packed to a few bits already.
            (Some(_), true) => (None, false),
            (Some(run), false) if is_delta_type(field.data_type()) && deltas_pay(run) => {
                (Some(Encoding::DELTA_BINARY_PACKED), false)
            }
            (Some(run), false) => (None, snappy_pays(&run.bytes)),
        };
        if let Some(encoding) = encoding {
            builder = builder.set_column_encoding(path.clone(), encoding);
        }
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

/// Values of a fixed-width column read to judge its encoding: contiguous, since delta
/// encoding and compression both work on neighbours, which an evenly spaced sample
/// would not show.
const RUN_ROWS: usize = 8192;

/// A run of plain-encoded values.
struct Run {
    bytes: Vec<u8>,
    /// Bytes per value.
    width: usize,
}

/// Up to [`RUN_ROWS`] contiguous values of fixed-width column `index`, from the middle
/// of the largest batch.
fn values_run(batches: &[RecordBatch], index: usize) -> Option<Run> {
    let batch = batches.iter().max_by_key(|b| b.num_rows())?;
    let len = batch.num_rows().min(RUN_ROWS);
    let data = batch
        .column(index)
        .slice((batch.num_rows() - len) / 2, len)
        .to_data();
    let width = data.data_type().primitive_width()?;
    let bytes = data
        .buffers()
        .first()?
        .as_slice()
        .get(data.offset() * width..(data.offset() + len) * width)?;
    Some(Run {
        bytes: bytes.to_vec(),
        width,
    })
}

/// Whether Snappy shrinks `bytes` by at least a tenth.
fn snappy_pays(bytes: &[u8]) -> bool {
    match snap::raw::Encoder::new().compress_vec(bytes) {
        Ok(packed) => packed.len() * 10 <= bytes.len() * 9,
        Err(_) => true,
    }
}

/// Integer types Parquet stores as INT32 or INT64, the ones delta encoding takes.
fn is_delta_type(data_type: &DataType) -> bool {
    data_type.is_integer()
        || matches!(
            data_type,
            DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(..)
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Duration(_)
        )
}

/// Values per miniblock of Parquet's DELTA_BINARY_PACKED: each is packed to the bits
/// its spread of deltas needs.
const MINIBLOCK: usize = 32;

/// Whether delta encoding packs the run into at most half the bits of plain values:
/// keys, counters and times that mostly ascend do, values in no order do not.
fn deltas_pay(run: &Run) -> bool {
    let values: Vec<i128> = run
        .bytes
        .chunks_exact(run.width)
        .map(|b| {
            let mut le = [0u8; 16];
            le[..b.len()].copy_from_slice(b);
            // Sign-extend from the value's own width.
            // At most 16 bytes (`le` holds them).
            let shift = 128 - 8 * u32::try_from(b.len()).unwrap_or(16);
            (i128::from_le_bytes(le) << shift) >> shift
        })
        .collect();
    let deltas: Vec<i128> = values.windows(2).map(|w| w[1] - w[0]).collect();
    if deltas.is_empty() {
        return false;
    }
    let packed_bits: u64 = deltas
        .chunks(MINIBLOCK)
        .map(|block| {
            let (lo, hi) = block.iter().fold((i128::MAX, i128::MIN), |(lo, hi), &d| {
                (lo.min(d), hi.max(d))
            });
            let spread = (hi - lo) as u128;
            u64::from(128 - spread.leading_zeros()) * block.len() as u64
        })
        .sum();
    // Parquet stores the narrow integer types as 32-bit values.
    let plain_bits = 8 * run.width.max(4) as u64 * deltas.len() as u64;
    packed_bits * 2 <= plain_bits
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
    use datafusion::arrow::array::{
        Float64Array, Int8Array, Int64Array, StringArray, TimestampMicrosecondArray,
    };
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};
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
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                false,
            ),
            Field::new("whole", DataType::Float64, false),
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
                    Arc::new(Int8Array::from_iter_values(range.clone().map(|_| 1))),
                    // Times in no order.
                    Arc::new(TimestampMicrosecondArray::from_iter_values(
                        range.clone().map(|i| scatter(i, 1 << 50)),
                    )),
                    // Whole numbers as floats: their low bytes are zeros.
                    Arc::new(Float64Array::from_iter_values(
                        range.map(|i| scatter(i, 1 << 20) as f64),
                    )),
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
        // Ascending integers are delta encoded; times in no order are not.
        let delta = |c: &str| {
            properties.encoding(&ColumnPath::new(vec![c.into()]))
                == Some(Encoding::DELTA_BINARY_PACKED)
        };
        assert!(delta("key"));
        assert!(!delta("at"));
        // Snappy where it shrinks the column: not on delta-packed keys, scattered
        // amounts and times, or dictionary indices; on zero-padded floats and text.
        let compressed = |c: &str| {
            properties.compression(&ColumnPath::new(vec![c.into()])) != Compression::UNCOMPRESSED
        };
        assert!(!compressed("key"));
        assert!(!compressed("amount"));
        assert!(!compressed("at"));
        assert!(!compressed("op"));
        assert!(compressed("whole"));
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
