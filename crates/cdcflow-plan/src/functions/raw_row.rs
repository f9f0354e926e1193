//! A JSON object kept as its fields' text ([`RowFields`]), borrowed from the message it
//! came in, and rows of them decoded into Arrow in one pass ([`decode_rows`]): written
//! out as one text of JSON lines for Arrow's JSON decoder, as it reads files, so no tree
//! of values is built per row. `debezium()` reads its events' rows this way.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StructArray, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{Fields, Schema};
use datafusion::arrow::json::ReaderBuilder;
use datafusion::common::{DataFusionError, Result, exec_err};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A row's fields as the event has them: each name with its value's JSON text, in the
/// event's order. Kept as text, the rows of a batch go to Arrow's JSON decoder in one
/// piece, as it reads files: no tree of values is built per row.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RowFields<'a>(pub Vec<(Cow<'a, str>, &'a str)>);

impl<'a> RowFields<'a> {
    /// The value of field `name`, as JSON text.
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// Writes the row as one JSON object into `out`.
    pub fn write(&self, out: &mut String) {
        out.push('{');
        for (i, (name, value)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_name(name, out);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
    }

    /// The fields `named` does not know, as a JSON object (keys in order), or `None`.
    pub fn unnamed(&self, named: impl Fn(&str) -> bool) -> Option<String> {
        if self.0.iter().all(|(n, _)| named(n)) {
            return None;
        }
        // Rare (schema drift): read into values, so the text is the one a JSON writer
        // gives, whatever spacing the event had.
        let unnamed: Map<String, Value> = self
            .0
            .iter()
            .filter(|(n, _)| !named(n))
            .map(|(n, v)| {
                let value = serde_json::from_str(v).unwrap_or(Value::Null);
                (n.to_string(), value)
            })
            .collect();
        Some(Value::Object(unnamed).to_string())
    }
}

/// A field name as a JSON string.
fn write_name(name: &str, out: &mut String) {
    match name.contains(|c: char| c == '"' || c == '\\' || c.is_control()) {
        false => {
            out.push('"');
            out.push_str(name);
            out.push('"');
        }
        true => out.push_str(&Value::String(name.to_string()).to_string()),
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RowFields<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Fields<'a> {
            type Value = RowFields<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a row as a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<RowFields<'a>, M::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Name(name), value)) = map.next_entry::<Name, &RawValue>()? {
                    fields.push((name, value.get()));
                }
                Ok(RowFields(fields))
            }
        }
        d.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// A field name, borrowed from the event's text unless it had escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Name<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Text<'a> {
            type Value = Name<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'a>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Name<'a>, E> {
                Ok(Name(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(Text(std::marker::PhantomData))
    }
}

/// The rows as a struct of `fields` (null where there is none): all written into one
/// text of JSON objects and decoded by Arrow's JSON decoder in one pass. A row whose
/// values do not fit fails the query, naming it.
pub fn decode_rows(
    function: &str,
    rows: &[Option<&RowFields>],
    fields: &Fields,
) -> Result<StructArray> {
    let schema = Arc::new(Schema::new(fields.clone()));
    let decode = |text: &str, count: usize| -> Result<StructArray> {
        let mut decoder = ReaderBuilder::new(Arc::clone(&schema))
            .with_coerce_primitive(true)
            .with_strict_mode(false)
            .with_batch_size(count.max(1))
            .build_decoder()?;
        let mut rest = text.as_bytes();
        while !rest.is_empty() {
            let read = decoder.decode(rest)?;
            if read == 0 {
                // A full batch leaves only the spacing after its last row.
                if rest.iter().all(u8::is_ascii_whitespace) {
                    break;
                }
                return exec_err!("the JSON decoder took none of the rows");
            }
            rest = &rest[read..];
        }
        let batch = match decoder.flush()? {
            Some(b) => b,
            None => RecordBatch::new_empty(Arc::clone(&schema)),
        };
        Ok(StructArray::from(batch))
    };
    let mut text = String::new();
    let mut present = 0;
    for row in rows.iter().flatten() {
        row.write(&mut text);
        text.push('\n');
        present += 1;
    }
    let decoded = decode(&text, present).map_err(|e| {
        // Name the first row that does not fit.
        rows.iter()
            .flatten()
            .find_map(|row| {
                let mut one = String::new();
                row.write(&mut one);
                decode(&one, 1).err().map(|_| one)
            })
            .map_or(e, |one| {
                DataFusionError::Execution(format!(
                    "{function}(): a row does not fit the schema: {one}"
                ))
            })
    })?;
    if present == rows.len() {
        return Ok(decoded);
    }
    // Rows without one take a null from the index `take` leaves out.
    let mut next = 0_u32;
    let at: UInt32Array = rows
        .iter()
        .map(|r| {
            r.map(|_| {
                next += 1;
                next - 1
            })
        })
        .collect();
    let out = take(&decoded, &at, None)?;
    Ok(StructArray::from(out.to_data()))
}
