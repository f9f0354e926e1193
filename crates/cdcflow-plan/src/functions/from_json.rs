//! `from_json(json, 'a INT, b STRUCT<c: STRING>')`: JSON text as a struct of the
//! columns a DDL schema names (Spark's function; the schema must be a literal, since it
//! fixes the result's type at planning). Fields the text lacks are null, fields the
//! schema lacks are ignored, and text that is not a JSON object, or whose values do not
//! fit the types, gives a null struct (Spark's PERMISSIVE mode).
//!
//! [`decode_objects`] is the decoding (`debezium`, [`super::debezium`], hands its rows to
//! Arrow's JSON decoder as text instead).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, RecordBatch, StructArray, UInt32Array, new_null_array,
};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema};
use datafusion::arrow::json::ReaderBuilder;
use datafusion::common::cast::as_string_array;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use serde::Serialize;

use super::columnar;

pub(super) fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(FromJson {
        // Deterministic, but declared volatile so that DataFusion never copies the call:
        // an immutable one is copied into each filter pushed below its projection
        // (`WHERE e IS NOT NULL`), decoding every row's JSON once more per copy.
        signature: Signature::user_defined(Volatility::Volatile),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FromJson {
    signature: Signature,
}

/// The struct fields a literal DDL schema argument names, every one nullable.
pub(super) fn schema_argument(name: &str, arg: Option<&ScalarValue>) -> Result<Fields> {
    let ddl = match arg {
        Some(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
        ) => s,
        _ => {
            return plan_err!(
                "{name}() takes its schema as a literal: {name}(value, 'id INT, name STRING')"
            );
        }
    };
    let schema = match crate::types::ddl_schema(ddl) {
        Ok(s) => s,
        Err(e) => return plan_err!("{name}(): invalid schema `{ddl}`: {e}"),
    };
    Ok(schema
        .fields()
        .iter()
        .map(|f| Arc::new(f.as_ref().clone().with_nullable(true)))
        .collect())
}

/// A string type for every argument (Binary is taken as its UTF-8 text).
pub(super) fn text_args(
    name: &str,
    args: &[DataType],
    min: usize,
    max: usize,
) -> Result<Vec<DataType>> {
    if args.len() < min || args.len() > max {
        return plan_err!(
            "{name}() takes {min} to {max} arguments, not {}",
            args.len()
        );
    }
    Ok(vec![DataType::Utf8; args.len()])
}

impl ScalarUDFImpl for FromJson {
    fn name(&self) -> &str {
        "from_json"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        text_args(self.name(), args, 2, 2)
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        plan_err!("from_json() needs its schema argument to know its type")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let fields = schema_argument(self.name(), args.scalar_arguments.get(1).copied().flatten())?;
        Ok(Arc::new(Field::new(
            self.name(),
            DataType::Struct(fields),
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let DataType::Struct(fields) = args.return_field.data_type().clone() else {
            return exec_err!("from_json() returns a struct");
        };
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let json = as_string_array(&arrays[0])?;
        let texts: Vec<Option<&str>> = json.iter().collect();
        let out = decode_objects(&texts, &fields)?;
        columnar(Arc::new(out), &args.args)
    }
}

/// Each text as a struct of `fields`: null for a null text, one that is not a JSON
/// object, or one whose values do not fit.
pub fn decode_objects(texts: &[Option<&str>], fields: &Fields) -> Result<StructArray> {
    let objects: Vec<Option<serde_json::Value>> = texts
        .iter()
        .map(|t| {
            let v: serde_json::Value = serde_json::from_str((*t)?).ok()?;
            v.is_object().then_some(v)
        })
        .collect();
    decode_values(&objects, fields)
}

/// Like [`decode_objects`], for objects already parsed: each is handed to Arrow's JSON
/// decoder as it is (serialized into its tape, not written out as text and read back).
pub fn decode_values<T: Serialize>(objects: &[Option<T>], fields: &Fields) -> Result<StructArray> {
    let schema = Arc::new(Schema::new(fields.clone()));
    let decode = |rows: &[&T]| -> Result<StructArray> {
        let mut decoder = ReaderBuilder::new(Arc::clone(&schema))
            .with_coerce_primitive(true)
            .with_strict_mode(false)
            .build_decoder()?;
        decoder.serialize(rows)?;
        let batch = match decoder.flush()? {
            Some(b) => b,
            None => RecordBatch::new_empty(Arc::clone(&schema)),
        };
        Ok(StructArray::from(batch))
    };
    let present: Vec<(usize, &T)> = objects
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.as_ref().map(|o| (i, o)))
        .collect();
    let rows: Vec<&T> = present.iter().map(|(_, o)| *o).collect();
    // One decode for all; only when it fails, one per object to null the bad ones.
    let (decoded, kept): (StructArray, Vec<usize>) = match decode(&rows) {
        Ok(d) => (d, present.iter().map(|(i, _)| *i).collect()),
        Err(_) => {
            let mut parts: Vec<ArrayRef> = Vec::new();
            let mut kept = Vec::new();
            for (i, o) in &present {
                if let Ok(one) = decode(&[*o]) {
                    parts.push(Arc::new(one));
                    kept.push(*i);
                }
            }
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            let all = match refs.is_empty() {
                true => new_null_array(&DataType::Struct(fields.clone()), 0),
                false => datafusion::arrow::compute::concat(&refs)?,
            };
            (StructArray::from(all.to_data()), kept)
        }
    };
    // Every object decoded: the struct as it is.
    if kept.len() == objects.len() {
        return Ok(decoded);
    }
    // Rows without an object take a null from the index `take` leaves out.
    let mut at = vec![None; objects.len()];
    for (n, i) in kept.iter().enumerate() {
        let Ok(n) = u32::try_from(n) else {
            return datafusion::common::exec_err!("from_json: more than 2^32 values in one batch");
        };
        at[*i] = Some(n);
    }
    let indices = UInt32Array::from(at);
    let out = take(&decoded, &indices, None)?;
    Ok(StructArray::from(out.to_data()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int32Type;

    #[test]
    fn objects_become_structs_and_bad_text_null() {
        let fields = schema_argument(
            "from_json",
            Some(&ScalarValue::Utf8(Some(
                "id INT, name STRING, tags ARRAY<STRING>".into(),
            ))),
        )
        .unwrap();
        let texts = [
            Some(r#"{"id": 1, "name": "a", "extra": true}"#),
            None,
            Some("not json"),
            Some(r#"{"id": "x"}"#),
            Some(r#"{"id": 2, "tags": ["p", "q"]}"#),
            Some("[1]"),
        ];
        let s = decode_objects(&texts, &fields).unwrap();
        assert_eq!(s.len(), 6);
        let valid: Vec<bool> = (0..6).map(|i| s.is_valid(i)).collect();
        assert_eq!(valid, [true, false, false, false, true, false]);
        let ids = s.column(0).as_primitive::<Int32Type>();
        assert_eq!((ids.value(0), ids.value(4)), (1, 2));
        assert!(s.column(1).is_null(4));
        assert!(
            schema_argument(
                "from_json",
                Some(&ScalarValue::Utf8(Some("id WHAT".into())))
            )
            .is_err()
        );
        assert!(schema_argument("from_json", None).is_err());
    }
}
