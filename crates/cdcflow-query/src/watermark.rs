//! The query a `read_query` read runs, and the position it keeps.
//!
//! A read runs `SELECT * FROM (<query>) AS cdcflow_q WHERE <watermark> + <overlap> >=
//! <highest value committed> ORDER BY <watermark> LIMIT <batch>`: the rows at or above
//! the last high watermark, and those up to the overlap below it (a transaction that
//! committed late with an earlier value). The checkpoint keeps the highest value read
//! and a hash of every row read in the window below it, so a row read again unchanged
//! is left out of the next batch (and one re-delivered anyway, say after a changed
//! query, is an exact re-delivery that AUTO CDC's sequence de-duplicates). Rows whose
//! watermark is null are read by the first read only; a hard delete is never seen.

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use datafusion::arrow::datatypes::DataType;
use serde_json::{Value, json};

/// Rows a read takes at most; the rest is the next batch's.
pub const BATCH_ROWS: usize = 100_000;

/// The two SQL dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Mysql,
}

impl Dialect {
    pub fn ident(self, name: &str) -> String {
        match self {
            Self::Postgres => format!("\"{}\"", name.replace('"', "\"\"")),
            Self::Mysql => format!("`{}`", name.replace('`', "``")),
        }
    }

    pub fn literal(self, text: &str) -> String {
        match self {
            Self::Postgres => format!("'{}'", text.replace('\'', "''")),
            // MySQL strings also escape with a backslash.
            Self::Mysql => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''")),
        }
    }
}

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

/// What the checkpoint keeps of a `read_query` source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Position {
    /// The highest watermark value read, as the server printed it.
    pub watermark: Option<String>,
    /// Hashes of the rows read whose watermark is within the overlap below it.
    pub seen: Vec<u64>,
}

impl Position {
    pub fn to_json(&self) -> Value {
        json!({ "watermark": self.watermark, "seen": self.seen })
    }

    pub fn parse(value: &Value) -> Option<Self> {
        Some(Self {
            watermark: match value.get("watermark")? {
                Value::Null => None,
                v => Some(v.as_str()?.to_string()),
            },
            seen: value
                .get("seen")?
                .as_array()?
                .iter()
                .map(Value::as_u64)
                .collect::<Option<_>>()?,
        })
    }
}

/// The SQL of a read after `position`.
pub fn read_sql(
    dialect: Dialect,
    query: &str,
    watermark: &str,
    kind: Kind,
    overlap_seconds: f64,
    position: &Position,
) -> String {
    let inner = query.trim().trim_end_matches(';');
    let column = format!("cdcflow_q.{}", dialect.ident(watermark));
    let filter = match &position.watermark {
        None => String::new(),
        Some(high) => {
            let high = dialect.literal(high);
            match (kind, dialect) {
                (Kind::Time, Dialect::Postgres) => {
                    format!(" WHERE {column} + make_interval(secs => {overlap_seconds}) >= {high}")
                }
                (Kind::Time, Dialect::Mysql) => {
                    // A float's cast saturates; the overlap is a few seconds.
                    #[expect(clippy::cast_possible_truncation, reason = "the cast saturates")]
                    let micros = (overlap_seconds * 1e6).round() as i64;
                    format!(" WHERE {column} + INTERVAL {micros} MICROSECOND >= {high}")
                }
                (Kind::Number, _) => format!(" WHERE {column} + {overlap_seconds} >= {high}"),
                (Kind::Other, _) => format!(" WHERE {column} >= {high}"),
            }
        }
    };
    format!("SELECT * FROM ({inner}) AS cdcflow_q{filter} ORDER BY {column} LIMIT {BATCH_ROWS}")
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

/// What a read keeps of the rows the server returned.
#[derive(Debug, PartialEq)]
pub struct Taken {
    /// The rows not read before, in order.
    pub rows: Vec<Vec<Option<String>>>,
    pub position: Position,
    /// The server had more rows than a batch.
    pub more: bool,
}

/// Leaves out the rows `position` has seen and computes the next position; `column`
/// is the watermark's place in a row.
pub fn take(
    returned: Vec<Vec<Option<String>>>,
    column: usize,
    kind: Kind,
    overlap_seconds: f64,
    position: &Position,
) -> Taken {
    let full = returned.len() >= BATCH_ROWS;
    let value = |row: &Vec<Option<String>>| row.get(column).cloned().flatten();
    // The highest value: by number or time when it is one, else the last in the
    // server's order.
    let high = returned
        .iter()
        .filter_map(value)
        .fold(position.watermark.clone(), |best, v| match best {
            None => Some(v),
            Some(b) => match (kind.order_value(&b), kind.order_value(&v)) {
                (Some(x), Some(y)) if y > x => Some(v),
                (Some(_), Some(_)) => Some(b),
                _ => Some(v),
            },
        });
    let floor = high
        .as_deref()
        .and_then(|h| kind.order_value(h))
        .map(|h| h - kind.overlap(overlap_seconds));
    let in_window = |row: &Vec<Option<String>>| match (value(row), &floor) {
        (Some(v), Some(floor)) => kind.order_value(&v).is_some_and(|v| v >= *floor),
        (Some(v), None) => high.as_deref() == Some(v.as_str()),
        (None, _) => false,
    };
    let mut seen = Vec::new();
    let mut rows = Vec::new();
    for row in returned {
        let hash = row_hash(&row);
        if in_window(&row) {
            seen.push(hash);
        }
        if !position.seen.contains(&hash) {
            rows.push(row);
        }
    }
    seen.sort_unstable();
    seen.dedup();
    Taken {
        more: full && !rows.is_empty(),
        rows,
        position: Position {
            watermark: high,
            seen,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i32, at: &str) -> Vec<Option<String>> {
        vec![Some(id.to_string()), Some(at.to_string())]
    }

    #[test]
    fn the_sql_reads_from_the_watermark_less_the_overlap() {
        let p = Position {
            watermark: Some("2024-05-01 10:00:00".into()),
            seen: vec![],
        };
        assert_eq!(
            read_sql(
                Dialect::Postgres,
                "SELECT * FROM t;",
                "updated_at",
                Kind::Time,
                60.0,
                &p
            ),
            "SELECT * FROM (SELECT * FROM t) AS cdcflow_q WHERE cdcflow_q.\"updated_at\" + make_interval(secs => 60) >= '2024-05-01 10:00:00' ORDER BY cdcflow_q.\"updated_at\" LIMIT 100000"
        );
        assert_eq!(
            read_sql(
                Dialect::Mysql,
                "SELECT * FROM t",
                "v",
                Kind::Number,
                0.0,
                &Position {
                    watermark: Some("7".into()),
                    seen: vec![]
                }
            ),
            "SELECT * FROM (SELECT * FROM t) AS cdcflow_q WHERE cdcflow_q.`v` + 0 >= '7' ORDER BY cdcflow_q.`v` LIMIT 100000"
        );
        assert!(
            !read_sql(
                Dialect::Mysql,
                "SELECT 1",
                "v",
                Kind::Time,
                1.5,
                &Position::default()
            )
            .contains("WHERE")
        );
        assert_eq!(Dialect::Mysql.literal("a'b\\c"), "'a''b\\\\c'");
    }

    #[test]
    fn rows_seen_in_the_overlap_are_left_out() {
        let first = take(
            vec![row(1, "2024-05-01 09:00:00"), row(2, "2024-05-01 10:00:00")],
            1,
            Kind::Time,
            60.0,
            &Position::default(),
        );
        assert_eq!(first.rows.len(), 2);
        assert_eq!(
            first.position.watermark.as_deref(),
            Some("2024-05-01 10:00:00")
        );
        assert_eq!(
            first.position.seen,
            vec![row_hash(&row(2, "2024-05-01 10:00:00"))]
        );
        // Read again with a late row inside the overlap and a new one.
        let second = take(
            vec![
                row(3, "2024-05-01 09:59:30"),
                row(2, "2024-05-01 10:00:00"),
                row(4, "2024-05-01 10:05:00"),
            ],
            1,
            Kind::Time,
            60.0,
            &first.position,
        );
        assert_eq!(
            second.rows,
            vec![row(3, "2024-05-01 09:59:30"), row(4, "2024-05-01 10:05:00")]
        );
        assert_eq!(
            second.position.watermark.as_deref(),
            Some("2024-05-01 10:05:00")
        );
        assert!(!second.more);
        // Nothing new: nothing taken, the position as it was.
        let third = take(
            vec![row(4, "2024-05-01 10:05:00")],
            1,
            Kind::Time,
            60.0,
            &second.position,
        );
        assert!(third.rows.is_empty());
        assert_eq!(third.position, second.position);
        assert_eq!(
            Position::parse(&second.position.to_json()),
            Some(second.position)
        );
    }

    #[test]
    fn times_as_the_servers_print_them() {
        assert_eq!(time_micros("1970-01-01 00:00:01"), Some(1_000_000));
        assert_eq!(time_micros("1970-01-01 01:00:01+01"), Some(1_000_000));
        assert_eq!(time_micros("1970-01-02"), Some(86_400_000_000));
        assert_eq!(time_micros("x"), None);
    }
}
