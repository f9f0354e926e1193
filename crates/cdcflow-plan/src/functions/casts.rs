//! Spark's cast functions: `date(x)` is `CAST(x AS DATE)`, `bigint(x)` is
//! `CAST(x AS BIGINT)`, … The optimizer turns each call into that very cast (so plans
//! and results are the cast's); a call evaluated unoptimized (an expectation) casts the
//! same way. `date` of a string takes its date part, as Spark does
//! (`date('2024-01-05 10:00:00')` is 2024-01-05), by reading it as a timestamp first.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, cast,
};

/// `(function, type)` of each cast function.
fn casts() -> Vec<(&'static str, DataType)> {
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    vec![
        ("date", DataType::Date32),
        ("timestamp", timestamp),
        ("bigint", DataType::Int64),
        ("int", DataType::Int32),
        ("smallint", DataType::Int16),
        ("tinyint", DataType::Int8),
        ("double", DataType::Float64),
        ("float", DataType::Float32),
        ("boolean", DataType::Boolean),
        ("string", DataType::Utf8),
        ("binary", DataType::Binary),
    ]
}

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    casts()
        .into_iter()
        .map(|(name, to)| Arc::new(ScalarUDF::new_from_impl(CastFunction::new(name, to))))
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CastFunction {
    name: &'static str,
    to: DataType,
    signature: Signature,
}

impl CastFunction {
    fn new(name: &'static str, to: DataType) -> Self {
        Self {
            name,
            to,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }

    /// A string going to a date goes through a timestamp, which may carry a time.
    fn via_timestamp(&self, from: &DataType) -> bool {
        self.to == DataType::Date32
            && matches!(
                from,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
    }
}

impl ScalarUDFImpl for CastFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return exec_err!("{}() takes one argument", self.name);
        };
        let value = match self.via_timestamp(&value.data_type()) {
            true => value.cast_to(&DataType::Timestamp(TimeUnit::Microsecond, None), None)?,
            false => value.clone(),
        };
        value.cast_to(&self.to, None)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let Ok([value]) = <[Expr; 1]>::try_from(args) else {
            return plan_err!("{}() takes one argument", self.name);
        };
        let from = info.get_data_type(&value)?;
        let value = match self.via_timestamp(&from) {
            true => cast(value, DataType::Timestamp(TimeUnit::Microsecond, None)),
            false => value,
        };
        Ok(ExprSimplifyResult::Simplified(cast(value, self.to.clone())))
    }
}
