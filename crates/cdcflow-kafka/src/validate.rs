//! What `cdcflow validate` checks on the brokers when they answer: a subscribed topic
//! they do not have (a name mistyped) is a warning at its `read_kafka` call, since the
//! flow would read nothing from it, silently, until it appears. Brokers that do not
//! answer within a few seconds are no problem of the files: validate stays offline.

use std::collections::BTreeSet;
use std::time::Duration;

use cdcflow_plan::read_kafka::Subscription;
use cdcflow_plan::{Diagnostic, Input, Pipeline};
use rdkafka::consumer::Consumer;

use crate::client::connect;

/// How long validate waits for the brokers before it checks without them.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The diagnostics of the pipeline's subscribed topics found on their brokers; places
/// are relative to the pipeline folder, as the planner's are.
pub fn server_diagnostics(pipeline: &Pipeline) -> Vec<Diagnostic> {
    let mut out = vec![];
    for flow in &pipeline.flows {
        for input in &flow.inputs {
            let Input::Kafka(rk) = input else {
                continue;
            };
            let Subscription::Topics(names) = &rk.subscription else {
                continue;
            };
            let Ok(consumer) = connect(rk, &pipeline.root) else {
                continue;
            };
            let Ok(metadata) = consumer.fetch_metadata(None, ANSWER_WITHIN) else {
                continue;
            };
            let there: BTreeSet<&str> = metadata
                .topics()
                .iter()
                .filter(|t| t.error().is_none())
                .map(|t| t.name())
                .collect();
            let Some(file) = pipeline.files.get(flow.file) else {
                continue;
            };
            for missing in names.iter().filter(|n| !there.contains(n.as_str())) {
                out.push(
                    Diagnostic::warning(
                        "cdcflow::read_kafka",
                        format!(
                            "subscribed Kafka topic `{missing}` does not exist on the brokers {}: the flow reads nothing from it until it does",
                            rk.bootstrap_servers.join(",")
                        ),
                    )
                    .at(file.locate(rk.span, "this subscription"))
                    .help("is the name mistyped? The brokers have: ".to_string() + &there.iter().take(20).copied().collect::<Vec<_>>().join(", ")),
                );
            }
        }
    }
    out
}
