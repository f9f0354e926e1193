//! The datafusion-distributed side of the cluster: a worker's service, the run's
//! session that places a split batch's stages on the workers, and the two network
//! boundaries of a split plan (`cdc/exec/mod.rs`, `split`).

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    DistributedExt, DistributedTaskContext, NetworkCoalesceExec, NetworkShuffleExec,
    SessionStateBuilderExt, Worker, WorkerQueryContext, WorkerResolver,
};
use url::Url;

use super::Cluster;
use crate::RunError;
use crate::cdc::exec::codec::AutoCdcCodec;

/// What a worker and a run must agree on: plans are sent in cdcflow's own encoding.
const VERSION: &str = concat!("cdcflow ", env!("CARGO_PKG_VERSION"));

pub(super) fn task_of(context: &Arc<TaskContext>) -> (usize, usize) {
    let task = DistributedTaskContext::from_ctx(context);
    (task.task_index, task.task_count)
}

/// Serves a worker on `listener` until the process ends: each task it is sent runs in
/// a session with cdcflow's functions and codec.
pub async fn serve(listener: tokio::net::TcpListener) -> Result<(), RunError> {
    let worker = Worker::from_session_builder(|ctx: WorkerQueryContext| async move {
        Ok(cdcflow_plan::functions::with_dialect(ctx.builder)
            .with_distributed_user_codec(AutoCdcCodec)
            .build())
    })
    .with_version(VERSION);
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| {
            // Task plans and shuffled rows are many small messages.
            let _ = stream.set_nodelay(true);
            stream
        });
        Some((accepted, listener))
    });
    tonic::transport::Server::builder()
        .add_service(worker.into_worker_server())
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| RunError::input(format!("the worker stopped: {e}")))
}

/// The workers, as datafusion-distributed asks for them.
struct Workers(Vec<Url>);

impl WorkerResolver for Workers {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.0.clone())
    }
}

/// `state` (whose query planner lowers and splits AUTO CDC batches) planning for
/// `cluster`: the stages of a split batch are placed on its workers, and the top one,
/// the commit, runs here.
pub(crate) fn distribute(state: SessionState, cluster: &Cluster) -> Result<SessionState, RunError> {
    Ok(SessionStateBuilder::new_from_existing(state)
        // Wraps the query planner set so far: cdcflow's runs first.
        .with_distributed_planner()
        .with_distributed_worker_resolver(Workers(cluster.workers.clone()))
        .with_distributed_user_codec(AutoCdcCodec)
        .build())
}

/// The exchange of a split batch's events: `repartition` (by route value) runs as one
/// task, and each apply task reads its slice's partition over the network.
pub(crate) fn shuffle(repartition: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(Arc::new(NetworkShuffleExec::try_new(repartition, 1)?))
}

/// The slices' changes gathered to the run from `tasks` apply tasks.
pub(crate) fn gather(
    apply: Arc<dyn ExecutionPlan>,
    tasks: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    NetworkCoalesceExec::try_new(apply, tasks, 1)
        .map(|n| Arc::new(n) as Arc<dyn ExecutionPlan>)
        .map_err(|e| DataFusionError::Context("placing a batch's slices".into(), Box::new(e)))
}
