//! `KeyGroupsExec`: the scan of a large first batch, one partition per group of its keys
//! (`load.rs` decides the groups). Partition `g` reads the source files again and keeps
//! the rows whose key is in group `g`, so no two partitions share a key: the events
//! above it stay in their partitions, and the apply takes one group after another
//! (`apply.rs`), holding one group's rows at a time.
//!
//! A plan over it must not repartition rows between its partitions: the batch's session
//! turns DataFusion's round-robin repartitioning off (`mod.rs`), and the apply checks
//! that it is given as many partitions as there are groups.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::project_schema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

use futures::TryStreamExt;

use super::events::external;
use super::{origin_schema, with_origin};
use crate::cdc::engine::GroupedLoad;

/// A large first batch as a table: its scan is a [`KeyGroupsExec`].
#[derive(Debug)]
pub struct KeyGroupsTable {
    load: Arc<GroupedLoad>,
    /// The source's columns and the origin column ([`origin_schema`]).
    schema: SchemaRef,
}

impl KeyGroupsTable {
    pub fn new(load: GroupedLoad) -> Self {
        let schema = origin_schema(&load.source);
        Self {
            load: Arc::new(load),
            schema,
        }
    }
}

#[async_trait::async_trait]
impl TableProvider for KeyGroupsTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(KeyGroupsExec::new(
            Arc::clone(&self.load),
            projection.cloned(),
        )?))
    }
}

/// The scan of a [`GroupedLoad`]: partition `g` is the source rows whose key is in
/// group `g`, with the origin column, projected to `projection`.
#[derive(Debug)]
pub struct KeyGroupsExec {
    load: Arc<GroupedLoad>,
    /// The source's columns and the origin column, before the projection.
    rows_schema: SchemaRef,
    projection: Option<Vec<usize>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl KeyGroupsExec {
    pub fn new(load: Arc<GroupedLoad>, projection: Option<Vec<usize>>) -> Result<Self> {
        let rows_schema = origin_schema(&load.source);
        let schema = project_schema(&rows_schema, projection.as_ref())?;
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(load.groups()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Self {
            load,
            rows_schema,
            projection,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    pub fn load(&self) -> &Arc<GroupedLoad> {
        &self.load
    }

    pub fn projection(&self) -> Option<&Vec<usize>> {
        self.projection.as_ref()
    }
}

impl DisplayAs for KeyGroupsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "KeyGroupsExec: groups={} by={} files={} rows={}",
            self.load.groups(),
            self.load.grouping_name(),
            self.load.files.len(),
            self.load.rows
        )
    }
}

impl ExecutionPlan for KeyGroupsExec {
    fn name(&self) -> &'static str {
        "KeyGroupsExec"
    }

    leaf!();

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition >= self.load.groups() {
            return Err(DataFusionError::Internal(format!(
                "KeyGroupsExec has {} partitions, not {partition}",
                self.load.groups()
            )));
        }
        let (load, projection) = (Arc::clone(&self.load), self.projection.clone());
        let rows_schema = Arc::clone(&self.rows_schema);
        let schema = self.schema();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let out_schema = Arc::clone(&schema);
        // The group is read when the stream is first polled: the apply polls one
        // partition at a time.
        let rows = futures::stream::once(async move {
            let timer = baseline.elapsed_compute().timer();
            let rows = load.read_group(partition).map_err(external)?;
            let batches = rows
                .into_iter()
                .map(|(origin, b)| {
                    let b = with_origin(&rows_schema, origin, &b).map_err(external)?;
                    match &projection {
                        Some(p) => Ok(b.project(p)?),
                        None => Ok(b),
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            timer.done();
            let n: usize = batches.iter().map(|b| b.num_rows()).sum();
            baseline.record_output(n);
            baseline.done();
            Ok::<_, DataFusionError>(futures::stream::iter(
                batches.into_iter().map(Ok::<_, DataFusionError>),
            ))
        });
        let stream = rows.try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(out_schema, stream)))
    }
}
