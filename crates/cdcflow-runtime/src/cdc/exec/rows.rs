//! `SourceRowsExec`: the scan of a batch's source rows, read before the plan ran (the
//! files a streaming source appended, a view's rows). It hands them over once and keeps
//! nothing: the events share the buffers of the columns they pass through, and the
//! columns they drop are let go as each part goes by. (A `MemTable` would keep every
//! source row until the apply had committed: one more copy of the batch, 59 MiB at 1e6
//! events of the cost benchmark, docs/benchmarks.md.) A batch's plan runs once.

use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Statistics, project_schema};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::common::compute_record_batch_statistics;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

use super::plan_properties;

/// Rows taken by whoever reads them first.
type Once = Mutex<Option<Vec<RecordBatch>>>;

fn take(rows: &Once) -> Option<Vec<RecordBatch>> {
    match rows.lock() {
        Ok(mut r) => r.take(),
        Err(_) => None,
    }
}

/// A batch's source rows as a table (with the origin column): its scan takes them.
#[derive(Debug)]
pub struct SourceRowsTable {
    schema: SchemaRef,
    rows: Once,
}

impl SourceRowsTable {
    pub fn new(schema: SchemaRef, rows: Vec<RecordBatch>) -> Self {
        Self {
            schema,
            rows: Mutex::new(Some(rows)),
        }
    }
}

#[async_trait::async_trait]
impl TableProvider for SourceRowsTable {
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
        let rows = take(&self.rows).ok_or_else(|| {
            DataFusionError::Internal("a batch's source rows are planned once".into())
        })?;
        Ok(Arc::new(SourceRowsExec::new(
            Arc::clone(&self.schema),
            rows,
            projection.cloned(),
        )?))
    }
}

/// The scan of a batch's source rows: one partition, the rows given once.
#[derive(Debug)]
pub struct SourceRowsExec {
    /// The rows' schema, before the projection.
    rows_schema: SchemaRef,
    rows: Once,
    projection: Option<Vec<usize>>,
    /// As a `MemTable` gives them, so that DataFusion plans the rows alike.
    statistics: Arc<Statistics>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl SourceRowsExec {
    pub fn new(
        rows_schema: SchemaRef,
        rows: Vec<RecordBatch>,
        projection: Option<Vec<usize>>,
    ) -> Result<Self> {
        let schema = project_schema(&rows_schema, projection.as_ref())?;
        let statistics = compute_record_batch_statistics(
            std::slice::from_ref(&rows),
            &rows_schema,
            projection.clone(),
        );
        Ok(Self {
            rows_schema,
            rows: Mutex::new(Some(rows)),
            projection,
            statistics: Arc::new(statistics),
            properties: plan_properties(
                schema,
                Partitioning::UnknownPartitioning(1),
                EmissionType::Incremental,
            ),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The rows' schema before the projection.
    pub fn rows_schema(&self) -> &SchemaRef {
        &self.rows_schema
    }

    pub fn projection(&self) -> Option<&Vec<usize>> {
        self.projection.as_ref()
    }

    /// A copy of the rows not read yet (for the codec); `None` once read.
    pub fn unread(&self) -> Option<Vec<RecordBatch>> {
        match self.rows.lock() {
            Ok(r) => r.clone(),
            Err(_) => None,
        }
    }
}

impl DisplayAs for SourceRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let rows = self.statistics.num_rows.get_value().copied().unwrap_or(0);
        write!(f, "SourceRowsExec: rows={rows}")
    }
}

impl ExecutionPlan for SourceRowsExec {
    fn name(&self) -> &'static str {
        "SourceRowsExec"
    }

    leaf!();

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        super::only_partition(self.name(), partition)?;
        let rows = take(&self.rows).ok_or_else(|| {
            DataFusionError::Internal("a batch's source rows are read once".into())
        })?;
        let projection = self.projection.clone();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let parts = rows.into_iter().map(move |b| {
            let b = match &projection {
                Some(p) => b.project(p)?,
                None => b,
            };
            baseline.record_output(b.num_rows());
            Ok::<_, DataFusionError>(b)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            futures::stream::iter(parts),
        )))
    }

    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        match partition {
            None | Some(0) => Ok(Arc::clone(&self.statistics)),
            Some(_) => Ok(Arc::new(Statistics::new_unknown(&self.schema()))),
        }
    }
}
