//! Prometheus text metrics for `cdcflow run --continuous --metrics-addr`: per flow the
//! lag of its last batch and running totals of rows, batches and errors.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::report::{FlowOutcome, RunReport};

#[derive(Debug, Clone, Default)]
struct FlowMetrics {
    lag_ms: Option<i64>,
    rows_read: u64,
    rows_written: u64,
    batches: u64,
    errors: u64,
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
        let series: [Series; 5] = [
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
        out
    }
}

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
    }
}
