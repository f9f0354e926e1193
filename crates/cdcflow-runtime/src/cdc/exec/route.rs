//! `AutoCdcRouteExec`: each event with [`ROUTE`], the value that sends it to its key's
//! slice (`cdc/slice.rs`) through DataFusion's hash repartitioning. A distributed
//! engine only moves rows by DataFusion's own hash of a column, not by a function of
//! cdcflow's, so the column holds, per slice, a value that DataFusion's hash sends to
//! that slice's partition: found at planning by asking DataFusion's partitioner
//! ([`routes`]), carried in the plan, and checked by the apply of each slice.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, Time};
use datafusion::physical_plan::repartition::BatchPartitioner;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;

use super::{Parts, plan_properties};
use crate::cdc::slice::{Slice, buckets};

/// The column an event's slice is routed by, dropped by the apply.
pub const ROUTE: &str = "_cdc_route";

/// Per slice of `slices`, the smallest value of [`ROUTE`] that DataFusion's hash
/// repartitioning into `slices` partitions sends to that slice's partition.
pub fn routes(slices: usize) -> Result<Vec<u32>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        ROUTE,
        DataType::UInt32,
        false,
    )]));
    let mut out: Vec<Option<u32>> = vec![None; slices];
    let mut partitioner = BatchPartitioner::new_hash_partitioner(
        vec![Arc::new(Column::new(ROUTE, 0))],
        slices,
        Time::new(),
    )?;
    // Tried a block at a time: a few thousand values find every partition of any
    // sensible slice count.
    for start in (0..1_u32 << 20).step_by(4096) {
        let values = UInt32Array::from_iter_values(start..start + 4096);
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(values)])?;
        for part in partitioner.partition_iter(batch)? {
            let (partition, rows) = part?;
            let first = rows
                .column(0)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .and_then(|v| v.values().first().copied());
            if let (Some(slot), Some(v)) = (out.get_mut(partition), first)
                && slot.is_none()
            {
                *slot = Some(v);
            }
        }
        if out.iter().all(Option::is_some) {
            return Ok(out.into_iter().flatten().collect());
        }
    }
    Err(DataFusionError::Internal(format!(
        "no route value reaches every one of {slices} partitions"
    )))
}

/// The execution plan that adds [`ROUTE`] to a batch's events.
#[derive(Debug)]
pub struct AutoCdcRouteExec {
    input: Arc<dyn ExecutionPlan>,
    /// The events' key columns, by index.
    keys: Vec<usize>,
    /// Per slice, its route value ([`routes`]).
    routes: Arc<Vec<u32>>,
    /// The batch's events, whole.
    parts: Parts,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl AutoCdcRouteExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, keys: Vec<usize>, routes: Vec<u32>) -> Self {
        let schema = routed_schema(&input.schema());
        Self {
            properties: plan_properties(
                Arc::clone(&schema),
                input.output_partitioning().clone(),
                EmissionType::Incremental,
            ),
            input,
            keys,
            routes: Arc::new(routes),
            parts: Parts::One,
            schema,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn keys(&self) -> &[usize] {
        &self.keys
    }

    pub fn routes(&self) -> &[u32] {
        &self.routes
    }
}

/// `events` with [`ROUTE`] last.
pub fn routed_schema(events: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = events.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(ROUTE, DataType::UInt32, false));
    Arc::new(Schema::new(fields))
}

/// A batch of events with its rows' route values.
fn routed(
    batch: &RecordBatch,
    keys: &[usize],
    routes: &[u32],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = keys.iter().map(|&k| Arc::clone(batch.column(k))).collect();
    let count = routes.len();
    let values: UInt32Array = buckets(&columns)?
        .into_iter()
        .map(|b| routes.get(Slice::of_bucket(b, count)).copied().unwrap_or(0))
        .collect::<Vec<u32>>()
        .into();
    let mut out = batch.columns().to_vec();
    out.push(Arc::new(values));
    Ok(RecordBatch::try_new(Arc::clone(schema), out)?)
}

impl DisplayAs for AutoCdcRouteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "AutoCdcRouteExec: slices={}", self.routes.len())
    }
}

impl ExecutionPlan for AutoCdcRouteExec {
    one_input!();

    fn name(&self) -> &'static str {
        "AutoCdcRouteExec"
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = super::only_child(self.name(), children)?;
        Ok(Arc::new(Self::new(
            input,
            self.keys.clone(),
            self.routes.to_vec(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let (keys, routes, schema) = (
            self.keys.clone(),
            Arc::clone(&self.routes),
            Arc::clone(&self.schema),
        );
        let out = Arc::clone(&self.schema);
        let stream = input.map(move |batch| routed(&batch?, &keys, &routes, &schema));
        Ok(Box::pin(RecordBatchStreamAdapter::new(out, stream)))
    }
}
