//! Prometheus text metrics for `cdcflow run --continuous --metrics-addr`: per flow the
//! lag of its last batch and running totals of rows, batches and errors; for a flow
//! that reads a broker, its tombstones and, per partition, how far its last batch left
//! it behind (records and seconds, as `cdcflow status` shows them).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::report::{FlowOutcome, RunReport};
use crate::sources::PartitionLag;

#[derive(Debug, Clone, Default)]
struct FlowMetrics {
    lag_ms: Option<i64>,
    rows_read: u64,
    rows_written: u64,
    batches: u64,
    errors: u64,
    /// Whether the flow reads a broker's topics (its series below are then shown).
    reads_broker: bool,
    tombstones: u64,
    /// After the flow's last committed batch.
    partition_lag: Vec<PartitionLag>,
    /// Flows that aggregate a watermarked stream: the state after the last committed
    /// batch, and the late rows dropped in all.
    state: Option<crate::stateful::StateMetrics>,
    dropped_by_watermark: u64,
}

/// A metric: name, type, help, and its value for a flow.
type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&FlowMetrics) -> Option<f64>,
);

/// Totals over the batches of a continuous run.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pipeline: String,
    flows: BTreeMap<String, FlowMetrics>,
}

impl Metrics {
    pub fn new(pipeline: &str) -> Self {
        Self {
            pipeline: pipeline.to_string(),
            flows: BTreeMap::new(),
        }
    }

    /// Adds one run's report.
    pub fn record(&mut self, report: &RunReport) {
        for f in &report.flows {
            let m = self.flows.entry(f.flow.clone()).or_default();
            match &f.outcome {
                FlowOutcome::Committed { .. } => {
                    m.batches += 1;
                    m.rows_read += f.rows_read;
                    m.rows_written += f.rows_written;
                    if f.lag_ms.is_some() {
                        m.lag_ms = f.lag_ms;
                    }
                    m.tombstones += f.tombstones;
                    if !f.partition_lag.is_empty() {
                        m.reads_broker = true;
                        m.partition_lag = f.partition_lag.clone();
                    }
                    if let Some(state) = &f.state {
                        m.dropped_by_watermark += state.rows_dropped_by_watermark;
                        m.state = Some(state.clone());
                    }
                }
                FlowOutcome::Failed { .. } => m.errors += 1,
                _ => {}
            }
        }
    }

    /// The Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let label = |flow: &str| {
            format!(
                "pipeline=\"{}\",flow=\"{}\"",
                escape(&self.pipeline),
                escape(flow)
            )
        };
        let series: [Series; 11] = [
            (
                "cdcflow_lag_seconds",
                "gauge",
                "From the oldest change of the flow's last batch to its commit.",
                |m| m.lag_ms.map(|l| l as f64 / 1000.0),
            ),
            (
                "cdcflow_rows_read_total",
                "counter",
                "Source rows read by committed batches.",
                |m| Some(m.rows_read as f64),
            ),
            (
                "cdcflow_rows_written_total",
                "counter",
                "Rows written by committed batches.",
                |m| Some(m.rows_written as f64),
            ),
            (
                "cdcflow_batches_total",
                "counter",
                "Committed batches.",
                |m| Some(m.batches as f64),
            ),
            ("cdcflow_errors_total", "counter", "Failed batches.", |m| {
                Some(m.errors as f64)
            }),
            (
                "cdcflow_tombstones_total",
                "counter",
                "Broker tombstones (records without a value) read by committed batches.",
                |m| m.reads_broker.then_some(m.tombstones as f64),
            ),
            (
                "cdcflow_state_rows",
                "gauge",
                "Groups an aggregation over a watermarked stream holds after its last batch (Spark's numRowsTotal).",
                |m| m.state.as_ref().map(|s| s.rows_total as f64),
            ),
            (
                "cdcflow_state_memory_bytes",
                "gauge",
                "The most state a stateful flow's last batch held in memory at once (Spark's memoryUsedBytes; the state is kept on disk).",
                |m| m.state.as_ref().map(|s| s.memory_used_bytes as f64),
            ),
            (
                "cdcflow_state_disk_bytes",
                "gauge",
                "Bytes of a stateful flow's state files after its last batch.",
                |m| m.state.as_ref().map(|s| s.state_bytes as f64),
            ),
            (
                "cdcflow_watermark_seconds",
                "gauge",
                "The flow's watermark after its last batch, seconds since the epoch.",
                |m| m.state.as_ref().map(|s| s.watermark_micros as f64 / 1e6),
            ),
            (
                "cdcflow_rows_dropped_by_watermark_total",
                "counter",
                "Rows (per window) dropped as late by committed batches, kept in <target>__late.",
                |m| m.state.is_some().then_some(m.dropped_by_watermark as f64),
            ),
        ];
        for (name, kind, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (flow, m) in &self.flows {
                if let Some(v) = value(m) {
                    let _ = writeln!(out, "{name}{{{}}} {v}", label(flow));
                }
            }
        }
        let partitions: [PartitionSeries; 2] = [
            (
                "cdcflow_partition_lag_messages",
                "Records of a topic partition after the offset the flow's last batch committed.",
                |p| p.behind_messages as f64,
            ),
            (
                "cdcflow_partition_lag_seconds",
                "Age of the oldest record of a topic partition the flow's last batch left behind (0 when none).",
                |p| p.behind_seconds.unwrap_or(0.0),
            ),
        ];
        for (name, help, value) in partitions {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            for (flow, m) in &self.flows {
                for p in &m.partition_lag {
                    let _ = writeln!(
                        out,
                        "{name}{{{},partition=\"{}\"}} {}",
                        label(flow),
                        escape(&p.partition),
                        value(p)
                    );
                }
            }
        }
        out
    }
}

/// A gauge per topic partition: name, help, and its value.
type PartitionSeries = (&'static str, &'static str, fn(&PartitionLag) -> f64);

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::FlowReport;

    #[test]
    fn totals_and_lag_are_rendered_per_flow() {
        let mut m = Metrics::new("orders");
        let mut f = FlowReport::new("silver", "t", "auto cdc");
        f.outcome = FlowOutcome::Committed { batch: 0 };
        f.rows_read = 3;
        f.lag_ms = Some(1500);
        let report = RunReport {
            flows: vec![f.clone(), f],
            ..RunReport::default()
        };
        m.record(&report);
        let text = m.render();
        assert!(
            text.contains(r#"cdcflow_lag_seconds{pipeline="orders",flow="silver"} 1.5"#),
            "{text}"
        );
        assert!(
            text.contains(r#"cdcflow_rows_read_total{pipeline="orders",flow="silver"} 6"#),
            "{text}"
        );
        assert!(
            text.contains(r#"cdcflow_batches_total{pipeline="orders",flow="silver"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE cdcflow_errors_total counter"),
            "{text}"
        );
        assert!(!text.contains("cdcflow_tombstones_total{"), "{text}");
    }

    #[test]
    fn a_flow_reading_a_broker_has_tombstones_and_lag_per_partition() {
        let mut m = Metrics::new("crm");
        let mut f = FlowReport::new("bronze", "bronze", "append");
        f.outcome = FlowOutcome::Committed { batch: 0 };
        f.tombstones = 2;
        f.partition_lag = vec![
            PartitionLag {
                partition: "orders-0".into(),
                behind_messages: 0,
                behind_seconds: None,
            },
            PartitionLag {
                partition: "orders-1".into(),
                behind_messages: 7,
                behind_seconds: Some(2.5),
            },
        ];
        let report = RunReport {
            flows: vec![f.clone(), f],
            ..RunReport::default()
        };
        m.record(&report);
        let text = m.render();
        for line in [
            r#"cdcflow_tombstones_total{pipeline="crm",flow="bronze"} 4"#,
            r#"cdcflow_partition_lag_messages{pipeline="crm",flow="bronze",partition="orders-0"} 0"#,
            r#"cdcflow_partition_lag_messages{pipeline="crm",flow="bronze",partition="orders-1"} 7"#,
            r#"cdcflow_partition_lag_seconds{pipeline="crm",flow="bronze",partition="orders-1"} 2.5"#,
            r#"cdcflow_partition_lag_seconds{pipeline="crm",flow="bronze",partition="orders-0"} 0"#,
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
