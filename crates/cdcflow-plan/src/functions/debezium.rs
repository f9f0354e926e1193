//! `debezium(value, 'id INT, name STRING' [, key] [, options])`: a Debezium change event (JSON, with
//! or without the `schema`/`payload` wrapper) as a struct of flat columns: the row's
//! columns (from `after`; from `before` for a delete; none for a truncate), then
//! `_op` (`c`, `u`, `d`, `r` for a snapshot read, `t` for a truncate), `_position`
//! (the source's log position as text that sorts as the log does) and
//! `_commit_timestamp` (`source.ts_ms`) and `_rescued_data`. docs/sources.md,
//! "Debezium", has the recipe.
//!
//! Schema drift: the row's fields the schema does not name (a column added upstream,
//! or one whose name differs in case) are never dropped silently. As Auto Loader's
//! rescued data column does for a declared schema, `_rescued_data` holds them as a JSON
//! object (null when there are none), so the recipe keeps them in its tables; a field
//! of a type the schema's column cannot hold fails the query, as a landing file's
//! changed type does.
//!
//! A tombstone (a null value, Kafka's compaction marker after a delete) gives a null
//! struct, so `WHERE value IS NOT NULL` or `WHERE e IS NOT NULL` leaves it out. Text that
//! is no change event, or a row that does not fit the schema, fails the query naming it:
//! bad data is never silently dropped. `key`, the message key, fills the key columns of
//! a delete whose `before` is null (a table without a replica identity sends only the
//! key in the key).
//!
//! `map('mode', 'QUARANTINE')` keeps such a record in the quarantine table of the
//! streaming table whose flow reads it (`<table>__quarantine`, with the batch it came
//! in, its text and why) and gives a null struct for it, so the flow goes on
//! ([`super::rejected`]); the default, `FAILFAST`, fails the query.
//!
//! The position: PostgreSQL's `source.sequence` (`[last commit LSN, LSN]`, so changes
//! sort in commit order and then within their transaction) or `source.lsn`; MySQL's
//! binlog `source.file`, `source.pos` and `source.row`; otherwise `source.ts_ms`. Each
//! number is zero-padded to 20 digits so that text order is log order.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, StringArray, StructArray, TimestampMicrosecondArray,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, TimeUnit};
use datafusion::common::cast::as_string_array;
use datafusion::common::{DataFusionError, Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::columnar;
use super::from_json::{schema_argument, text_args};
pub use super::raw_row::RowFields;
use super::raw_row::decode_rows;
use super::rejected::{Rejected, RejectedValue};

/// The change metadata columns after the row's.
pub const OP: &str = "_op";
pub const POSITION: &str = "_position";
pub const COMMIT_TIMESTAMP: &str = "_commit_timestamp";
pub const RESCUED_DATA: &str = "_rescued_data";

pub(super) fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(Debezium {
        // Deterministic, but declared volatile so that DataFusion never copies the call:
        // an immutable one is copied into each filter pushed below its projection
        // (`WHERE e IS NOT NULL`), decoding every row's JSON once more per copy.
        signature: Signature::user_defined(Volatility::Volatile),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Debezium {
    signature: Signature,
}

/// The metadata fields.
pub fn metadata_fields() -> Vec<Field> {
    vec![
        Field::new(OP, DataType::Utf8, true),
        Field::new(POSITION, DataType::Utf8, true),
        Field::new(
            COMMIT_TIMESTAMP,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new(RESCUED_DATA, DataType::Utf8, true),
    ]
}

impl ScalarUDFImpl for Debezium {
    fn name(&self) -> &str {
        "debezium"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let mut types = text_args(self.name(), args, 2, 4)?;
        // (value, schema [, key] [, options]): the options map keeps its type (its place
        // is checked with the result's type, where the message is ours); the key is text.
        for (i, t) in args.iter().enumerate().skip(2) {
            if matches!(t, DataType::Map(..)) {
                types[i] = t.clone();
            }
        }
        Ok(types)
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        plan_err!("debezium() needs its schema argument to know its type")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let is_map = |i: usize| {
            args.arg_fields
                .get(i)
                .is_some_and(|f| matches!(f.data_type(), DataType::Map(..)))
        };
        if (args.arg_fields.len() == 4 && (is_map(2) || !is_map(3))) || is_map(0) || is_map(1) {
            return plan_err!(
                "debezium() takes (value, schema [, key] [, options]): the options map comes \
                 last, after the message key"
            );
        }
        let row = schema_argument(self.name(), args.scalar_arguments.get(1).copied().flatten())?;
        let metadata = metadata_fields();
        if let Some(clash) = row
            .iter()
            .find(|f| metadata.iter().any(|m| m.name() == f.name()))
        {
            return plan_err!(
                "debezium(): column `{}` has the name of a change metadata column (_op, _position, _commit_timestamp, _rescued_data)",
                clash.name()
            );
        }
        let mut fields: Vec<Field> = row.iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(metadata_fields());
        Ok(Arc::new(Field::new(
            self.name(),
            DataType::Struct(fields.into()),
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let DataType::Struct(fields) = args.return_field.data_type().clone() else {
            return exec_err!("debezium() returns a struct");
        };
        // The key (text) and the options (a map), after the schema, in that order.
        let (key_arg, options_arg) = match args.args.get(2).map(|a| a.data_type()) {
            Some(DataType::Map(..)) => (None, args.args.get(2)),
            Some(_) => (args.args.get(2), args.args.get(3)),
            None => (None, None),
        };
        let quarantine = quarantine_mode(options_arg)?;
        let keep = match quarantine {
            true => Rejected::of(&args.config_options),
            false => None,
        };
        let values = args.args[0].to_array(args.number_rows)?;
        let values = as_string_array(&values)?;
        let keys = key_arg.map(|k| k.to_array(args.number_rows)).transpose()?;
        let keys = keys.as_ref().map(|k| as_string_array(k)).transpose()?;
        let refuse = |text: &str, e: DataFusionError| -> Result<()> {
            match keep {
                Some(kept) => {
                    kept.push(RejectedValue {
                        function: "debezium()",
                        text: text.to_string(),
                        error: reason(e, text),
                    });
                    Ok(())
                }
                None if quarantine => Err(DataFusionError::Execution(format!(
                    "{} (map('mode', 'QUARANTINE') keeps such records in the quarantine table of \
                     a streaming table whose flow decodes them; here nothing keeps them: a view \
                     read by AUTO CDC, a materialized view, a stateful streaming table and a \
                     query keep no quarantine: decode the events in a plain streaming table and \
                     read that)",
                    message(e)
                ))),
                None => Err(e),
            }
        };
        let mut events = Vec::with_capacity(values.len());
        for i in 0..values.len() {
            let key = keys.and_then(|k| k.is_valid(i).then(|| k.value(i)));
            let value = values.is_valid(i).then(|| values.value(i));
            match value.map(|v| event(v, key)).transpose() {
                Ok(e) => events.push(e.flatten()),
                Err(e) => {
                    refuse(values.value(i), e)?;
                    events.push(None);
                }
            }
        }
        let out = match to_struct(&events, &fields) {
            Ok(out) => out,
            Err(e) if !quarantine => return Err(e),
            Err(_) => {
                // A row that does not fit the schema: find which, one at a time.
                for i in 0..events.len() {
                    if events[i].is_some()
                        && let Err(e) = to_struct(&events[i..=i], &fields)
                    {
                        refuse(values.value(i), e)?;
                        events[i] = None;
                    }
                }
                to_struct(&events, &fields)?
            }
        };
        columnar(Arc::new(out), &args.args)
    }
}

/// Whether the options ask for `QUARANTINE` (else `FAILFAST`, the default).
fn quarantine_mode(arg: Option<&ColumnarValue>) -> Result<bool> {
    let mut quarantine = false;
    for (key, value) in super::options::entries("debezium", arg)? {
        match (key.to_ascii_lowercase().as_str(), value.as_deref()) {
            ("mode", Some(m)) if m.eq_ignore_ascii_case("quarantine") => quarantine = true,
            ("mode", Some(m)) if m.eq_ignore_ascii_case("failfast") => quarantine = false,
            ("mode", other) => {
                return exec_err!(
                    "debezium(): option mode is FAILFAST or QUARANTINE, not {other:?}"
                );
            }
            _ => return exec_err!("debezium(): unknown option `{key}` (known: mode)"),
        }
    }
    Ok(quarantine)
}

/// Why `text` was refused, for its quarantine row (which holds the text beside it):
/// the error without the function's name and without the text it quotes.
fn reason(e: DataFusionError, text: &str) -> String {
    let words = message(e);
    let words = words.strip_prefix("debezium(): ").unwrap_or(&words);
    let quoted: String = text.chars().take(120).collect();
    words
        .strip_suffix(&format!(": {quoted}"))
        .unwrap_or(words)
        .to_string()
}

/// An error's words without DataFusion's prefix.
fn message(e: DataFusionError) -> String {
    match e {
        DataFusionError::Execution(m) => m,
        other => other.to_string(),
    }
}

/// One change event, borrowing from its message's text.
#[derive(Debug, Clone, PartialEq)]
pub struct Event<'a> {
    pub op: &'static str,
    /// The row's columns (`None` for a truncate).
    pub row: Option<RowFields<'a>>,
    pub position: Option<String>,
    pub commit_micros: Option<i64>,
}

/// A change event as Debezium writes it, read in one pass: only the fields used are
/// kept (the `schema` part and the rest are skipped, not built), and the row's values
/// stay text.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    op: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    before: Option<RowFields<'a>>,
    #[serde(borrow, default)]
    after: Option<RowFields<'a>>,
    #[serde(borrow, default)]
    source: Option<Source<'a>>,
    #[serde(default)]
    ts_ms: Option<i64>,
    /// The event inside the `schema`/`payload` wrapper (`Some(None)`: a null payload,
    /// a tombstone).
    #[serde(borrow, default, deserialize_with = "present")]
    payload: Option<Option<Box<Envelope<'a>>>>,
}

/// The `source` block's fields that place the event in the log.
#[derive(Deserialize)]
struct Source<'a> {
    #[serde(default)]
    sequence: Option<Value>,
    #[serde(default)]
    lsn: Option<Value>,
    #[serde(default)]
    ts_ms: Option<Value>,
    #[serde(borrow, default)]
    file: Option<Cow<'a, str>>,
    #[serde(default)]
    pos: Option<Value>,
    #[serde(default)]
    row: Option<Value>,
}

/// A field that is there, null or not (serde's `Option` reads both absent and null as
/// `None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

fn bad(text: &str, why: &str) -> DataFusionError {
    let shown: String = text.chars().take(120).collect();
    DataFusionError::Execution(format!("debezium(): {why}: {shown}"))
}

/// The event in `text`; `None` for a tombstone (`null`, or a wrapper whose payload is
/// null).
pub fn event<'a>(text: &'a str, key: Option<&'a str>) -> Result<Option<Event<'a>>> {
    let envelope: Option<Envelope> = serde_json::from_str(text).map_err(|_| {
        match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => bad(text, "not a change event (an object with `op`)"),
            Err(_) => bad(text, "not JSON"),
        }
    })?;
    let Some(mut m) = envelope else {
        return Ok(None);
    };
    if m.op.is_none() {
        match m.payload.take() {
            Some(Some(inner)) => m = *inner,
            Some(None) => return Ok(None),
            None => {}
        }
    }
    let op = match m.op.as_deref() {
        Some("c") => "c",
        Some("u") => "u",
        Some("d") => "d",
        Some("r") => "r",
        Some("t") => "t",
        Some(other) => return Err(bad(text, &format!("unknown op `{other}`"))),
        None => return Err(bad(text, "not a change event (no `op`)")),
    };
    let mut row = match op {
        "d" => m.before.take(),
        "t" => None,
        _ => match m.after.take() {
            Some(r) => Some(r),
            None => return Err(bad(text, &format!("a `{op}` event without `after`"))),
        },
    };
    if op != "t"
        && let Some(key) = key.and_then(key_fields)
    {
        // The key fills the row's key columns that are missing or null.
        let r = row.get_or_insert_with(RowFields::default);
        for (name, value) in key.0 {
            if r.get(&name).is_none_or(|v| v == "null") {
                r.0.push((name, value));
            }
        }
    }
    if op == "d" && row.is_none() {
        return Err(bad(
            text,
            "a delete without `before` and without a message key: its key is unknown",
        ));
    }
    let commit_micros = m
        .source
        .as_ref()
        .and_then(|s| s.ts_ms.as_ref().and_then(Value::as_i64))
        .or(m.ts_ms)
        .map(|ms| ms * 1000);
    Ok(Some(Event {
        op,
        row,
        position: m.source.as_ref().and_then(position),
        commit_micros,
    }))
}

/// A message key's fields, unwrapped from its `schema`/`payload` wrapper; `None` when
/// the key is no JSON object.
fn key_fields(key: &str) -> Option<RowFields<'_>> {
    let fields: RowFields = serde_json::from_str(key).ok()?;
    let wrapped = fields
        .get("payload")
        .filter(|_| fields.0.len() == 1 || fields.0.iter().any(|(n, _)| n == "schema"));
    match wrapped {
        Some(payload) => serde_json::from_str(payload).ok(),
        None => Some(fields),
    }
}

fn number(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The source's log position as text in log order.
fn position(source: &Source) -> Option<String> {
    let sequence = match &source.sequence {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok(),
        Some(v @ Value::Array(_)) => Some(v.clone()),
        _ => None,
    };
    if let Some(Value::Array(parts)) = sequence
        && let Some(lsn) = number(parts.get(1)).or(number(source.lsn.as_ref()))
    {
        let committed = number(parts.first()).unwrap_or(0);
        return Some(format!("{committed:020}/{lsn:020}"));
    }
    if let Some(lsn) = number(source.lsn.as_ref()) {
        return Some(format!("{:020}/{lsn:020}", 0));
    }
    if let (Some(file), Some(pos)) = (source.file.as_deref(), number(source.pos.as_ref())) {
        let row = number(source.row.as_ref()).unwrap_or(0);
        return Some(format!("{file}/{pos:020}/{row:020}"));
    }
    number(source.ts_ms.as_ref()).map(|ts| format!("{ts:020}"))
}

/// The events as a struct of `fields` (the row's, then the metadata); a null struct for
/// a tombstone.
pub fn to_struct(events: &[Option<Event>], fields: &Fields) -> Result<StructArray> {
    let row_count = fields.len() - metadata_fields().len();
    let row_fields: Fields = fields.iter().take(row_count).cloned().collect();
    let objects: Vec<Option<&RowFields>> =
        events.iter().map(|e| e.as_ref()?.row.as_ref()).collect();
    let rows = decode_rows("debezium", &objects, &row_fields)?;
    let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
    let ops: StringArray = events.iter().map(|e| e.as_ref().map(|e| e.op)).collect();
    let positions: StringArray = events
        .iter()
        .map(|e| e.as_ref().and_then(|e| e.position.as_deref()))
        .collect();
    let times: TimestampMicrosecondArray = events
        .iter()
        .map(|e| e.as_ref().and_then(|e| e.commit_micros))
        .collect();
    columns.push(Arc::new(ops));
    columns.push(Arc::new(positions));
    columns.push(Arc::new(times.with_timezone("UTC")));
    // A few names: a scan is cheaper than hashing each row's keys.
    let named: Vec<&str> = row_fields.iter().map(|f| f.name().as_str()).collect();
    let rescued: StringArray = objects
        .iter()
        .map(|o| o.and_then(|row| row.unnamed(|k| named.contains(&k))))
        .collect();
    columns.push(Arc::new(rescued));
    let nulls = NullBuffer::from(events.iter().map(Option::is_some).collect::<Vec<_>>());
    Ok(StructArray::try_new(fields.clone(), columns, Some(nulls))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int32Type;
    use datafusion::common::ScalarValue;

    fn fields() -> Fields {
        let row = schema_argument(
            "debezium",
            Some(&ScalarValue::Utf8(Some("id INT, name STRING".into()))),
        )
        .unwrap();
        let mut all: Vec<Field> = row.iter().map(|f| f.as_ref().clone()).collect();
        all.extend(metadata_fields());
        all.into()
    }

    #[test]
    fn each_op_gives_its_row_and_a_sortable_position() {
        let pg = |op: &str, before: &str, after: &str, seq: &str| {
            format!(
                r#"{{"before":{before},"after":{after},"op":"{op}","source":{{"ts_ms":1700000000000,"sequence":"{seq}","lsn":1}}}}"#
            )
        };
        let texts = [
            pg("r", "null", r#"{"id":1,"name":"a"}"#, r#"[null,\"100\"]"#),
            pg("u", r#"{"id":1,"name":"a"}"#, r#"{"id":1,"name":"b"}"#, r#"[\"100\",\"250\"]"#),
            pg("d", r#"{"id":1,"name":null}"#, "null", r#"[\"250\",\"300\"]"#),
            // Wrapped in schema/payload, MySQL's binlog position.
            r#"{"schema":{},"payload":{"op":"c","after":{"id":2,"name":"m"},"source":{"file":"bin.000002","pos":77,"row":1,"ts_ms":5}}}"#.to_string(),
            r#"{"op":"t","source":{"lsn":400,"ts_ms":6}}"#.to_string(),
        ];
        let events: Vec<Option<Event>> = texts.iter().map(|t| event(t, None).unwrap()).collect();
        let s = to_struct(&events, &fields()).unwrap();
        let ids = s.column(0).as_primitive::<Int32Type>();
        assert_eq!(
            (ids.value(0), ids.value(1), ids.value(2), ids.value(3)),
            (1, 1, 1, 2)
        );
        assert!(ids.is_null(4));
        let ops = s.column(2).as_string::<i32>();
        assert_eq!(
            (0..5).map(|i| ops.value(i)).collect::<Vec<_>>(),
            ["r", "u", "d", "c", "t"]
        );
        let pos = s.column(3).as_string::<i32>();
        assert_eq!(pos.value(0), format!("{:020}/{:020}", 0, 100));
        assert!(pos.value(0) < pos.value(1) && pos.value(1) < pos.value(2));
        assert_eq!(pos.value(3), format!("bin.000002/{:020}/{:020}", 77, 1));
        let times = s
            .column(4)
            .as_primitive::<datafusion::arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(times.value(0), 1_700_000_000_000_000);
    }

    #[test]
    fn fields_the_schema_does_not_name_are_rescued_not_dropped() {
        let texts = [
            // A column added upstream, and one whose name differs in case, in the
            // schema/payload wrapper.
            r#"{"schema":{},"payload":{"op":"u","after":{"id":1,"name":"a","email":"a@x","NAME":"A"},"source":{"lsn":5}}}"#,
            r#"{"op":"c","after":{"id":2,"name":"b"},"source":{"lsn":6}}"#,
            r#"{"op":"d","before":{"id":3,"name":null,"email":null},"source":{"lsn":7}}"#,
        ];
        let events: Vec<Option<Event>> = texts.iter().map(|t| event(t, None).unwrap()).collect();
        let s = to_struct(&events, &fields()).unwrap();
        let rescued = s.column(5).as_string::<i32>();
        assert_eq!(rescued.value(0), r#"{"NAME":"A","email":"a@x"}"#);
        assert!(rescued.is_null(1));
        assert_eq!(rescued.value(2), r#"{"email":null}"#);
        assert_eq!(s.column(1).as_string::<i32>().value(0), "a");
    }

    #[test]
    fn values_reach_arrow_as_the_event_wrote_them() {
        // An escaped name, an escaped text, spacing, and a key that fills the key
        // column a delete left null (from its schema/payload wrapper).
        let texts = [
            r#"{"op":"c","after":{ "i\u0064" : 4 , "name":"a\"b\u00e9"},"source":{"lsn":1}}"#,
            r#"{"op":"d","before":{"id":null,"name":"x"},"source":{"lsn":2}}"#,
        ];
        let keys = [
            None,
            Some(r#"{"schema":{"type":"struct"},"payload":{"id":5}}"#),
        ];
        let events: Vec<Option<Event>> = texts
            .iter()
            .zip(keys)
            .map(|(t, k)| event(t, k).unwrap())
            .collect();
        let s = to_struct(&events, &fields()).unwrap();
        let ids = s.column(0).as_primitive::<Int32Type>();
        assert_eq!((ids.value(0), ids.value(1)), (4, 5));
        assert_eq!(s.column(1).as_string::<i32>().value(0), "a\"bé");
        assert!(s.column(5).is_null(0) && s.column(5).is_null(1));
        // A row that does not fit is named.
        let wrong = event(r#"{"op":"c","after":{"id":"x"}}"#, None).unwrap();
        let err = to_struct(&[events[0].clone(), wrong], &fields())
            .map(|_| ())
            .unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"does not fit the schema: {"id":"x"}"#),
            "{err}"
        );
    }

    #[test]
    fn tombstones_are_null_and_bad_events_fail() {
        assert_eq!(event("null", None).unwrap(), None);
        assert_eq!(
            event(r#"{"schema":{},"payload":null}"#, None).unwrap(),
            None
        );
        assert!(event("{\"id\":1}", None).is_err());
        assert!(event("{\"op\":\"x\"}", None).is_err());
        assert!(event("{\"op\":\"d\",\"before\":null}", None).is_err());
        // The message key gives a delete without `before` its key.
        let e = event(
            r#"{"op":"d","before":null}"#,
            Some(r#"{"schema":{},"payload":{"id":7}}"#),
        )
        .unwrap()
        .unwrap();
        assert_eq!(e.row.unwrap().get("id"), Some("7"));
        let s = to_struct(&[None], &fields()).unwrap();
        assert!(s.is_null(0));
        let wrong = event(r#"{"op":"c","after":{"id":"x"}}"#, None).unwrap();
        assert!(to_struct(&[wrong], &fields()).is_err());
    }
}
