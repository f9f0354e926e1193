//! The datafusion-distributed side of the cluster: a worker's service, the run's
//! session that places a split batch's stages on the workers, and the two network
//! boundaries of a split plan (`cdc/exec/mod.rs`, `split`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    ChannelResolver, DistributedExt, DistributedTaskContext, GetWorkerInfoRequest,
    NetworkCoalesceExec, NetworkShuffleExec, SessionStateBuilderExt, Worker, WorkerChannel,
    WorkerQueryContext, WorkerResolver,
};
use tonic::transport::{Channel, Endpoint};
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
            .with_distributed_channel_resolver(Channels::shared())
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

/// Asks every worker its version before a run uses them: a worker of another cdcflow
/// would decode the plans it is sent otherwise (the codec is cdcflow's own), and one
/// that does not answer is named now rather than in the middle of a batch.
pub async fn check(cluster: &Cluster) -> Result<(), RunError> {
    let channels = Channels::shared();
    let timeout = worker_timeout();
    for url in &cluster.workers {
        let asked = async {
            let mut client = channels.get_worker_client_for_url(url).await?;
            client.get_worker_info(GetWorkerInfoRequest {}).await
        };
        let help = "start it with `cdcflow worker --listen ADDR`, or leave it out of --workers";
        let info = tokio::time::timeout(timeout, asked)
            .await
            .map_err(|_| {
                RunError::input(format!("worker {url} did not answer within {timeout:?}"))
                    .with_help(help)
            })?
            .map_err(|e| {
                RunError::input(format!("worker {url} did not answer: {e}")).with_help(help)
            })?;
        if info.version != VERSION {
            return Err(RunError::input(format!(
                "worker {url} runs {}, this run {VERSION}",
                info.version
            ))
            .with_help("run the same cdcflow release on the workers as the run: plans travel in cdcflow's own encoding"));
        }
    }
    Ok(())
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
        .with_distributed_channel_resolver(Channels::shared())
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

/// How long a worker has to accept a connection, and to answer the keep-alive pings of
/// one in use: a worker whose machine is gone without closing its connections fails
/// the batch after these (the next run retries it) rather than hold it for ever.
/// `CDCFLOW_WORKER_TIMEOUT_SECS` sets both (tests shorten them).
fn worker_timeout() -> Duration {
    std::env::var("CDCFLOW_WORKER_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(Duration::from_secs(20))
}

/// The channels to the workers, one per URL for the process, each with the connect
/// timeout and HTTP/2 keep-alive of [`worker_timeout`] (datafusion-distributed's
/// default channels have neither).
#[derive(Clone, Default)]
struct Channels(Arc<Mutex<HashMap<Url, Channel>>>);

impl Channels {
    /// The process's channels: shared by every session, so connections are reused.
    fn shared() -> Self {
        static SHARED: LazyLock<Channels> = LazyLock::new(Channels::default);
        SHARED.clone()
    }

    fn channel(&self, url: &Url) -> Result<Channel> {
        let mut open = self.0.lock().map_err(|_| {
            DataFusionError::Internal("the worker channels' lock is poisoned".into())
        })?;
        if let Some(channel) = open.get(url) {
            return Ok(channel.clone());
        }
        let timeout = worker_timeout();
        let channel = Endpoint::from_shared(url.to_string())
            .map_err(|e| DataFusionError::Configuration(format!("worker URL {url}: {e}")))?
            .connect_timeout(timeout)
            .http2_keep_alive_interval(timeout / 2)
            .keep_alive_timeout(timeout / 2)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true)
            .connect_lazy();
        open.insert(url.clone(), channel.clone());
        Ok(channel)
    }
}

#[async_trait::async_trait]
impl ChannelResolver for Channels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let channel = self.channel(url)?;
        Ok(create_worker_client(BoxCloneSyncChannel::new(channel)))
    }
}
