//! `datafusion-spark` functions whose signatures take fewer types than Spark's implicit
//! casts do: `date_add(d, 1)` (the literal is a BIGINT here), `date_sub` and
//! `add_months` take a `DATE` and an `INT` only. Each is wrapped to cast its arguments as Spark would (a
//! timestamp or string to its date, any integer to `INT`) and then run unchanged.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    [
        datafusion_spark::function::datetime::date_add(),
        datafusion_spark::function::datetime::date_sub(),
        datafusion_spark::function::datetime::add_months(),
    ]
    .into_iter()
    .map(|inner| Arc::new(ScalarUDF::new_from_impl(DateAndDays::new(inner))))
    .collect()
}

/// A function of a `DATE` and a number of days or months.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DateAndDays {
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

impl DateAndDays {
    fn new(inner: Arc<ScalarUDF>) -> Self {
        Self {
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for DateAndDays {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let [date, days] = args else {
            return plan_err!("{}() takes two arguments", self.name());
        };
        if !(days.is_integer() || days.is_null()) {
            return plan_err!(
                "{}(): the number of days or months must be an integer, not {days}",
                self.name()
            );
        }
        match date {
            DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(..)
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Null => Ok(vec![DataType::Date32, DataType::Int32]),
            other => plan_err!("{}() takes a DATE, not {other}", self.name()),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Date32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
}
