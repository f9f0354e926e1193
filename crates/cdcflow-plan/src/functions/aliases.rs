//! Spark's names for functions DataFusion has under another name: `first` is
//! `first_value`, `percentile_approx` is `approx_percentile_cont` (Spark's third
//! argument, the accuracy, is taken as the number of centroids), `sequence` is
//! `generate_series` (both include the stop value).

use std::sync::Arc;

use datafusion::functions_aggregate::approx_percentile_cont::approx_percentile_cont_udaf;
use datafusion::functions_aggregate::average::avg_udaf;
use datafusion::functions_aggregate::first_last::first_value_udaf;
use datafusion::functions_nested::range::gen_series_udf;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};

pub(super) fn scalar() -> Vec<Arc<ScalarUDF>> {
    vec![Arc::new(
        gen_series_udf().as_ref().clone().with_aliases(["sequence"]),
    )]
}

pub(super) fn aggregate() -> Vec<Arc<AggregateUDF>> {
    vec![
        // `datafusion-spark`'s avg computes in DOUBLE whatever its input; Spark averages
        // a DECIMAL exactly, as DECIMAL(p + 4, s + 4) rounded half up, and so does
        // DataFusion's own (integers and floats average in DOUBLE in both).
        avg_udaf(),
        Arc::new(first_value_udaf().as_ref().clone().with_aliases(["first"])),
        Arc::new(
            approx_percentile_cont_udaf()
                .as_ref()
                .clone()
                .with_aliases(["percentile_approx"]),
        ),
    ]
}
