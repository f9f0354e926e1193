//! Spark's `isnull(x)` and `isnotnull(x)`: `x IS NULL` and `x IS NOT NULL` as calls.
//! The optimizer plans each as that predicate; unoptimized (an expectation), the call
//! computes the same.

use std::sync::Arc;

use datafusion::arrow::compute::{is_not_null, is_null};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    [
        NullTest::new("isnull", true),
        NullTest::new("isnotnull", false),
    ]
    .into_iter()
    .map(|f| Arc::new(ScalarUDF::new_from_impl(f)))
    .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct NullTest {
    name: &'static str,
    /// `true` for `isnull`.
    null: bool,
    signature: Signature,
}

impl NullTest {
    fn new(name: &'static str, null: bool) -> Self {
        Self {
            name,
            null,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for NullTest {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn return_field_from_args(
        &self,
        _args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        // Never null, as `x IS NULL` is not.
        Ok(Arc::new(datafusion::arrow::datatypes::Field::new(
            self.name,
            DataType::Boolean,
            false,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return exec_err!("{}() takes one argument", self.name);
        };
        Ok(match value {
            ColumnarValue::Scalar(s) => {
                ColumnarValue::Scalar(ScalarValue::Boolean(Some(s.is_null() == self.null)))
            }
            ColumnarValue::Array(a) => ColumnarValue::Array(Arc::new(match self.null {
                true => is_null(a.as_ref())?,
                false => is_not_null(a.as_ref())?,
            })),
        })
    }

    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let Ok([value]) = <[Expr; 1]>::try_from(args) else {
            return plan_err!("{}() takes one argument", self.name);
        };
        Ok(ExprSimplifyResult::Simplified(match self.null {
            true => value.is_null(),
            false => value.is_not_null(),
        }))
    }
}
