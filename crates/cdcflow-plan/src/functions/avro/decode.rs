//! Binary values as Avro records of one reader schema, through arrow-avro's streaming
//! decoder, which reads Confluent's framing (a zero byte, then the writer schema's id as
//! 4 big-endian bytes, then the record) and resolves each writer schema to the reader
//! schema as Avro's specification says (fields the writer added are skipped, fields it
//! lacks take the reader's default, numbers widen). A plain record (Spark's `to_avro`)
//! is given the same framing with id 0, the reader schema standing for its writer.
//!
//! A record is one value: it must use all of its bytes and give exactly one row. Values
//! that do not are found one at a time only when a batch holds any, so a batch of good
//! records costs one pass.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_avro::errors::AvroError;
use arrow_avro::reader::{Decoder, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, StructArray, UInt32Array};
use datafusion::arrow::compute::{cast, concat, take};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};

use super::registry::Registry;
use super::schema::ReaderSchema;

/// Where a batch's writer schemas come from.
#[derive(Clone, Copy)]
pub(super) enum Writers<'a> {
    /// Plain records written with the reader schema itself.
    Plain,
    /// Confluent-framed records whose writer schemas a registry keeps.
    Registry(&'a Registry),
}

/// What becomes of a value that is not a record of its writer schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// The query fails, naming the value (Spark's default).
    FailFast,
    /// The value's result is null.
    Permissive,
}

const CONFLUENT_MAGIC: u8 = 0;
const PREFIX: usize = 5;

/// Each value of `values` as the reader schema's value, cast to `target`: null for a
/// null value, and for a malformed one under [`Mode::Permissive`].
pub(super) fn decode(
    values: &BinaryArray,
    reader: &ReaderSchema,
    writers: Writers<'_>,
    mode: Mode,
    target: &DataType,
) -> Result<ArrayRef> {
    let values_in = values.len();
    let mut frames: Vec<(usize, Cow<'_, [u8]>)> = Vec::with_capacity(values_in);
    let mut ids = BTreeSet::new();
    let mut malformed: Vec<(usize, String)> = vec![];
    for (row, value) in values.iter().enumerate() {
        let Some(bytes) = value else { continue };
        match writers {
            Writers::Plain => {
                let mut framed = Vec::with_capacity(PREFIX + bytes.len());
                framed.extend_from_slice(&[CONFLUENT_MAGIC, 0, 0, 0, 0]);
                framed.extend_from_slice(bytes);
                frames.push((row, Cow::Owned(framed)));
            }
            Writers::Registry(registry) => match id_of(bytes) {
                // An id the registry does not know is the value's fault (a plain
                // record may start with a zero byte too), not the registry's.
                Some(id) if !registry.has(id)? => malformed.push((
                    row,
                    format!(
                        "its schema id {id} is not in the registry at {} (HTTP 404)",
                        registry.address
                    ),
                )),
                Some(id) => {
                    ids.insert(id);
                    frames.push((row, Cow::Borrowed(bytes)));
                }
                None => malformed.push((
                    row,
                    "it does not start with the schema registry's framing (a zero byte and a 4-byte schema id)"
                        .into(),
                )),
            },
        }
    }
    if frames.is_empty() {
        if let (Mode::FailFast, Some((row, why))) = (mode, malformed.first()) {
            return Err(failed(*row, why, values.value(*row)));
        }
        return Ok(datafusion::arrow::array::new_null_array(target, values_in));
    }
    let store = writer_store(reader, writers, &ids)?;
    let build = || build_decoder(reader, &store, frames.len());
    let mut decoded = None;
    if malformed.is_empty() {
        decoded = all_at_once(&mut build()?, &frames).ok();
    }
    let good: Vec<&(usize, Cow<'_, [u8]>)> = match decoded {
        Some(_) => frames.iter().collect(),
        None => {
            // Some value is not a record: find which, one at a time.
            let mut decoder = build()?;
            let mut good = vec![];
            for frame in &frames {
                match one(&mut decoder, &frame.1) {
                    Ok(()) => good.push(frame),
                    Err(why) => {
                        malformed.push((frame.0, why));
                        decoder = build()?;
                    }
                }
            }
            good
        }
    };
    if let (Mode::FailFast, Some((row, why))) = (mode, malformed.iter().min_by_key(|m| m.0)) {
        return Err(failed(*row, why, values.value(*row)));
    }
    let rows: Vec<usize> = good.iter().map(|f| f.0).collect();
    let parts = match decoded {
        Some(parts) => parts,
        None if good.is_empty() => vec![],
        None => {
            let frames: Vec<(usize, Cow<'_, [u8]>)> = good
                .iter()
                .map(|(row, f)| (*row, Cow::Borrowed(f.as_ref())))
                .collect();
            all_at_once(&mut build_decoder(reader, &store, frames.len())?, &frames)
                .map_err(|e| DataFusionError::Execution(format!("from_avro(): {e}")))?
        }
    };
    let parts = parts
        .into_iter()
        .map(|p| cast(&reader.unwrap(p), target))
        .collect::<Result<Vec<_>, _>>()?;
    let values = match parts.as_slice() {
        [] => datafusion::arrow::array::new_empty_array(target),
        [one] => Arc::clone(one),
        _ => concat(
            &parts
                .iter()
                .map(|p| p.as_ref())
                .collect::<Vec<&dyn Array>>(),
        )?,
    };
    // Row r of the result is decoded record k where rows[k] == r, or null.
    let mut index: Vec<Option<u32>> = vec![None; values_in];
    for (k, row) in rows.iter().enumerate() {
        // A batch of values is an Arrow array, whose length fits its i32 offsets.
        index[*row] = u32::try_from(k).ok();
    }
    Ok(take(&values, &UInt32Array::from(index), None)?)
}

/// The error of a value that is not a record: its place, its first bytes and why.
fn failed(row: usize, why: &str, value: &[u8]) -> DataFusionError {
    const SHOWN: usize = 32;
    let more = if value.len() > SHOWN { "…" } else { "" };
    let start = value[..value.len().min(SHOWN)].escape_ascii();
    DataFusionError::Execution(format!(
        "from_avro(): value {} of the batch (`{start}{more}`, {} bytes) is not an Avro record \
         of its schema: {why} (with map('mode', 'PERMISSIVE') such a value gives null)",
        row + 1,
        value.len()
    ))
}

/// The writer schema's id of a Confluent-framed value.
fn id_of(bytes: &[u8]) -> Option<u32> {
    match bytes {
        [CONFLUENT_MAGIC, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Every writer schema the batch's values name, by id.
fn writer_store(
    reader: &ReaderSchema,
    writers: Writers<'_>,
    ids: &BTreeSet<u32>,
) -> Result<SchemaStore> {
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    match writers {
        Writers::Plain => {
            store.set(
                Fingerprint::Id(0),
                AvroSchema::new(reader.json().to_string()),
            )?;
        }
        Writers::Registry(registry) => {
            for id in ids {
                if let Some(writer) = registry.schema(*id)? {
                    store.set(
                        Fingerprint::Id(*id),
                        AvroSchema::new(reader.writer_json(&writer)),
                    )?;
                }
            }
        }
    }
    Ok(store)
}

/// A decoder of `rows` records at most per batch, each writer resolved to the reader;
/// a writer schema the reader schema cannot read is named by its id.
fn build_decoder(reader: &ReaderSchema, store: &SchemaStore, rows: usize) -> Result<Decoder> {
    let builder = |store: SchemaStore| {
        ReaderBuilder::new()
            .with_reader_schema(AvroSchema::new(reader.json().to_string()))
            .with_writer_schema_store(store)
            .with_batch_size(rows.max(1))
            .build_decoder()
    };
    builder(store.clone()).map_err(|e| {
        let culprit = store.fingerprints().into_iter().find(|fp| {
            let mut alone = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
            store
                .lookup(fp)
                .is_some_and(|s| alone.set(*fp, s.clone()).is_ok() && builder(alone).is_err())
        });
        match culprit {
            Some(Fingerprint::Id(id)) => DataFusionError::Execution(format!(
                "from_avro(): the writer schema with id {id} cannot be read as the reader schema: {e}"
            )),
            _ => DataFusionError::Execution(format!(
                "from_avro(): the reader schema cannot read the values: {e}"
            )),
        }
    })
}

/// The records of `frames`, in order, in one or more parts (a new part where the
/// writer schema changes); an error when a value does not use exactly its own bytes
/// for exactly one record.
fn all_at_once(
    decoder: &mut Decoder,
    frames: &[(usize, Cow<'_, [u8]>)],
) -> std::result::Result<Vec<StructArray>, String> {
    let mut parts = vec![];
    for (_, frame) in frames {
        let mut at = 0;
        loop {
            let n = decoder.decode(&frame[at..]).map_err(|e| e.to_string())?;
            at += n;
            if at == frame.len() {
                break;
            }
            if decoder.batch_is_full() {
                if let Some(batch) = decoder.flush().map_err(|e| e.to_string())? {
                    parts.push(StructArray::from(batch));
                }
                continue;
            }
            return Err(format!(
                "{} of its {} bytes are not a whole record",
                frame.len() - at,
                frame.len()
            ));
        }
        // Bytes after the record that look like the next value's framing are taken in
        // as such, the decoder then waiting for a body: a lone byte that is no framing
        // shows it. A decoder between values refuses it as no framing, without
        // changing; one waiting for a body reads it as a body (and fails otherwise, or
        // waits for more). A full batch takes no byte at all, so it is emptied first.
        if decoder.batch_is_full()
            && let Some(batch) = decoder.flush().map_err(|e| e.to_string())?
        {
            parts.push(StructArray::from(batch));
        }
        let between_values = matches!(
            decoder.decode(&[0x80]),
            Err(AvroError::ParseError(m)) if m.starts_with("Missing magic bytes")
        );
        if !between_values {
            return Err("bytes after its record look like the start of another value".into());
        }
    }
    while let Some(batch) = decoder.flush().map_err(|e| e.to_string())? {
        parts.push(StructArray::from(batch));
    }
    let records: usize = parts.iter().map(|p| p.len()).sum();
    if records != frames.len() {
        return Err(format!(
            "{} value(s) gave {records} records: a value holds more than its record",
            frames.len()
        ));
    }
    Ok(parts)
}

/// Whether `frame` alone is one record (decoded and dropped).
fn one(decoder: &mut Decoder, frame: &[u8]) -> std::result::Result<(), String> {
    all_at_once(decoder, &[(0, Cow::Borrowed(frame))]).map(|_| ())
}
