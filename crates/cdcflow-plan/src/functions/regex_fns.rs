//! Spark's regular-expression functions that DataFusion lacks: `split(str, regex
//! [, limit])` (an array of strings; `limit > 0` keeps at most that many parts, the last
//! holding the rest; trailing empty parts are kept, as Spark keeps them) and
//! `regexp_extract(str, regex [, group])` (the group of the first match, 1 by default;
//! `''` when nothing matches, as Spark gives). Patterns are Rust's `regex` syntax, which
//! agrees with Java's for the common classes, groups and quantifiers; look-around and
//! back-references are refused with the pattern's error.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, ListBuilder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::cast::{as_int64_array, as_string_array};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use regex::Regex;

pub(super) fn functions() -> Vec<Arc<ScalarUDF>> {
    [RegexFn::new("split"), RegexFn::new("regexp_extract")]
        .into_iter()
        .map(|f| Arc::new(ScalarUDF::new_from_impl(f)))
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct RegexFn {
    name: &'static str,
    signature: Signature,
}

impl RegexFn {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    fn is_split(&self) -> bool {
        self.name == "split"
    }
}

impl ScalarUDFImpl for RegexFn {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args.len() {
            2 => Ok(vec![DataType::Utf8, DataType::Utf8]),
            3 => Ok(vec![DataType::Utf8, DataType::Utf8, DataType::Int64]),
            n => plan_err!("{}() takes 2 or 3 arguments, not {n}", self.name),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(match self.is_split() {
            true => DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            false => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let text = as_string_array(&arrays[0])?;
        let pattern = as_string_array(&arrays[1])?;
        let third: Option<&Int64Array> = arrays.get(2).map(|a| as_int64_array(a)).transpose()?;
        // A pattern is most often one literal: compile it once.
        let constant = match &args.args[1] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(p))) => Some(compile(self.name, p)?),
            _ => None,
        };
        let regex_at = |i: usize| -> Result<Regex> {
            match &constant {
                Some(r) => Ok(r.clone()),
                None => compile(self.name, pattern.value(i)),
            }
        };
        let null_at =
            |i: usize| text.is_null(i) || pattern.is_null(i) || third.is_some_and(|t| t.is_null(i));
        let out: ArrayRef = match self.is_split() {
            true => {
                let mut list = ListBuilder::new(StringBuilder::new());
                for i in 0..rows {
                    if null_at(i) {
                        list.append_null();
                        continue;
                    }
                    let limit = third.map_or(-1, |t| t.value(i));
                    let re = regex_at(i)?;
                    let parts: Vec<&str> = match usize::try_from(limit) {
                        Ok(n) if n > 0 => re.splitn(text.value(i), n).collect(),
                        _ => re.split(text.value(i)).collect(),
                    };
                    for p in parts {
                        list.values().append_value(p);
                    }
                    list.append(true);
                }
                Arc::new(list.finish())
            }
            false => {
                let mut out = StringBuilder::new();
                for i in 0..rows {
                    if null_at(i) {
                        out.append_null();
                        continue;
                    }
                    let group = third.map_or(1, |t| t.value(i));
                    let re = regex_at(i)?;
                    let Ok(group) = usize::try_from(group) else {
                        return exec_err!("regexp_extract(): group {group} is negative");
                    };
                    if group >= re.captures_len() {
                        return exec_err!(
                            "regexp_extract(): the pattern has {} group(s), not {group}",
                            re.captures_len() - 1
                        );
                    }
                    let found = re
                        .captures(text.value(i))
                        .and_then(|c| c.get(group))
                        .map_or("", |m| m.as_str());
                    out.append_value(found);
                }
                Arc::new(out.finish())
            }
        };
        super::columnar(out, &args.args)
    }
}

fn compile(function: &str, pattern: &str) -> Result<Regex> {
    Regex::new(pattern).or_else(|e| exec_err!("{function}(): bad pattern `{pattern}`: {e}"))
}
