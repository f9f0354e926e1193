//! PostgreSQL column types to Arrow types (the same ones a `schema =>` DDL of
//! Databricks types gives), and column values, as the text the server prints them in
//! under the session settings of [`crate::connection`], to Arrow arrays. A value that
//! does not convert is an error naming the column and the value, never a silent null.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use datafusion::arrow::array::{
    Array, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, StringArray,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::arrow::util::display::FormatOptions;

use crate::error::PgError;

/// The Arrow type cdcflow gives a PostgreSQL column of type `oid` with modifier
/// `typmod`. Types with no exact Arrow peer (numeric without a precision, json, uuid,
/// intervals, arrays, enums, user types) are kept as their text.
pub fn arrow_type(oid: u32, typmod: i32) -> DataType {
    match oid {
        16 => DataType::Boolean,
        21 => DataType::Int16,
        23 => DataType::Int32,
        20 | 26 => DataType::Int64,
        700 => DataType::Float32,
        701 => DataType::Float64,
        1700 => match numeric_precision(typmod) {
            Some((p, s)) => DataType::Decimal128(p, s),
            None => DataType::Utf8,
        },
        1082 => DataType::Date32,
        1114 => DataType::Timestamp(TimeUnit::Microsecond, None),
        1184 => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        17 => DataType::Binary,
        _ => DataType::Utf8,
    }
}

/// `numeric(p, s)` from its type modifier, when Arrow's Decimal128 holds it.
fn numeric_precision(typmod: i32) -> Option<(u8, i8)> {
    if typmod < 4 {
        return None;
    }
    let m = typmod - 4;
    let precision = (m >> 16) & 0xffff;
    // Newer servers allow a negative scale, stored as 11 signed bits.
    let scale = ((m & 0x7ff) ^ 0x400) - 0x400;
    (1..=38).contains(&precision).then_some(())?;
    (0..=precision).contains(&scale).then_some(())?;
    Some((u8::try_from(precision).ok()?, i8::try_from(scale).ok()?))
}

/// The values of one column, as text, in row order.
#[derive(Debug, Default, Clone)]
pub struct TextColumn {
    pub values: Vec<Option<String>>,
}

impl TextColumn {
    /// The column as an Arrow array of type `to`; `column` names it in errors.
    pub fn finish(self, column: &str, to: &DataType) -> Result<ArrayRef, PgError> {
        let bad = |value: &str, why: String| {
            PgError::Data {
            message: format!("column `{column}`: the value `{value}` is not a {to}: {why}"),
            help: "cast the column to text in PostgreSQL, or report the type: cdcflow converts PostgreSQL's text form".into(),
        }
        };
        let values = self.values;
        Ok(match to {
            DataType::Boolean => {
                let mut b = BooleanBuilder::with_capacity(values.len());
                for v in &values {
                    match v.as_deref() {
                        None => b.append_null(),
                        Some("t") => b.append_value(true),
                        Some("f") => b.append_value(false),
                        Some(other) => return Err(bad(other, "not t or f".into())),
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Date32 => {
                let mut b = Date32Builder::with_capacity(values.len());
                let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
                for v in &values {
                    match v.as_deref() {
                        None => b.append_null(),
                        Some(s) => {
                            let d = NaiveDate::parse_from_str(s, "%Y-%m-%d")
                                .map_err(|e| bad(s, e.to_string()))?;
                            let days = i32::try_from((d - epoch).num_days())
                                .map_err(|e| bad(s, e.to_string()))?;
                            b.append_value(days);
                        }
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Timestamp(TimeUnit::Microsecond, zone) => {
                let mut b = TimestampMicrosecondBuilder::with_capacity(values.len());
                for v in &values {
                    match v.as_deref() {
                        None => b.append_null(),
                        Some(s) => b.append_value(
                            timestamp_micros(s, zone.is_some()).map_err(|why| bad(s, why))?,
                        ),
                    }
                }
                Arc::new(b.finish().with_timezone_opt(zone.clone()))
            }
            DataType::Binary => {
                let mut b = BinaryBuilder::with_capacity(values.len(), 0);
                for v in &values {
                    match v.as_deref() {
                        None => b.append_null(),
                        Some(s) => b.append_value(hex_bytea(s).map_err(|why| bad(s, why))?),
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Utf8 => Arc::new(StringArray::from(values)),
            other => {
                let text = StringArray::from(values);
                let options = CastOptions {
                    safe: false,
                    format_options: FormatOptions::default(),
                };
                cast_with_options(&text, other, &options).map_err(|e| {
                    let first = first_unconvertible(&text, other).unwrap_or_default();
                    bad(&first, e.to_string())
                })?
            }
        })
    }
}

/// The first value of `text` that does not cast to `to`, for the error message.
fn first_unconvertible(text: &StringArray, to: &DataType) -> Option<String> {
    let options = CastOptions {
        safe: false,
        format_options: FormatOptions::default(),
    };
    (0..text.len()).find_map(|i| {
        let one = text.slice(i, 1);
        cast_with_options(&one, to, &options)
            .is_err()
            .then(|| text.value(i).to_string())
    })
}

/// `2024-05-01 10:00:00.5+00` (timestamptz under TimeZone=UTC) or
/// `2024-05-01 10:00:00.5` (timestamp) as microseconds since the epoch.
fn timestamp_micros(s: &str, zoned: bool) -> Result<i64, String> {
    if zoned {
        DateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f%#z")
            .map(|t| t.timestamp_micros())
            .map_err(|e| e.to_string())
    } else {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
            .map(|t| t.and_utc().timestamp_micros())
            .map_err(|e| e.to_string())
    }
}

/// bytea's hex text form, `\x0a1b`.
fn hex_bytea(s: &str) -> Result<Vec<u8>, String> {
    let hex = s
        .strip_prefix("\\x")
        .ok_or_else(|| "not in hex form (bytea_output = hex)".to_string())?;
    if hex.len() % 2 != 0 {
        return Err("odd number of hex digits".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{Decimal128Type, Int64Type, TimestampMicrosecondType};

    use super::*;

    fn column(values: &[Option<&str>]) -> TextColumn {
        TextColumn {
            values: values.iter().map(|v| v.map(String::from)).collect(),
        }
    }

    #[test]
    fn types_of_common_columns() {
        assert_eq!(arrow_type(20, -1), DataType::Int64);
        assert_eq!(
            arrow_type(1700, ((12 << 16) | 2) + 4),
            DataType::Decimal128(12, 2)
        );
        assert_eq!(arrow_type(1700, -1), DataType::Utf8);
        assert_eq!(arrow_type(2950, -1), DataType::Utf8);
        assert_eq!(
            arrow_type(1184, -1),
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
    }

    #[test]
    fn text_values_convert() {
        let a = column(&[Some("7"), None])
            .finish("id", &DataType::Int64)
            .unwrap();
        assert_eq!(a.as_primitive::<Int64Type>().value(0), 7);
        assert!(a.is_null(1));
        let a = column(&[Some("12.50")])
            .finish("amount", &DataType::Decimal128(12, 2))
            .unwrap();
        assert_eq!(a.as_primitive::<Decimal128Type>().value(0), 1250);
        let a = column(&[Some("2024-05-01 10:00:00.5+00")])
            .finish("at", &arrow_type(1184, -1))
            .unwrap();
        assert_eq!(
            a.as_primitive::<TimestampMicrosecondType>().value(0),
            1_714_557_600_500_000
        );
        let a = column(&[Some("\\x0aff")])
            .finish("b", &DataType::Binary)
            .unwrap();
        assert_eq!(a.as_binary::<i32>().value(0), &[0x0a, 0xff]);
    }

    #[test]
    fn a_value_that_does_not_convert_is_named() {
        let e = column(&[Some("1"), Some("x")])
            .finish("id", &DataType::Int64)
            .unwrap_err();
        assert!(e.to_string().contains("`x`"), "{e}");
    }
}
