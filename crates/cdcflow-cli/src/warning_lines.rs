//! Warnings on stderr for people, when no log format was asked for: one line each,
//! `warning: <message> (<field>: <value>, …)`, as the CLI's own messages read, without
//! the timestamp and module path a log line carries.

use std::fmt;

use serde_json::Value;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::json_logs::event_object;

/// The event formatter of the default (no `RUST_LOG`) stderr.
pub struct WarningLine;

impl<S, N> FormatEvent<S, N> for WarningLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writeln!(writer, "{}", line(event))
    }
}

fn line(event: &Event<'_>) -> String {
    let level = match *event.metadata().level() {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        _ => "debug",
    };
    let mut object = event_object(event);
    let message = match object.remove("message") {
        Some(Value::String(m)) => m,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let fields: Vec<String> = object
        .into_iter()
        .filter(|(name, _)| !matches!(name.as_str(), "timestamp" | "level" | "target"))
        .map(|(name, value)| match value {
            Value::String(text) => format!("{name}: {text}"),
            other => format!("{name}: {other}"),
        })
        .collect();
    match fields.is_empty() {
        true => format!("{level}: {message}"),
        false => format!("{level}: {message} ({})", fields.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_is_one_line_with_its_fields_and_no_timestamp() {
        let text = crate::json_logs::written(WarningLine, || {
            tracing::warn!(topics = ?["crm.a"], skipped = 3_u64, "subscribed Kafka topics do not exist (yet)");
            tracing::warn!("plain");
        });
        assert_eq!(
            text,
            "warning: subscribed Kafka topics do not exist (yet) (skipped: 3, topics: [\"crm.a\"])\nwarning: plain\n"
        );
    }
}
