//! Spark's `mode(x)`: the most frequent non-null `x` of the group (null when there is
//! none). Where values tie, the least one is taken, so the result does not depend on
//! the order rows arrive in (Spark leaves that choice open).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::cast::{as_int64_array, as_list_array};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

pub(super) fn function() -> Arc<AggregateUDF> {
    Arc::new(AggregateUDF::new_from_impl(Mode {
        signature: Signature::any(1, Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Mode {
    signature: Signature,
}

impl AggregateUDFImpl for Mode {
    fn name(&self) -> &str {
        "mode"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [t] => Ok(t.clone()),
            _ => plan_err!("mode() takes one argument"),
        }
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let [x] = args.expr_fields else {
            return plan_err!("mode() takes one argument");
        };
        Ok(Box::new(ModeAccumulator {
            data_type: x.data_type().clone(),
            counts: HashMap::new(),
        }))
    }

    /// The distinct values seen and how often, as two lists.
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let [x] = args.input_fields else {
            return plan_err!("mode() takes one argument");
        };
        let list = |t: DataType| DataType::List(Arc::new(Field::new_list_field(t, true)));
        Ok(vec![
            Arc::new(Field::new("values", list(x.data_type().clone()), true)),
            Arc::new(Field::new("counts", list(DataType::Int64), true)),
        ])
    }
}

#[derive(Debug)]
struct ModeAccumulator {
    data_type: DataType,
    counts: HashMap<ScalarValue, i64>,
}

impl ModeAccumulator {
    fn add(&mut self, values: &ArrayRef, counts: Option<&Int64Array>) -> Result<()> {
        for row in 0..values.len() {
            if values.is_null(row) {
                continue;
            }
            let n = counts.map_or(1, |c| c.value(row));
            *self
                .counts
                .entry(ScalarValue::try_from_array(values, row)?)
                .or_default() += n;
        }
        Ok(())
    }
}

impl Accumulator for ModeAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        match values {
            [x] => self.add(x, None),
            _ => plan_err!("mode() takes one argument"),
        }
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let [values, counts] = states else {
            return plan_err!("mode(): two state columns expected");
        };
        let (values, counts) = (as_list_array(values)?, as_list_array(counts)?);
        for row in 0..values.len() {
            if values.is_null(row) {
                continue;
            }
            let counts = counts.value(row);
            self.add(&values.value(row), Some(as_int64_array(&counts)?))?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let (values, counts): (Vec<ScalarValue>, Vec<ScalarValue>) = self
            .counts
            .iter()
            .map(|(v, n)| (v.clone(), ScalarValue::Int64(Some(*n))))
            .unzip();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&values, &self.data_type)),
            ScalarValue::List(ScalarValue::new_list_nullable(&counts, &DataType::Int64)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let best = self.counts.iter().max_by(|(a, m), (b, n)| {
            // More often first; between equals, the least value.
            m.cmp(n)
                .then_with(|| b.partial_cmp(a).unwrap_or(std::cmp::Ordering::Equal))
        });
        match best {
            Some((v, _)) => Ok(v.clone()),
            None => ScalarValue::try_from(&self.data_type),
        }
    }

    fn size(&self) -> usize {
        size_of_val(self)
            + self
                .counts
                .keys()
                .map(|k| k.size() + size_of::<i64>())
                .sum::<usize>()
    }
}
