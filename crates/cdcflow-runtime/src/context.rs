//! What every flow of a run shares: the pipeline, its storage, the session, the run's
//! clock and the outside sources. Owned, since each flow runs as a task of its own.

use std::sync::Arc;

use cdcflow_plan::location::Location;
use cdcflow_plan::{Flow, Pipeline};
use datafusion::prelude::SessionContext;

use crate::RunError;
use crate::checkpoint::Checkpoint;
use crate::cluster::Cluster;
use crate::inputs::InputReader;
use crate::sources::Sources;
use crate::storage::Storage;

/// What every flow of a run shares.
pub(crate) struct RunContext {
    pub pipeline: Pipeline,
    /// Where the tables are.
    pub storage: Location,
    /// Where the records are (checkpoints): the same place.
    pub records: Storage,
    pub ctx: SessionContext,
    pub now_micros: i64,
    pub sources: Option<Sources>,
    /// The workers split batches are applied on; none: on this machine.
    pub cluster: Option<Arc<Cluster>>,
}

impl RunContext {
    /// A run of `pipeline` at `now_micros`, in a session of cdcflow's functions, reading
    /// servers through `sources` (none: server sources fail, naming their kind).
    pub fn new(
        pipeline: &Pipeline,
        now_micros: i64,
        sources: Option<Sources>,
    ) -> Result<Self, RunError> {
        Ok(Self {
            pipeline: pipeline.clone(),
            storage: pipeline.storage(),
            records: Storage::of(pipeline)?,
            ctx: cdcflow_plan::functions::session_context(),
            now_micros,
            sources,
            cluster: None,
        })
    }

    pub fn reader(&self) -> InputReader<'_> {
        InputReader {
            pipeline: &self.pipeline,
            storage: &self.storage,
            ctx: &self.ctx,
            sources: self.sources.as_ref(),
            tables_as_streams: false,
            lazy_files: false,
        }
    }

    pub fn checkpoint(&self, flow: &Flow) -> Result<Checkpoint, RunError> {
        Checkpoint::in_storage(&self.records, &flow.name)
    }
}
