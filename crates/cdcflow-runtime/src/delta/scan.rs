//! A table read whole as a stream: its live rows are decoded a run of row groups at a
//! time as the query asks for them (one partition per core's run), so a query that
//! consumes them as they come (a snapshot compared with its target) never holds the
//! table whole, as reading it into memory first would.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::PartitionStream;

use super::read::{Run, plan};
use super::{DataFile, Table};
use crate::RunError;

/// Batches in flight per partition, between its decoding thread and the query.
const IN_FLIGHT: usize = 2;

/// The live rows of `table`'s current version as `schema`, read as the query runs; the
/// rows its files hold (deleted ones included), from their footers.
pub(crate) fn whole(
    table: &Table,
    schema: &SchemaRef,
) -> Result<(Arc<dyn TableProvider>, u64), RunError> {
    let files: Vec<DataFile> = table.files()?;
    let runs = plan(&files)?;
    let rows = runs.iter().map(|r| r.rows as u64).sum();
    if runs.is_empty() {
        let empty = MemTable::try_new(Arc::clone(schema), vec![vec![]])?;
        return Ok((Arc::new(empty), 0));
    }
    let partitions: Vec<Arc<dyn PartitionStream>> = runs
        .into_iter()
        .map(|run| {
            Arc::new(RunStream {
                run: Arc::new(run),
                schema: Arc::clone(schema),
            }) as Arc<dyn PartitionStream>
        })
        .collect();
    Ok((
        Arc::new(StreamingTable::try_new(Arc::clone(schema), partitions)?),
        rows,
    ))
}

/// One run of row groups, decoded on a blocking thread as its stream is read.
struct RunStream {
    run: Arc<Run>,
    schema: SchemaRef,
}

impl fmt::Debug for RunStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStream")
            .field("rows", &self.run.rows)
            .finish()
    }
}

impl PartitionStream for RunStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder =
            RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), IN_FLIGHT);
        let tx = builder.tx();
        let (run, schema) = (Arc::clone(&self.run), Arc::clone(&self.schema));
        builder.spawn_blocking(move || {
            for batch in run.batches(&schema) {
                let failed = batch.is_err();
                let batch = batch.map_err(|e| DataFusionError::External(Box::new(e)));
                // Stop when the query stopped reading, or after an error it is told of.
                if tx.blocking_send(batch).is_err() || failed {
                    break;
                }
            }
            Ok(())
        });
        builder.build()
    }
}
