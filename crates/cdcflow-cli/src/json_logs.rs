//! `--log-format json`: one JSON object per log event on stderr, for log collectors.
//! Fields keep their types: a number is a JSON number, a flag a boolean, text a string,
//! and a field the event declares without a value (an `Option` that is `None`) is
//! `null`. tracing-subscriber's own JSON formatter leaves such a field out and writes a
//! `?value` as its Rust Debug text, which a collector cannot query.

use std::fmt;

use serde_json::{Map, Number, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter of `--log-format json`.
pub struct JsonEvent;

impl<S, N> FormatEvent<S, N> for JsonEvent
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
        writeln!(writer, "{}", Value::Object(event_object(event)))
    }
}

/// `timestamp`, `level`, `target` and every field the event declares.
pub(crate) fn event_object(event: &Event<'_>) -> Map<String, Value> {
    let meta = event.metadata();
    let mut object = Map::new();
    let mut timestamp = String::new();
    if SystemTime
        .format_time(&mut Writer::new(&mut timestamp))
        .is_ok()
    {
        object.insert("timestamp".into(), Value::String(timestamp));
    }
    object.insert("level".into(), Value::String(meta.level().to_string()));
    // A field the event names but records no value for is there, as null.
    for field in meta.fields() {
        object.insert(field.name().into(), Value::Null);
    }
    event.record(&mut Fields(&mut object));
    object.insert("target".into(), Value::String(meta.target().into()));
    object
}

/// Records each field as the JSON value of its type.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        self.0.insert(field.name().into(), value);
    }
}

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(
            field,
            Number::from_f64(value).map_or(Value::Null, Value::Number),
        );
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }

    /// `%value` (Display) and the message arrive here as text; our own events record no
    /// `?value`, so Debug text comes only from libraries' events.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

/// What an event formatter writes for the events `emit` logs.
#[cfg(test)]
pub(crate) fn written<F>(format: F, emit: impl FnOnce()) -> String
where
    F: FormatEvent<tracing_subscriber::Registry, tracing_subscriber::fmt::format::DefaultFields>
        + Send
        + Sync
        + 'static,
{
    use std::sync::{Arc, Mutex};

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let buffer = Arc::new(Mutex::new(Vec::<u8>::new()));
    let sink = Arc::clone(&buffer);
    let subscriber = tracing_subscriber::fmt()
        .event_format(format)
        .with_writer(move || Sink(Arc::clone(&sink)))
        .finish();
    tracing::subscriber::with_default(subscriber, emit);
    let text = buffer.lock().expect("lock").clone();
    String::from_utf8(text).expect("utf-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `JsonEvent` writes for the events `emit` logs.
    fn logged(emit: impl FnOnce()) -> Vec<Value> {
        written(JsonEvent, emit)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    }

    #[test]
    fn fields_keep_their_types_and_a_missing_value_is_null() {
        let lag: Option<i64> = None;
        let batch: Option<i64> = Some(3);
        let events = logged(|| {
            tracing::info!(
                flow = %"orders",
                outcome = "committed",
                batch,
                lag_ms = lag,
                rows = 9u64,
                ratio = 0.5,
                ok = true,
                "flow finished"
            );
        });
        let e = &events[0];
        assert_eq!(e["message"], "flow finished");
        assert_eq!(e["level"], "INFO");
        assert_eq!(e["flow"], "orders");
        assert_eq!(e["outcome"], "committed");
        assert_eq!(e["batch"], 3);
        assert_eq!(e["lag_ms"], Value::Null);
        assert_eq!(e["rows"], 9);
        assert_eq!(e["ratio"], 0.5);
        assert_eq!(e["ok"], true);
        assert!(e["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert_eq!(e["target"], module_path!());
    }
}
