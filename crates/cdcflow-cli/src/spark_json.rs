//! `cdcflow query --format json` writes floating-point values as Spark's JSON does: NaN
//! and the infinities as the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (Arrow's
//! writer makes them null, which a reader cannot tell from a null), at any depth of
//! structs, arrays and maps; every other value as Arrow's writer does.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Float16Type, Float32Type, Float64Type};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::writer::{NullableEncoder, make_encoder};
use datafusion::arrow::json::{Encoder, EncoderFactory, EncoderOptions};

/// Arrow's own encoders, for the finite values (a float's encoding takes no option).
static ARROW: LazyLock<EncoderOptions> = LazyLock::new(EncoderOptions::default);

/// Encodes floats as Spark does; leaves every other type to Arrow.
#[derive(Debug, Default)]
pub struct SparkFloats;

impl SparkFloats {
    pub fn new() -> Arc<Self> {
        Arc::new(Self)
    }
}

impl EncoderFactory for SparkFloats {
    fn make_default_encoder<'a>(
        &self,
        field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let value: Box<dyn Fn(usize) -> f64 + 'a> = match array.data_type() {
            DataType::Float16 => {
                let a = array.as_primitive::<Float16Type>();
                Box::new(move |i| f64::from(a.value(i)))
            }
            DataType::Float32 => {
                let a = array.as_primitive::<Float32Type>();
                Box::new(move |i| f64::from(a.value(i)))
            }
            DataType::Float64 => {
                let a = array.as_primitive::<Float64Type>();
                Box::new(move |i| a.value(i))
            }
            _ => return Ok(None),
        };
        let finite = make_encoder(field, array, &ARROW)?;
        let nulls = array.nulls().cloned();
        Ok(Some(NullableEncoder::new(
            Box::new(FloatEncoder { value, finite }),
            nulls,
        )))
    }
}

struct FloatEncoder<'a> {
    value: Box<dyn Fn(usize) -> f64 + 'a>,
    finite: NullableEncoder<'a>,
}

impl Encoder for FloatEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = (self.value)(idx);
        match v {
            _ if v.is_nan() => out.extend_from_slice(b"\"NaN\""),
            f64::INFINITY => out.extend_from_slice(b"\"Infinity\""),
            f64::NEG_INFINITY => out.extend_from_slice(b"\"-Infinity\""),
            _ => self.finite.encode(idx, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Float32Array, Float64Array, RecordBatch};
    use datafusion::arrow::json::LineDelimitedWriter;
    use datafusion::arrow::json::WriterBuilder;
    use datafusion::arrow::json::writer::LineDelimited;

    use super::*;

    #[test]
    fn nan_and_infinities_are_strings_and_other_values_as_arrow_writes_them() {
        let batch = RecordBatch::try_from_iter([
            (
                "d",
                Arc::new(Float64Array::from(vec![
                    Some(f64::NAN),
                    Some(f64::INFINITY),
                    Some(f64::NEG_INFINITY),
                    Some(1.5),
                    None,
                ])) as _,
            ),
            (
                "f",
                Arc::new(Float32Array::from(vec![
                    Some(f32::NAN),
                    Some(1e20),
                    Some(f32::NEG_INFINITY),
                    Some(0.1),
                    Some(2.0),
                ])) as _,
            ),
        ])
        .unwrap();
        let mut ours = Vec::new();
        let mut w = WriterBuilder::new()
            .with_explicit_nulls(true)
            .with_encoder_factory(SparkFloats::new())
            .build::<_, LineDelimited>(&mut ours);
        w.write(&batch).unwrap();
        w.finish().unwrap();
        let mut arrow = Vec::new();
        let mut w = LineDelimitedWriter::new(&mut arrow);
        w.write(&batch.slice(3, 2)).unwrap();
        w.finish().unwrap();
        let ours = String::from_utf8(ours).unwrap();
        let lines: Vec<&str> = ours.lines().collect();
        assert_eq!(lines[0], r#"{"d":"NaN","f":"NaN"}"#);
        assert_eq!(lines[2], r#"{"d":"-Infinity","f":"-Infinity"}"#);
        assert!(
            lines[1].starts_with(r#"{"d":"Infinity","f":1"#),
            "{}",
            lines[1]
        );
        // Finite values exactly as Arrow's writer puts them.
        let arrow = String::from_utf8(arrow).unwrap();
        assert_eq!(lines[3], arrow.lines().next().unwrap());
        assert_eq!(lines[4], r#"{"d":null,"f":2.0}"#);
    }
}
