//! The watermark and its overlap: a pass of a `read_query` read starts at the rows
//! whose watermark plus the overlap reaches the highest value committed (a transaction
//! that committed late with an earlier value is caught), and a row read is remembered
//! by its hash while its watermark is within the overlap below the highest value, so a
//! row read again unchanged is left out. Rows whose watermark is null are read by the
//! first pass only; a hard delete is never seen.

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use datafusion::arrow::datatypes::DataType;

use crate::dialect::Dialect;

/// How watermark values compare and what the overlap means for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A date or timestamp: the overlap is that many seconds.
    Time,
    /// A number: the overlap is subtracted from it as a number.
    Number,
    /// Anything else compares as the server orders it, with no overlap.
    Other,
}

impl Kind {
    pub fn of(data_type: &DataType) -> Self {
        match data_type {
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => Self::Time,
            t if t.is_numeric() => Self::Number,
            _ => Self::Other,
        }
    }

    /// A value as a number that orders like it (µs since the epoch for times).
    fn order_value(self, text: &str) -> Option<f64> {
        match self {
            Self::Time => time_micros(text).map(|m| m as f64),
            Self::Number => text.trim().parse().ok(),
            Self::Other => None,
        }
    }

    /// The overlap in the unit of `order_value`.
    fn overlap(self, seconds: f64) -> f64 {
        match self {
            Self::Time => seconds * 1e6,
            Self::Number => seconds,
            Self::Other => 0.0,
        }
    }
}

/// µs since the epoch of a date or timestamp as the servers print them.
pub fn time_micros(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z") {
        return Some(t.timestamp_micros());
    }
    if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f") {
        return Some(t.and_utc().timestamp_micros());
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc().timestamp_micros())
}

/// A watermark column and its overlap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Watermark {
    pub kind: Kind,
    pub overlap_seconds: f64,
}

impl Watermark {
    /// The higher of the highest value so far and `value`: by number or time when it is
    /// one, else `value` (the later in the server's order).
    pub fn higher(self, high: Option<String>, value: &str) -> Option<String> {
        let Some(high) = high else {
            return Some(value.to_string());
        };
        match (self.kind.order_value(&high), self.kind.order_value(value)) {
            (Some(h), Some(v)) if v <= h => Some(high),
            _ => Some(value.to_string()),
        }
    }

    /// `value` is within the overlap below `high`: a pass from `high` reads it again.
    pub fn in_window(self, value: &str, high: &str) -> bool {
        match self.kind.order_value(high) {
            Some(h) => self
                .kind
                .order_value(value)
                .is_some_and(|v| v >= h - self.kind.overlap(self.overlap_seconds)),
            None => value == high,
        }
    }

    /// The condition for the rows a pass from `high` reads: the watermark plus the
    /// overlap reaches `high` (`column`: the watermark as SQL).
    pub fn from_sql(self, dialect: Dialect, column: &str, high: &str) -> String {
        match (self.kind, dialect) {
            (Kind::Time, Dialect::Postgres) => format!(
                "{column} + make_interval(secs => {}) >= {}",
                self.overlap_seconds,
                dialect.literal(high)
            ),
            (Kind::Time, Dialect::Mysql) => {
                // A float's cast saturates; the overlap is a few seconds.
                #[expect(clippy::cast_possible_truncation, reason = "the cast saturates")]
                let micros = (self.overlap_seconds * 1e6).round() as i64;
                format!(
                    "{column} + INTERVAL {micros} MICROSECOND >= {}",
                    dialect.literal(high)
                )
            }
            (Kind::Number, _) => format!(
                "{column} + {} >= {}",
                self.overlap_seconds,
                dialect.value(high, true)
            ),
            (Kind::Other, _) => format!("{column} >= {}", dialect.literal(high)),
        }
    }
}

/// A row's hash (its values as text).
pub fn row_hash(values: &[Option<String>]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for v in values {
        let bytes = v.as_deref().map_or(&[0xff_u8][..], str::as_bytes);
        for b in bytes.iter().chain(&[0xfe]) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Watermark = Watermark {
        kind: Kind::Time,
        overlap_seconds: 60.0,
    };

    #[test]
    fn a_pass_reads_from_the_highest_value_less_the_overlap() {
        assert_eq!(
            MINUTE.from_sql(Dialect::Postgres, "w", "2024-05-01 10:00:00"),
            "w + make_interval(secs => 60) >= '2024-05-01 10:00:00'"
        );
        assert_eq!(
            MINUTE.from_sql(Dialect::Mysql, "w", "2024-05-01 10:00:00"),
            "w + INTERVAL 60000000 MICROSECOND >= '2024-05-01 10:00:00'"
        );
        let number = Watermark {
            kind: Kind::Number,
            overlap_seconds: 0.0,
        };
        assert_eq!(number.from_sql(Dialect::Mysql, "v", "7"), "v + 0 >= 7");
        assert_eq!(number.from_sql(Dialect::Postgres, "v", "7"), "v + 0 >= '7'");
    }

    #[test]
    fn the_window_is_the_overlap_below_the_highest_value() {
        let high = "2024-05-01 10:00:00";
        assert!(MINUTE.in_window("2024-05-01 09:59:00", high));
        assert!(!MINUTE.in_window("2024-05-01 09:58:59.999999", high));
        assert_eq!(
            MINUTE.higher(Some(high.into()), "2024-05-01 09:00:00"),
            Some(high.into())
        );
        assert_eq!(
            MINUTE.higher(Some(high.into()), "2024-05-01 11:00:00+01"),
            Some(high.into())
        );
        assert_eq!(MINUTE.higher(None, high), Some(high.into()));
        let other = Watermark {
            kind: Kind::Other,
            overlap_seconds: 60.0,
        };
        assert!(other.in_window("b", "b") && !other.in_window("a", "b"));
        assert_eq!(other.higher(Some("b".into()), "a"), Some("a".into()));
    }

    #[test]
    fn times_as_the_servers_print_them() {
        assert_eq!(time_micros("1970-01-01 00:00:01"), Some(1_000_000));
        assert_eq!(time_micros("1970-01-01 01:00:01+01"), Some(1_000_000));
        assert_eq!(time_micros("1970-01-02"), Some(86_400_000_000));
        assert_eq!(time_micros("x"), None);
    }
}
