//! Spark's `unix_timestamp([x [, format]])`: seconds since 1970-01-01 UTC as a BIGINT.
//! No argument: the query's start time (one value for the whole query, as `now()`). A
//! date or timestamp: its seconds. A string: read with `format` (Java's
//! `yyyy-MM-dd HH:mm:ss` by default), null when it does not match, as Spark gives.
//! Times without a zone are UTC, cdcflow's session time zone.

use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime};
use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::cast::as_string_array;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, lit,
};

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![Arc::new(ScalarUDF::new_from_impl(UnixTimestamp {
        signature: Signature::user_defined(Volatility::Stable),
    }))]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct UnixTimestamp {
    signature: Signature,
}

const SECONDS: DataType = DataType::Timestamp(TimeUnit::Second, None);

impl ScalarUDFImpl for UnixTimestamp {
    fn name(&self) -> &str {
        "unix_timestamp"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [] => Ok(vec![]),
            [DataType::Date32 | DataType::Date64 | DataType::Timestamp(..)] => Ok(vec![SECONDS]),
            [_] => Ok(vec![DataType::Utf8]),
            [_, _] => Ok(vec![DataType::Utf8, DataType::Utf8]),
            _ => plan_err!(
                "unix_timestamp() takes at most 2 arguments, not {}",
                args.len()
            ),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        match (args.is_empty(), info.query_execution_start_time()) {
            (true, Some(start)) => Ok(ExprSimplifyResult::Simplified(lit(start.timestamp()))),
            _ => Ok(ExprSimplifyResult::Original(args)),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let out: ArrayRef = match args.args.as_slice() {
            [] => {
                let now = chrono::Utc::now().timestamp();
                return Ok(ColumnarValue::Scalar(ScalarValue::Int64(Some(now))));
            }
            [v] if v.data_type() == SECONDS => cast(&v.to_array(rows)?, &DataType::Int64)?,
            [v] => parse(&v.to_array(rows)?, None)?,
            [v, format] => parse(&v.to_array(rows)?, Some(&format.to_array(rows)?))?,
            _ => return exec_err!("unix_timestamp() takes at most 2 arguments"),
        };
        super::columnar(out, &args.args)
    }
}

/// Seconds of each string in `text`, read with its `format`.
fn parse(text: &ArrayRef, format: Option<&ArrayRef>) -> Result<ArrayRef> {
    let text = as_string_array(text)?;
    let format = format.map(|f| as_string_array(f)).transpose()?;
    let out: Int64Array = (0..text.len())
        .map(|i| {
            if text.is_null(i) || format.is_some_and(|f| f.is_null(i)) {
                return None;
            }
            let pattern = format.map_or("yyyy-MM-dd HH:mm:ss", |f| f.value(i));
            seconds(text.value(i), &chrono_format(pattern))
        })
        .collect();
    Ok(Arc::new(out))
}

fn seconds(text: &str, format: &str) -> Option<i64> {
    let text = text.trim();
    NaiveDateTime::parse_from_str(text, format)
        .ok()
        .or_else(|| {
            NaiveDate::parse_from_str(text, format)
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })
        .map(|t| t.and_utc().timestamp())
}

/// A Java `DateTimeFormatter` pattern (Spark's) as chrono's: the letters Spark's
/// pipelines use; text in quotes is kept.
pub(super) fn chrono_format(java: &str) -> String {
    const LETTERS: [(&str, &str); 16] = [
        ("yyyy", "%Y"),
        ("yy", "%y"),
        ("MMMM", "%B"),
        ("MMM", "%b"),
        ("MM", "%m"),
        ("dd", "%d"),
        ("HH", "%H"),
        ("hh", "%I"),
        ("mm", "%M"),
        ("ss", "%S"),
        ("SSSSSS", "%6f"),
        ("SSS", "%3f"),
        ("a", "%p"),
        ("XXX", "%:z"),
        ("Z", "%z"),
        ("EEE", "%a"),
    ];
    let mut out = String::new();
    let mut rest = java;
    'next: while let Some(c) = rest.chars().next() {
        if c == '\'' {
            let inner = &rest[1..];
            let end = inner.find('\'').unwrap_or(inner.len());
            out.push_str(&inner[..end].replace('%', "%%"));
            rest = inner.get(end + 1..).unwrap_or("");
            continue;
        }
        for (from, to) in LETTERS {
            if let Some(after) = rest.strip_prefix(from) {
                out.push_str(to);
                rest = after;
                continue 'next;
            }
        }
        match c {
            '%' => out.push_str("%%"),
            'M' => out.push_str("%-m"),
            'd' => out.push_str("%-d"),
            'H' => out.push_str("%-H"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_patterns_read_as_spark_reads_them() {
        let at = |t: &str, f: &str| seconds(t, &chrono_format(f));
        assert_eq!(
            at("2024-01-05 10:00:00", "yyyy-MM-dd HH:mm:ss"),
            Some(1_704_448_800)
        );
        assert_eq!(at("2024-01-05", "yyyy-MM-dd"), Some(1_704_412_800));
        assert_eq!(
            at("05/01/2024 10:00", "dd/MM/yyyy HH:mm"),
            Some(1_704_448_800)
        );
        assert_eq!(
            at("2024-01-05T10:00:00", "yyyy-MM-dd'T'HH:mm:ss"),
            Some(1_704_448_800)
        );
        assert_eq!(at("nonsense", "yyyy-MM-dd"), None);
    }
}
