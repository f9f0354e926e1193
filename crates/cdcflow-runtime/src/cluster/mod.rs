//! The AUTO CDC apply spread over worker processes (docs/scale-out.md). A batch split in
//! slices of its keys (`cdc/slice.rs`) runs on datafusion-distributed: the events are
//! made by one task, shuffled to one apply task per slice on the workers, and the
//! slices' changes come back to the `cdcflow run` process, which commits them once,
//! beside its lock, checkpoints and event log. Workers are `cdcflow worker` processes:
//! one gRPC service each, running cdcflow's functions and its plans' codec.
//!
//! Built with the `cluster` feature (on in the released binary); without it a run
//! given workers fails, naming the feature.

#[cfg(feature = "cluster")]
mod workers;

use std::sync::Arc;

use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use url::Url;

use crate::RunError;

/// The workers a run spreads its split batches over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub workers: Vec<Url>,
}

impl Cluster {
    /// The workers of a comma-separated list of URLs (`http://host:port`).
    pub fn parse(list: &str) -> Result<Self, RunError> {
        let workers = list
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .map(|w| {
                let url = Url::parse(w).map_err(|e| {
                    RunError::input(format!("worker `{w}` is not a URL: {e}"))
                        .with_help("name each worker as http://HOST:PORT")
                })?;
                match (url.scheme(), url.port()) {
                    ("http", Some(_)) => Ok(url),
                    _ => Err(RunError::input(format!(
                        "worker `{w}` is not an http://HOST:PORT address"
                    ))),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if workers.is_empty() {
            return Err(RunError::input("no worker named"));
        }
        Ok(Self { workers })
    }

    /// Into how many slices a batch is split: one per worker.
    pub fn slices(&self) -> usize {
        self.workers.len()
    }
}

/// The task an execution runs as, and how many tasks its stage has: (0, 1) unless a
/// distributed engine runs it.
pub(crate) fn task_of(context: &Arc<TaskContext>) -> (usize, usize) {
    #[cfg(feature = "cluster")]
    {
        workers::task_of(context)
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = context;
        (0, 1)
    }
}

/// `plan` as text for `explain` and the recorded last plan: a distributed plan by its
/// stages (where each runs, its tasks and partitions), any other indented.
pub fn display(plan: &dyn ExecutionPlan, metrics: bool) -> String {
    #[cfg(feature = "cluster")]
    {
        datafusion_distributed::display_plan_ascii(plan, metrics)
    }
    #[cfg(not(feature = "cluster"))]
    {
        use datafusion::physical_plan::display::DisplayableExecutionPlan;
        match metrics {
            true => DisplayableExecutionPlan::with_metrics(plan)
                .indent(true)
                .to_string(),
            false => DisplayableExecutionPlan::new(plan).indent(true).to_string(),
        }
    }
}

/// Where the stages of a split batch run, for `explain`.
pub fn placement(cluster: &Cluster) -> String {
    let workers: Vec<String> = cluster.workers.iter().map(Url::to_string).collect();
    format!(
        "(split batches: the events are made by one task on a worker, each of the {} slices is applied by a task of its own, one per worker of {}, and the commit runs in this process)",
        cluster.slices(),
        workers.join(", ")
    )
}

#[cfg(feature = "cluster")]
pub use workers::{check, serve};

/// Without the `cluster` feature: a run given workers fails.
#[cfg(not(feature = "cluster"))]
pub async fn check(_cluster: &Cluster) -> Result<(), RunError> {
    Err(not_built_error())
}
#[cfg(feature = "cluster")]
pub(crate) use workers::{distribute, gather, shuffle};

#[cfg(not(feature = "cluster"))]
fn not_built_error() -> RunError {
    RunError::input(
        "this cdcflow was built without the `cluster` feature: it cannot run batches on workers",
    )
    .with_help("build cdcflow with `--features cluster`")
}

/// Without the `cluster` feature: a run given workers fails.
#[cfg(not(feature = "cluster"))]
fn not_built() -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(not_built_error()))
}

#[cfg(not(feature = "cluster"))]
pub(crate) fn distribute(
    _state: datafusion::execution::SessionState,
    _cluster: &Cluster,
) -> Result<datafusion::execution::SessionState, RunError> {
    Err(RunError::input(
        "this cdcflow was built without the `cluster` feature: it cannot run batches on workers",
    ))
}

#[cfg(not(feature = "cluster"))]
pub(crate) fn shuffle(
    _repartition: Arc<dyn ExecutionPlan>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    Err(not_built())
}

#[cfg(not(feature = "cluster"))]
pub(crate) fn gather(
    _apply: Arc<dyn ExecutionPlan>,
    _tasks: usize,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    Err(not_built())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_http_addresses_with_a_port() {
        let c = Cluster::parse("http://127.0.0.1:7001, http://h2:7002").unwrap();
        assert_eq!(c.slices(), 2);
        for bad in ["", "127.0.0.1:7001", "http://h", "grpc://h:1"] {
            assert!(Cluster::parse(bad).is_err(), "{bad}");
        }
    }
}
