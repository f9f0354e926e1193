//! Spark's calendar fields of a date or timestamp: `year`, `month`, `day`
//! (`dayofmonth`), `quarter`, `dayofweek` (1 = Sunday … 7 = Saturday, as Spark counts),
//! `weekofyear` (ISO week), `dayofyear`. Each is an `INT`, null for null. A string is
//! read as a timestamp first, as Spark casts it. (`hour`, `minute`, `second` are
//! `datafusion-spark`'s.)

use std::sync::Arc;

use datafusion::arrow::array::Int32Array;
use datafusion::arrow::compute::kernels::numeric::add;
use datafusion::arrow::compute::{DatePart, date_part};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    [
        "year",
        "month",
        "day",
        "dayofmonth",
        "quarter",
        "dayofweek",
        "weekofyear",
        "dayofyear",
    ]
    .into_iter()
    .map(|name| Arc::new(ScalarUDF::new_from_impl(Field::new(name))))
    .collect()
}

/// The field `name` takes (arrow's `DatePart` has no `Hash` to keep it in the UDF).
fn part(name: &str) -> DatePart {
    match name {
        "year" => DatePart::Year,
        "month" => DatePart::Month,
        "quarter" => DatePart::Quarter,
        "dayofweek" => DatePart::DayOfWeekSunday0,
        "weekofyear" => DatePart::WeekISO,
        "dayofyear" => DatePart::DayOfYear,
        _ => DatePart::Day,
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Field {
    name: &'static str,
    signature: Signature,
}

impl Field {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Field {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let [arg] = args else {
            return datafusion::common::plan_err!("{}() takes one argument", self.name);
        };
        match arg {
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => Ok(vec![arg.clone()]),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
                Ok(vec![DataType::Timestamp(TimeUnit::Microsecond, None)])
            }
            other => datafusion::common::plan_err!(
                "{}() takes a DATE, TIMESTAMP or STRING, not {other}",
                self.name
            ),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return exec_err!("{}() takes one argument", self.name);
        };
        let rows = args.number_rows;
        let array = value.to_array(rows)?;
        let part = part(self.name);
        let mut field = date_part(array.as_ref(), part)?;
        if part == DatePart::DayOfWeekSunday0 {
            field = add(&field, &Int32Array::new_scalar(1))?;
        }
        super::columnar(field, &args.args)
    }
}
