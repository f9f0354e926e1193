//! `datafusion-spark` functions whose signatures take fewer types than Spark's implicit
//! casts do: `date_add(d, 1)` (the literal is a BIGINT here), `date_sub` and
//! `add_months` take a `DATE` and an `INT` only; `hour`, `minute` and `second` a
//! `TIMESTAMP` only. Each is wrapped to cast its arguments as Spark would (a timestamp
//! or string to its date, any integer to `INT`, a date or string to a timestamp) and
//! then run unchanged.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef, TimeUnit};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion_spark::function::datetime;

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    let date_and_count = [
        datetime::date_add(),
        datetime::date_sub(),
        datetime::add_months(),
    ]
    .map(|inner| Coerced::new(inner, Coercion::DateAndCount));
    let timestamp = [datetime::hour(), datetime::minute(), datetime::second()]
        .map(|inner| Coerced::new(inner, Coercion::Timestamp));
    date_and_count
        .into_iter()
        .chain(timestamp)
        .map(|f| Arc::new(ScalarUDF::new_from_impl(f)))
        .collect()
}

/// How a function's arguments are cast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Coercion {
    /// [`date_and_count`]
    DateAndCount,
    /// [`timestamp`]
    Timestamp,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Coerced {
    inner: Arc<ScalarUDF>,
    coercion: Coercion,
    signature: Signature,
}

impl Coerced {
    fn new(inner: Arc<ScalarUDF>, coercion: Coercion) -> Self {
        Self {
            inner,
            coercion,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

fn is_text_or_null(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

/// A `DATE` (from a date, timestamp or string) and an `INT` count.
fn date_and_count(name: &str, args: &[DataType]) -> Result<Vec<DataType>> {
    let [date, count] = args else {
        return plan_err!("{name}() takes two arguments");
    };
    if !(count.is_integer() || count.is_null()) {
        return plan_err!("{name}(): the count must be an integer, not {count}");
    }
    match date {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => {}
        t if is_text_or_null(t) => {}
        other => return plan_err!("{name}() takes a DATE, not {other}"),
    }
    Ok(vec![DataType::Date32, DataType::Int32])
}

/// One `TIMESTAMP` (from a timestamp, date or string); a timestamp keeps its zone.
fn timestamp(name: &str, args: &[DataType]) -> Result<Vec<DataType>> {
    match args {
        [t @ DataType::Timestamp(..)] => Ok(vec![t.clone()]),
        [DataType::Date32 | DataType::Date64] => {
            Ok(vec![DataType::Timestamp(TimeUnit::Microsecond, None)])
        }
        [t] if is_text_or_null(t) => Ok(vec![DataType::Timestamp(TimeUnit::Microsecond, None)]),
        [other] => plan_err!("{name}() takes a TIMESTAMP, not {other}"),
        _ => plan_err!("{name}() takes one argument"),
    }
}

impl ScalarUDFImpl for Coerced {
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
        match self.coercion {
            Coercion::DateAndCount => date_and_count(self.name(), args),
            Coercion::Timestamp => timestamp(self.name(), args),
        }
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    // Some of the wrapped functions answer only this (their nullability follows the
    // arguments').
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
}
