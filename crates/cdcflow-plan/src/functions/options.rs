//! A function's options argument: Spark's `map('key', 'value', …)` of strings (a NULL
//! map, or none, is no option), read when the call runs, where DataFusion has folded
//! the `map(…)` call into a value.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, MapArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::ColumnarValue;

/// The `(key, value)` pairs of `function`'s options argument, in the order written.
pub(super) fn entries(
    function: &str,
    arg: Option<&ColumnarValue>,
) -> Result<Vec<(String, Option<String>)>> {
    let map = match arg {
        None => return Ok(vec![]),
        Some(ColumnarValue::Scalar(ScalarValue::Map(m))) => Arc::clone(m) as Arc<dyn Array>,
        Some(ColumnarValue::Scalar(s)) if s.is_null() => return Ok(vec![]),
        Some(ColumnarValue::Array(a)) => Arc::clone(a),
        Some(ColumnarValue::Scalar(other)) => {
            return exec_err!(
                "{function}() takes its options as map('mode', '…', …), not {}",
                other.data_type()
            );
        }
    };
    let Some(map) = map.as_any().downcast_ref::<MapArray>() else {
        return exec_err!("{function}() takes its options as map('mode', '…', …)");
    };
    if map.is_empty() || map.is_null(0) {
        return Ok(vec![]);
    }
    let pairs = map.value(0);
    let keys = cast(pairs.column(0), &DataType::Utf8)?;
    let values = cast(pairs.column(1), &DataType::Utf8)?;
    let (keys, values) = (keys.as_string::<i32>(), values.as_string::<i32>());
    Ok((0..keys.len())
        .map(|i| {
            (
                keys.value(i).to_string(),
                values.is_valid(i).then(|| values.value(i).to_string()),
            )
        })
        .collect())
}
