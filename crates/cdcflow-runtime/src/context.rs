//! What every flow of a run shares: the pipeline, its storage, the session, the run's
//! clock and the outside sources.

use std::path::Path;

use cdcflow_plan::{Flow, Pipeline};
use datafusion::prelude::SessionContext;

use crate::checkpoint::Checkpoint;
use crate::inputs::InputReader;
use crate::sources::Sources;
use crate::{RunError, layout};

/// What every flow of a run shares.
pub(crate) struct RunContext<'a> {
    pub pipeline: &'a Pipeline,
    pub storage: &'a Path,
    pub ctx: SessionContext,
    pub now_micros: i64,
    pub sources: Option<Sources>,
}

impl RunContext<'_> {
    pub fn reader(&self) -> InputReader<'_> {
        InputReader {
            pipeline: self.pipeline,
            storage: self.storage,
            ctx: &self.ctx,
            sources: self.sources.as_ref(),
        }
    }

    pub fn checkpoint(&self, flow: &Flow) -> Result<Checkpoint, RunError> {
        Ok(Checkpoint::new(layout::checkpoint_dir(
            self.storage,
            &flow.name,
        )?))
    }
}
