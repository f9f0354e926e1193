//! JSON held as text: `get_json_object(json, '$.a.b[0]')`, `parse_json(s)` and
//! `try_parse_json(s)`. cdcflow has no VARIANT type: a variant is its JSON text, so
//! `parse_json` checks and normalises the text (an error on text that is not JSON;
//! `try_parse_json` gives null instead) and `v:field` (`operators`) reads it as
//! `get_json_object` does. A path step is `.name`, `['name']` or `[index]`; a missing
//! field, an index out of range, a JSON null or text that is not JSON give null; a
//! string is returned without its quotes, anything else as JSON text (Spark's rules).

use std::sync::Arc;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::cast::as_string_array;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use serde_json::Value;

use super::{columnar, string_args};

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        get_json_object(),
        Arc::new(ScalarUDF::new_from_impl(ParseJson::new(
            "parse_json",
            false,
        ))),
        Arc::new(ScalarUDF::new_from_impl(ParseJson::new(
            "try_parse_json",
            true,
        ))),
    ]
}

/// The `get_json_object` function (also what `v:field` plans to).
pub(super) fn get_json_object() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(GetJsonObject {
        signature: Signature::user_defined(Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct GetJsonObject {
    signature: Signature,
}

impl ScalarUDFImpl for GetJsonObject {
    fn name(&self) -> &str {
        "get_json_object"
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
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [json, path] = arrays.as_slice() else {
            return exec_err!("get_json_object() takes two arguments");
        };
        let (json, path) = (as_string_array(json)?, as_string_array(path)?);
        // A path is most often one literal: parse it once.
        let constant = match &args.args[1] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(p))) => Some(parse_path(p)),
            _ => None,
        };
        let out: StringArray = (0..rows)
            .map(|i| {
                if json.is_null(i) || path.is_null(i) {
                    return None;
                }
                let steps = match &constant {
                    Some(steps) => steps.clone(),
                    None => parse_path(path.value(i)),
                }?;
                extract(json.value(i), &steps)
            })
            .collect();
        columnar(Arc::new(out), &args.args)
    }
}

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    Field(String),
    Index(usize),
}

/// The steps of `$.a['b'][0]`; `None` for a path Spark would not take either.
pub(super) fn parse_path(path: &str) -> Option<Vec<Step>> {
    let mut rest = path.trim().strip_prefix('$')?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return None;
            }
            steps.push(Step::Field(after[..end].to_string()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("['") {
            let end = after.find("']")?;
            steps.push(Step::Field(after[..end].to_string()));
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            steps.push(Step::Index(after[..end].trim().parse().ok()?));
            rest = &after[end + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

/// The value at `steps` in `json`, as Spark returns it.
fn extract(json: &str, steps: &[Step]) -> Option<String> {
    let root: Value = serde_json::from_str(json).ok()?;
    let mut at = &root;
    for step in steps {
        at = match (step, at) {
            (Step::Field(name), Value::Object(map)) => map.get(name)?,
            (Step::Index(i), Value::Array(items)) => items.get(*i)?,
            _ => return None,
        };
    }
    match at {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ParseJson {
    name: &'static str,
    /// `try_parse_json`: null instead of an error.
    lenient: bool,
    signature: Signature,
}

impl ParseJson {
    fn new(name: &'static str, lenient: bool) -> Self {
        Self {
            name,
            lenient,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ParseJson {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        string_args(self.name, args, 1)
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [text] = arrays.as_slice() else {
            return exec_err!("{}() takes one argument", self.name);
        };
        let text = as_string_array(text)?;
        let mut out = Vec::with_capacity(text.len());
        for i in 0..text.len() {
            if text.is_null(i) {
                out.push(None);
                continue;
            }
            match serde_json::from_str::<Value>(text.value(i)) {
                Ok(v) => out.push(Some(v.to_string())),
                Err(_) if self.lenient => out.push(None),
                Err(e) => {
                    return exec_err!("{}(): not JSON: {e}: {}", self.name, text.value(i));
                }
            }
        }
        columnar(
            Arc::new(out.into_iter().collect::<StringArray>()),
            &args.args,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_as_spark_reads_them() {
        let json = r#"{"a": {"b": [10, {"c": "x"}]}, "s": "text", "n": null}"#;
        let get = |p: &str| extract(json, &parse_path(p)?);
        assert_eq!(get("$.a.b[0]").as_deref(), Some("10"));
        assert_eq!(get("$.a.b[1].c").as_deref(), Some("x"));
        assert_eq!(get("$['a']['b'][1]").as_deref(), Some(r#"{"c":"x"}"#));
        assert_eq!(get("$.s").as_deref(), Some("text"));
        assert_eq!(get("$.n"), None);
        assert_eq!(get("$.missing"), None);
        assert_eq!(get("a.b"), None);
        assert_eq!(extract("not json", &[]), None);
    }
}
