//! Spark's `max_by(x, y)` and `min_by(x, y)`: the `x` of the row with the greatest
//! (least) `y`. Rows whose `y` is null are skipped; with none left the result is null.
//! Between rows of equal `y` the first one met wins, which, as in Spark, depends on the
//! order rows arrive in.

use std::cmp::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

pub(super) fn functions() -> Vec<Arc<AggregateUDF>> {
    [
        By::new("max_by", Ordering::Greater),
        By::new("min_by", Ordering::Less),
    ]
    .into_iter()
    .map(|f| Arc::new(AggregateUDF::new_from_impl(f)))
    .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct By {
    name: &'static str,
    /// How a `y` compares with the best so far to replace it.
    wins: Ordering,
    signature: Signature,
}

impl By {
    fn new(name: &'static str, wins: Ordering) -> Self {
        Self {
            name,
            wins,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for By {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(t) => Ok(t.clone()),
            None => plan_err!("{}() takes two arguments", self.name),
        }
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let [x, y] = args.expr_fields else {
            return plan_err!("{}() takes two arguments", self.name);
        };
        Ok(Box::new(ByAccumulator {
            wins: self.wins,
            value: ScalarValue::try_from(x.data_type())?,
            by: ScalarValue::try_from(y.data_type())?,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let [x, y] = args.input_fields else {
            return plan_err!("{}() takes two arguments", self.name);
        };
        Ok(vec![
            Arc::new(Field::new(
                format!("{}_value", args.name),
                x.data_type().clone(),
                true,
            )),
            Arc::new(Field::new(
                format!("{}_by", args.name),
                y.data_type().clone(),
                true,
            )),
        ])
    }
}

#[derive(Debug)]
struct ByAccumulator {
    wins: Ordering,
    /// The `x` of the best row so far (null before any).
    value: ScalarValue,
    /// Its `y`: null until a row with a `y` is met.
    by: ScalarValue,
}

impl Accumulator for ByAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let [x, y] = values else {
            return plan_err!("two arguments expected");
        };
        for row in 0..y.len() {
            if y.is_null(row) {
                continue;
            }
            let by = ScalarValue::try_from_array(y, row)?;
            if self.by.is_null() || by.partial_cmp(&self.by) == Some(self.wins) {
                self.value = ScalarValue::try_from_array(x, row)?;
                self.by = by;
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.value.clone(), self.by.clone()])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.value.size() + self.by.size()
    }
}
