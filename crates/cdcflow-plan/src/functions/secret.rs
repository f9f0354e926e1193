//! `secret(scope, key)`: Databricks reads a secret scope; cdcflow, which runs on one
//! machine, reads the environment variable `CDCFLOW_SECRET_<SCOPE>_<KEY>` (upper case,
//! each character other than a letter or digit as `_`), so `secret('crm', 'api-key')`
//! is `$CDCFLOW_SECRET_CRM_API_KEY`. Read when the query runs, never when it is planned,
//! so `validate` and `explain` need no secrets and print none; a variable that is not
//! set fails the flow naming it.

use std::sync::Arc;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::cast::as_string_array;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::{columnar, string_args};

pub(super) fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(Secret {
        signature: Signature::user_defined(Volatility::Stable),
    }))
}

/// The environment variable `secret(scope, key)` reads.
pub fn variable(scope: &str, key: &str) -> String {
    let part = |s: &str| -> String {
        s.chars()
            .map(|c| match c.is_ascii_alphanumeric() {
                true => c.to_ascii_uppercase(),
                false => '_',
            })
            .collect()
    };
    format!("CDCFLOW_SECRET_{}_{}", part(scope), part(key))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Secret {
    signature: Signature,
}

impl ScalarUDFImpl for Secret {
    fn name(&self) -> &str {
        "secret"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        string_args(self.name(), args, 2)
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (scope, key) = (as_string_array(&arrays[0])?, as_string_array(&arrays[1])?);
        let mut out = Vec::with_capacity(args.number_rows);
        for i in 0..args.number_rows {
            if scope.is_null(i) || key.is_null(i) {
                out.push(None);
                continue;
            }
            let name = variable(scope.value(i), key.value(i));
            match std::env::var(&name) {
                Ok(v) => out.push(Some(v)),
                Err(_) => {
                    return exec_err!(
                        "secret('{}', '{}'): the environment variable {name} is not set",
                        scope.value(i),
                        key.value(i)
                    );
                }
            }
        }
        columnar(Arc::new(StringArray::from(out)), &args.args)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn variable_names() {
        assert_eq!(
            super::variable("crm", "api-key"),
            "CDCFLOW_SECRET_CRM_API_KEY"
        );
    }
}
