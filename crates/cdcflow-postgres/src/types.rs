//! PostgreSQL column types to Arrow types (the same ones a `schema =>` DDL of
//! Databricks types gives), and column values, as the text the server prints them in
//! under the session settings of [`crate::connection`], to Arrow arrays.
//!
//! Every value PostgreSQL holds either converts exactly or is set apart with the
//! reason, never made null: dates and timestamps before Christ or after 9999 are
//! exact (PostgreSQL, Arrow and Spark all count proleptic Gregorian days, 1 BC being
//! year 0); `infinity`, `-infinity` and a numeric `NaN` have no DATE, TIMESTAMP or
//! DECIMAL value, so their rows are quarantined ([`crate::rejected`]). A column
//! declared STRING keeps the text as PostgreSQL prints it.

use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, StringArray,
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

/// A column as Arrow values, and the rows whose value has none of its type.
#[derive(Debug)]
pub struct Converted {
    pub array: ArrayRef,
    /// (row, why): null in `array`; the row is set apart with the reason.
    pub rejected: Vec<(usize, String)>,
}

/// Casts that fail rather than make a null.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: FormatOptions::new(),
};

impl TextColumn {
    /// The column as an Arrow array of type `to`; `column` names it in the reasons
    /// a value has no value of that type.
    pub fn convert(&self, column: &str, to: &DataType) -> Result<Converted, PgError> {
        let mut rejected = Vec::new();
        let mut reject = |row: usize, value: &str, why: String| {
            rejected.push((row, no_value(column, value, to, &why)));
        };
        let values = &self.values;
        let array: ArrayRef = match to {
            DataType::Boolean => {
                let mut b = BooleanBuilder::with_capacity(values.len());
                for (row, v) in values.iter().enumerate() {
                    match v.as_deref() {
                        None => b.append_null(),
                        Some("t") => b.append_value(true),
                        Some("f") => b.append_value(false),
                        Some(other) => {
                            reject(row, other, "not t or f".into());
                            b.append_null();
                        }
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Date32 => {
                let mut b = Date32Builder::with_capacity(values.len());
                for (row, v) in values.iter().enumerate() {
                    match v.as_deref().map(|s| (s, date_days(s))) {
                        None => b.append_null(),
                        Some((_, Ok(days))) => b.append_value(days),
                        Some((s, Err(why))) => {
                            reject(row, s, why);
                            b.append_null();
                        }
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Timestamp(TimeUnit::Microsecond, zone) => {
                let mut b = TimestampMicrosecondBuilder::with_capacity(values.len());
                for (row, v) in values.iter().enumerate() {
                    match v
                        .as_deref()
                        .map(|s| (s, timestamp_micros(s, zone.is_some())))
                    {
                        None => b.append_null(),
                        Some((_, Ok(micros))) => b.append_value(micros),
                        Some((s, Err(why))) => {
                            reject(row, s, why);
                            b.append_null();
                        }
                    }
                }
                Arc::new(b.finish().with_timezone_opt(zone.clone()))
            }
            DataType::Binary => {
                let mut b = BinaryBuilder::with_capacity(values.len(), 0);
                for (row, v) in values.iter().enumerate() {
                    match v.as_deref().map(|s| (s, hex_bytea(s))) {
                        None => b.append_null(),
                        Some((_, Ok(bytes))) => b.append_value(bytes),
                        Some((s, Err(why))) => {
                            reject(row, s, why);
                            b.append_null();
                        }
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Utf8 => Arc::new(StringArray::from_iter(values.iter().map(Option::as_deref))),
            other => {
                let text = StringArray::from_iter(values.iter().map(Option::as_deref));
                match cast_with_options(&text, other, &STRICT) {
                    Ok(array) => array,
                    // Some value does not convert: find which, and convert the others.
                    Err(_) => {
                        let kept =
                            StringArray::from_iter(values.iter().enumerate().map(|(row, v)| {
                                let s = v.as_deref()?;
                                match cast_with_options(&StringArray::from(vec![s]), other, &STRICT)
                                {
                                    Ok(_) => Some(s),
                                    Err(e) => {
                                        reject(row, s, e.to_string());
                                        None
                                    }
                                }
                            }));
                        cast_with_options(&kept, other, &STRICT).map_err(|e| PgError::Data {
                            message: format!("column `{column}`: its values do not convert to {}: {e}", sql_type(other)),
                            help: "cast the column to text in PostgreSQL, or report the type: cdcflow converts PostgreSQL's text form".into(),
                        })?
                    }
                }
            }
        };
        Ok(Converted { array, rejected })
    }
}

impl TextColumn {
    /// As [`Self::convert`], failing at the first value that has no value of type `to`
    /// (`read_query`, whose rows have no quarantine).
    pub fn finish(self, column: &str, to: &DataType) -> Result<ArrayRef, PgError> {
        let converted = self.convert(column, to)?;
        match converted.rejected.into_iter().next() {
            None => Ok(converted.array),
            Some((_, message)) => Err(PgError::Data {
                message,
                help: "cast the column to text in PostgreSQL, or report the type: cdcflow converts PostgreSQL's text form".into(),
            }),
        }
    }
}

/// Why the row of `value` in `column` is set apart.
fn no_value(column: &str, value: &str, to: &DataType, why: &str) -> String {
    let what = match (value, to) {
        ("infinity" | "-infinity", DataType::Date32 | DataType::Timestamp(..)) => format!(
            "`{value}` has no {} value (Spark's dates and timestamps have no infinity)",
            sql_type(to)
        ),
        ("NaN" | "Infinity" | "-Infinity", DataType::Decimal128(..)) => format!(
            "`{value}` has no {} value (a decimal has no NaN or infinity)",
            sql_type(to)
        ),
        _ => format!("`{value}` is not a {} value: {why}", sql_type(to)),
    };
    format!("column `{column}`: {what}")
}

/// `to` as Databricks SQL names it.
fn sql_type(to: &DataType) -> String {
    match to {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p},{s})"),
        DataType::Date32 => "DATE".into(),
        DataType::Timestamp(_, None) => "TIMESTAMP_NTZ".into(),
        DataType::Timestamp(_, Some(_)) => "TIMESTAMP".into(),
        DataType::Binary => "BINARY".into(),
        other => other.to_string(),
    }
}

/// `2024-05-01`, `0044-03-15 BC` or `10000-01-01` (DateStyle ISO) as a proleptic
/// Gregorian date; 1 BC is year 0, as in Arrow and Spark.
fn pg_date(s: &str) -> Result<NaiveDate, String> {
    let (ymd, bc) = match s.strip_suffix(" BC") {
        Some(ymd) => (ymd, true),
        None => (s, false),
    };
    let mut parts = ymd.splitn(3, '-');
    let (Some(year), Some(month), Some(day)) = (
        digits(parts.next()),
        digits(parts.next()),
        digits(parts.next()),
    ) else {
        return Err("not a date as PostgreSQL prints one (YYYY-MM-DD)".into());
    };
    let year = i32::try_from(year).map_err(|e| e.to_string())?;
    let year = if bc { 1 - year } else { year };
    let (month, day) = (
        u32::try_from(month).map_err(|e| e.to_string())?,
        u32::try_from(day).map_err(|e| e.to_string())?,
    );
    NaiveDate::from_ymd_opt(year, month, day).ok_or_else(|| {
        "not a day of the calendar, or outside the years cdcflow reads (262143 BC to 262143)".into()
    })
}

/// An unsigned decimal number, all digits.
fn digits(part: Option<&str>) -> Option<u64> {
    part.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))?
        .parse()
        .ok()
}

/// A date's days since 1970-01-01.
fn date_days(s: &str) -> Result<i32, String> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
    let days = (pg_date(s)? - epoch).num_days();
    i32::try_from(days).map_err(|e| e.to_string())
}

/// `2024-05-01 10:00:00.5+00` (timestamptz under TimeZone=UTC; any offset is
/// honoured), `2024-05-01 10:00:00.5` (timestamp), either with ` BC` after it, as
/// microseconds since the epoch.
fn timestamp_micros(s: &str, zoned: bool) -> Result<i64, String> {
    let (text, bc) = match s.strip_suffix(" BC") {
        Some(t) => (t, true),
        None => (s, false),
    };
    let (date, time) = text
        .split_once(' ')
        .ok_or_else(|| "not a timestamp as PostgreSQL prints one".to_string())?;
    let date = pg_date(&if bc {
        format!("{date} BC")
    } else {
        date.to_string()
    })?;
    let (time, offset_seconds) = match zoned {
        true => {
            let at = time
                .rfind(['+', '-'])
                .ok_or_else(|| "no time zone offset".to_string())?;
            (&time[..at], utc_offset(&time[at..])?)
        }
        false => (time, 0),
    };
    let time = NaiveTime::parse_from_str(time, "%H:%M:%S%.f").map_err(|e| e.to_string())?;
    let micros = NaiveDateTime::new(date, time).and_utc().timestamp_micros();
    micros
        .checked_sub(offset_seconds * 1_000_000)
        .ok_or_else(|| "outside TIMESTAMP's range".to_string())
}

/// `+00`, `-03:30` or `+05:53:28` as seconds east of UTC.
fn utc_offset(s: &str) -> Result<i64, String> {
    let bad = || format!("`{s}` is not a time zone offset");
    let sign = match s.as_bytes().first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Err(bad()),
    };
    let mut seconds = 0;
    for (i, part) in s[1..].split(':').enumerate() {
        let n = i64::try_from(digits(Some(part)).ok_or_else(bad)?).map_err(|_| bad())?;
        let unit = [3600, 60, 1].get(i).ok_or_else(bad)?;
        seconds += n * unit;
    }
    Ok(sign * seconds)
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
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{
        Date32Type, Decimal128Type, Float32Type, Float64Type, Int64Type, TimestampMicrosecondType,
    };

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

    fn days(year: i32, month: u32, day: u32) -> i32 {
        let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
        let d = NaiveDate::from_ymd_opt(year, month, day).unwrap();
        i32::try_from((d - epoch).num_days()).unwrap()
    }

    #[test]
    fn dates_before_christ_and_after_9999_are_exact() {
        let a = column(&[
            Some("0044-03-15 BC"),
            Some("10000-01-01"),
            Some("0001-01-01 BC"),
        ])
        .finish("d", &DataType::Date32)
        .unwrap();
        let a = a.as_primitive::<Date32Type>();
        // PostgreSQL counts 1 BC as year 0 (proleptic Gregorian, as Arrow and Spark).
        assert_eq!(a.value(0), days(-43, 3, 15));
        assert_eq!(a.value(1), days(10000, 1, 1));
        assert_eq!(a.value(2), days(0, 1, 1));
    }

    #[test]
    fn timestamps_before_christ_and_after_9999_are_exact() {
        let micros =
            |y, m, d, h| i64::from(days(y, m, d)) * 86_400_000_000 + i64::from(h) * 3_600_000_000;
        let a = column(&[
            Some("0044-03-15 10:00:00.5+00 BC"),
            Some("12000-01-01 10:00:00+00"),
            Some("2024-05-01 12:00:00+02"),
            Some("2024-05-01 10:30:00+05:30"),
        ])
        .finish("at", &arrow_type(1184, -1))
        .unwrap();
        let a = a.as_primitive::<TimestampMicrosecondType>();
        assert_eq!(a.value(0), micros(-43, 3, 15, 10) + 500_000);
        assert_eq!(a.value(1), micros(12000, 1, 1, 10));
        assert_eq!(a.value(2), micros(2024, 5, 1, 10));
        assert_eq!(a.value(3), micros(2024, 5, 1, 5));
        let a = column(&[Some("0044-03-15 10:00:00 BC"), Some("10000-01-01 00:00:00")])
            .finish("at", &arrow_type(1114, -1))
            .unwrap();
        let a = a.as_primitive::<TimestampMicrosecondType>();
        assert_eq!(a.value(0), micros(-43, 3, 15, 10));
        assert_eq!(a.value(1), micros(10000, 1, 1, 0));
    }

    #[test]
    fn floats_keep_nan_and_infinities() {
        let a = column(&[
            Some("NaN"),
            Some("Infinity"),
            Some("-Infinity"),
            Some("1.5"),
        ])
        .finish("f", &DataType::Float64)
        .unwrap();
        let a = a.as_primitive::<Float64Type>();
        assert!(a.value(0).is_nan());
        assert_eq!(a.value(1), f64::INFINITY);
        assert_eq!(a.value(2), f64::NEG_INFINITY);
        assert_eq!(a.value(3), 1.5);
        let a = column(&[Some("NaN"), Some("-Infinity")])
            .finish("f", &DataType::Float32)
            .unwrap();
        let a = a.as_primitive::<Float32Type>();
        assert!(a.value(0).is_nan());
        assert_eq!(a.value(1), f32::NEG_INFINITY);
    }

    #[test]
    fn values_with_no_value_of_the_type_are_set_apart_with_why() {
        let c = column(&[
            Some("infinity"),
            Some("2024-05-01"),
            Some("-infinity"),
            None,
        ])
        .convert("d", &DataType::Date32)
        .unwrap();
        assert_eq!(c.array.len(), 4);
        assert!(c.array.is_null(0) && c.array.is_valid(1) && c.array.is_null(2));
        let rows: Vec<usize> = c.rejected.iter().map(|(row, _)| *row).collect();
        assert_eq!(rows, vec![0, 2]);
        assert_eq!(
            c.rejected[0].1,
            "column `d`: `infinity` has no DATE value (Spark's dates and timestamps have no infinity)"
        );
        let c = column(&[Some("-infinity"), Some("2024-05-01 10:00:00+00")])
            .convert("at", &arrow_type(1184, -1))
            .unwrap();
        assert_eq!(c.rejected.len(), 1);
        assert!(
            c.rejected[0].1.contains("no TIMESTAMP value"),
            "{:?}",
            c.rejected
        );
        let c = column(&[Some("1.50"), Some("NaN"), Some("x")])
            .convert("amount", &DataType::Decimal128(10, 2))
            .unwrap();
        assert_eq!(c.array.as_primitive::<Decimal128Type>().value(0), 150);
        assert_eq!(
            c.rejected[0],
            (
                1,
                "column `amount`: `NaN` has no DECIMAL(10,2) value (a decimal has no NaN or infinity)"
                    .to_string()
            )
        );
        assert!(
            c.rejected[1]
                .1
                .starts_with("column `amount`: `x` is not a DECIMAL(10,2) value")
        );
        // Past the years cdcflow reads (PostgreSQL's dates go to 5874897).
        let c = column(&[Some("5874897-12-31")])
            .convert("d", &DataType::Date32)
            .unwrap();
        assert_eq!(c.rejected.len(), 1);
    }

    #[test]
    fn a_value_that_does_not_convert_is_named() {
        let e = column(&[Some("1"), Some("x")])
            .finish("id", &DataType::Int64)
            .unwrap_err();
        assert!(e.to_string().contains("`x`"), "{e}");
    }
}
