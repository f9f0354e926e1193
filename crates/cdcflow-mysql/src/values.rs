//! A column's values, as the snapshot's `SELECT` (binary protocol) and the binary log's
//! row events give them, to one text form per Arrow type; `cdcflow_postgres::types`
//! turns that text into Arrow values, setting apart each value its type has none of
//! (MySQL's zero dates `0000-00-00`). Both paths reach the same text for the same
//! stored value, so a row copied and the same row streamed are equal:
//!
//! - the binary log gives an `enum`'s index and a `set`'s bits, which become the
//!   members' names; a `TIMESTAMP` as seconds since the epoch, which becomes UTC (the
//!   sessions' time zone); a `YEAR` as text; `latin1` text in its own bytes;
//! - a `binary(n)` value is padded with zero bytes to `n`, as a `SELECT` gives it.

use mysql_async::Value;
use mysql_async::binlog::value::BinlogValue;

use datafusion::arrow::datatypes::DataType;

use crate::columns::TableColumn;

/// `value` of `column` (from a `SELECT`, or from the binary log once through
/// [`from_binlog`]) as the text the column's Arrow type is read from; `None` for NULL.
pub fn text(column: &TableColumn, value: &Value) -> Result<Option<String>, String> {
    let to = column.arrow_type();
    Ok(Some(match (value, &to) {
        (Value::NULL, _) => return Ok(None),
        (Value::Bytes(b), DataType::Boolean) => match b.iter().any(|byte| *byte != 0) {
            true => "t".into(),
            false => "f".into(),
        },
        (Value::Int(i), DataType::Boolean) => if *i != 0 { "t" } else { "f" }.into(),
        (Value::Bytes(b), DataType::Binary) => hex(&padded(column, b.clone())),
        (Value::Bytes(b), DataType::Utf8) if column.data_type == "json" => json_text(b)?,
        (Value::Bytes(b), _) => utf8(column, b)?,
        (Value::Int(i), _) => i.to_string(),
        (Value::UInt(u), _) => u.to_string(),
        (Value::Float(f), _) => f.to_string(),
        (Value::Double(d), _) => d.to_string(),
        (Value::Date(y, m, d, h, mi, s, us), DataType::Date32) => {
            let _ = (h, mi, s, us);
            format!("{y:04}-{m:02}-{d:02}")
        }
        (Value::Date(y, m, d, h, mi, s, us), DataType::Timestamp(_, zone)) => format!(
            "{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}{}",
            if zone.is_some() { "+00" } else { "" }
        ),
        (Value::Date(y, m, d, h, mi, s, us), _) => {
            let fraction = match us {
                0 => String::new(),
                us => format!(".{us:06}"),
            };
            match (h, mi, s, us, column.data_type.as_str()) {
                (0, 0, 0, 0, "date") => format!("{y:04}-{m:02}-{d:02}"),
                _ => format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}{fraction}"),
            }
        }
        (Value::Time(negative, days, h, m, s, us), _) => {
            let hours = u32::from(*h) + days * 24;
            let fraction = match us {
                0 => String::new(),
                us => format!(".{us:06}"),
            };
            format!(
                "{}{hours:02}:{m:02}:{s:02}{fraction}",
                if *negative { "-" } else { "" }
            )
        }
    }))
}

/// A binary log value of `column` as a `SELECT` gives the same stored value.
pub fn from_binlog(column: &TableColumn, value: BinlogValue<'_>) -> Result<Value, String> {
    let value = match value {
        BinlogValue::Value(v) => v,
        BinlogValue::Jsonb(json) => {
            let json = serde_json::Value::try_from(json).map_err(|e| {
                format!(
                    "column `{}`: a JSON value the binary log holds cannot be read: {e}",
                    column.name
                )
            })?;
            Value::Bytes(json.to_string().into_bytes())
        }
        BinlogValue::JsonDiff(_) => {
            return Err(format!(
                "column `{}`: the binary log holds a partial JSON update (binlog_row_value_options = PARTIAL_JSON), which carries no whole value",
                column.name
            ));
        }
    };
    Ok(match (column.data_type.as_str(), value) {
        ("enum", Value::Int(index)) => match usize::try_from(index) {
            // 0 is the empty value MySQL stores for a value not among the members.
            Ok(0) => Value::Bytes(vec![]),
            Ok(i) => match column.members().get(i - 1) {
                Some(name) => Value::Bytes(name.clone().into_bytes()),
                None => return Err(unknown_member(column, index)),
            },
            Err(_) => return Err(unknown_member(column, index)),
        },
        ("set", Value::Bytes(bits)) => {
            let members = column.members();
            let mut chosen = vec![];
            for (i, name) in members.iter().enumerate() {
                if bits
                    .get(i / 8)
                    .is_some_and(|byte| byte & (1 << (i % 8)) != 0)
                {
                    chosen.push(name.as_str());
                }
            }
            Value::Bytes(chosen.join(",").into_bytes())
        }
        ("timestamp", Value::Int(seconds)) => utc(column, seconds, 0)?,
        ("timestamp", Value::Bytes(text)) => {
            let text = String::from_utf8_lossy(&text).into_owned();
            let (seconds, micros) = text.split_once('.').unwrap_or((&text, "0"));
            let seconds: i64 = seconds.parse().map_err(|_| bad(column, &text))?;
            let micros: u32 = format!("{micros:0<6}")
                .parse()
                .map_err(|_| bad(column, &text))?;
            utc(column, seconds, micros)?
        }
        // The log gives 1900 + the stored byte; 0 is the year 0000.
        ("year", Value::Bytes(text)) => match text.as_slice() {
            b"1900" => Value::Int(0),
            _ => Value::Bytes(text),
        },
        (_, Value::Bytes(bytes)) if column.charset.as_deref() == Some("latin1") => {
            // MySQL's latin1 is Windows-1252; its text arrives as stored.
            Value::Bytes(latin1_to_utf8(&bytes).into_bytes())
        }
        (_, v) => v,
    })
}

fn unknown_member(column: &TableColumn, index: i64) -> String {
    format!(
        "column `{}`: the binary log holds member {index} of {}, which has no such member (was the column altered?)",
        column.name, column.column_type
    )
}

fn bad(column: &TableColumn, text: &str) -> String {
    format!(
        "column `{}`: `{text}` is not a TIMESTAMP as the binary log gives one",
        column.name
    )
}

/// Seconds (and µs) since the epoch as a UTC date and time; 0 is MySQL's zero
/// timestamp, `0000-00-00 00:00:00`.
fn utc(column: &TableColumn, seconds: i64, micros: u32) -> Result<Value, String> {
    if seconds == 0 && micros == 0 {
        return Ok(Value::Date(0, 0, 0, 0, 0, 0, 0));
    }
    let at = chrono::DateTime::from_timestamp(seconds, micros * 1000)
        .ok_or_else(|| bad(column, &seconds.to_string()))?
        .naive_utc();
    use chrono::{Datelike, Timelike};
    let part = |n: u32| u8::try_from(n).unwrap_or(u8::MAX);
    Ok(Value::Date(
        u16::try_from(at.year()).unwrap_or(u16::MAX),
        part(at.month()),
        part(at.day()),
        part(at.hour()),
        part(at.minute()),
        part(at.second()),
        micros,
    ))
}

/// Windows-1252 bytes as UTF-8 text (the five unassigned bytes as the C1 controls of
/// the same number, as MySQL converts them).
fn latin1_to_utf8(bytes: &[u8]) -> String {
    const HIGH: [char; 32] = [
        '€', '\u{81}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{8d}', 'Ž',
        '\u{8f}', '\u{90}', '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{9d}',
        'ž', 'Ÿ',
    ];
    bytes
        .iter()
        .map(|b| match b {
            0x80..=0x9f => HIGH[usize::from(b - 0x80)],
            b => char::from(*b),
        })
        .collect()
}

/// Text of a text column: UTF-8 as the sessions read it.
fn utf8(column: &TableColumn, bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        format!(
            "column `{}`: a value is not UTF-8 text ({} bytes)",
            column.name,
            bytes.len()
        )
    })
}

/// MySQL's JSON type (not MariaDB's, which is text): one text for a value from the
/// binary log (parsed from its binary form) and from a `SELECT` (which prints it its
/// own way): both read and written again, keys in order.
fn json_text(bytes: &[u8]) -> Result<String, String> {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .map(|v| v.to_string())
        .map_err(|e| format!("a JSON value cannot be read: {e}"))
}

/// `binary(n)` values, which MySQL stores padded with zero bytes; the binary log may
/// give them without the padding.
fn padded(column: &TableColumn, mut bytes: Vec<u8>) -> Vec<u8> {
    if let Some(n) = column.binary_length() {
        bytes.resize(n.max(bytes.len()), 0);
    }
    bytes
}

/// bytea's hex text form, which the text-to-Arrow conversion reads.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len() * 2);
    out.push_str("\\x");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::column;

    #[test]
    fn binlog_forms_become_select_forms() {
        let e = column("enum", "enum('new','Paid')");
        let v = from_binlog(&e, BinlogValue::Value(Value::Int(2))).expect("a value of the test");
        assert_eq!(
            text(&e, &v).expect("a value of the test").as_deref(),
            Some("Paid")
        );
        let s = column("set", "set('a','b','c')");
        let v = from_binlog(&s, BinlogValue::Value(Value::Bytes(vec![0b101])))
            .expect("a value of the test");
        assert_eq!(
            text(&s, &v).expect("a value of the test").as_deref(),
            Some("a,c")
        );
        let t = column("timestamp", "timestamp(6)");
        let v = from_binlog(
            &t,
            BinlogValue::Value(Value::Bytes(b"1714550400.5".to_vec())),
        )
        .expect("a value of the test");
        assert_eq!(
            text(&t, &v).expect("a value of the test").as_deref(),
            Some("2024-05-01 08:00:00.500000+00")
        );
        let mut l = column("varchar", "varchar(10)");
        l.charset = Some("latin1".into());
        let v = from_binlog(&l, BinlogValue::Value(Value::Bytes(vec![b'c', 0xe9, 0x80])))
            .expect("a value of the test");
        assert_eq!(
            text(&l, &v).expect("a value of the test").as_deref(),
            Some("cé€")
        );
        let b = column("binary", "binary(4)");
        assert_eq!(
            text(&b, &Value::Bytes(vec![1, 2]))
                .expect("a value of the test")
                .as_deref(),
            Some("\\x01020000")
        );
    }

    #[test]
    fn times_and_dates_print_as_the_text_conversion_reads_them() {
        let d = column("datetime", "datetime(6)");
        assert_eq!(
            text(&d, &Value::Date(2024, 5, 1, 8, 0, 0, 7))
                .expect("a value of the test")
                .as_deref(),
            Some("2024-05-01 08:00:00.000007")
        );
        let t = column("time", "time");
        assert_eq!(
            text(&t, &Value::Time(true, 1, 2, 3, 4, 0))
                .expect("a value of the test")
                .as_deref(),
            Some("-26:03:04")
        );
        let bit = column("bit", "bit(1)");
        assert_eq!(
            text(&bit, &Value::Bytes(vec![1]))
                .expect("a value of the test")
                .as_deref(),
            Some("t")
        );
    }
}
