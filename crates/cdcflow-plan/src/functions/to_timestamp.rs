//! Spark's `to_timestamp(x[, format])`: a `TIMESTAMP` (microseconds, UTC, the session's
//! zone), where DataFusion's gives nanoseconds without a zone. A string is read as a
//! timestamp, or with `format` (a Java pattern, as Spark takes); null when it does not
//! read. A date or timestamp is cast.

use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime};
use datafusion::arrow::array::{Array, ArrayRef, TimestampMicrosecondArray};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::cast::as_string_array;
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub(super) fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(ToTimestamp {
        signature: Signature::user_defined(Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToTimestamp {
    signature: Signature,
}

fn timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

impl ScalarUDFImpl for ToTimestamp {
    fn name(&self) -> &str {
        "to_timestamp"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [DataType::Date32 | DataType::Date64 | DataType::Timestamp(..)] => Ok(args.to_vec()),
            [_] => Ok(vec![DataType::Utf8]),
            [_, _] => Ok(vec![DataType::Utf8, DataType::Utf8]),
            _ => plan_err!("to_timestamp() takes 1 or 2 arguments, not {}", args.len()),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(timestamp())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let safe = CastOptions {
            safe: true,
            ..CastOptions::default()
        };
        let out: ArrayRef = match args.args.as_slice() {
            [v] => cast_with_options(&v.to_array(rows)?, &timestamp(), &safe)?,
            [v, format] => parse(&v.to_array(rows)?, &format.to_array(rows)?)?,
            _ => return exec_err!("to_timestamp() takes 1 or 2 arguments"),
        };
        super::columnar(out, &args.args)
    }
}

fn parse(text: &ArrayRef, format: &ArrayRef) -> Result<ArrayRef> {
    let text = as_string_array(text)?;
    let format = as_string_array(format)?;
    let out: TimestampMicrosecondArray = (0..text.len())
        .map(|i| {
            if text.is_null(i) || format.is_null(i) {
                return None;
            }
            let pattern = super::unix_timestamp::chrono_format(format.value(i));
            let t = text.value(i).trim();
            NaiveDateTime::parse_from_str(t, &pattern)
                .ok()
                .or_else(|| {
                    NaiveDate::parse_from_str(t, &pattern)
                        .ok()
                        .and_then(|d| d.and_hms_opt(0, 0, 0))
                })
                .map(|t| t.and_utc().timestamp_micros())
        })
        .collect();
    Ok(Arc::new(out.with_timezone("UTC")))
}
