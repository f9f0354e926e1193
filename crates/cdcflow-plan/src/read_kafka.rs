//! `STREAM read_kafka(bootstrapServers => 'host:port', subscribe => 'orders,customers',
//! startingOffsets => 'earliest')`: the records of Kafka topics as a streaming source,
//! with the columns and option names Databricks documents (docs/sources.md). This
//! module knows the options and their checks, and the rows' fixed schema; talking to a
//! broker is `cdcflow-kafka`'s, which the planner never compiles.

use std::collections::BTreeMap;
use std::sync::Arc;

use cdcflow_sql::Span;
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// The options `read_kafka` takes besides `kafka.*` (lower case: the parser folds
/// option names, so `bootstrapServers` and `bootstrapservers` are one).
pub const OPTIONS: &[&str] = &[
    "bootstrapservers",
    "subscribe",
    "subscribepattern",
    "startingoffsets",
    "maxoffsetspertrigger",
    "failondataloss",
    "includeheaders",
];

/// The `kafka.*` client options this build passes to the client; the secret of SASL is
/// named by an environment variable, never written in a file.
pub const CLIENT_OPTIONS: &[&str] = &[
    "kafka.client.id",
    "kafka.group.id",
    "kafka.security.protocol",
    "kafka.sasl.mechanism",
    "kafka.sasl.username",
    "kafka.sasl.password.env",
    "kafka.ssl.truststore.location",
    "kafka.ssl.truststore.type",
    "kafka.ssl.endpoint.identification.algorithm",
];

/// Client options of Kafka's Java consumer that the client here (librdkafka) takes under
/// the same name and with the same meaning, passed to it as they are: fetch sizes,
/// back-offs and timeouts of connections, the rack for follower fetching.
pub const PASSED_OPTIONS: &[&str] = &[
    "kafka.fetch.min.bytes",
    "kafka.fetch.max.bytes",
    "kafka.max.partition.fetch.bytes",
    "kafka.client.rack",
    "kafka.metadata.max.age.ms",
    "kafka.reconnect.backoff.ms",
    "kafka.reconnect.backoff.max.ms",
    "kafka.retry.backoff.ms",
    "kafka.connections.max.idle.ms",
    "kafka.socket.connection.setup.timeout.ms",
];

/// Client options of Kafka's Java consumer the client here has under another name.
pub const RENAMED_OPTIONS: &[(&str, &str)] = &[
    ("kafka.receive.buffer.bytes", "socket.receive.buffer.bytes"),
    ("kafka.send.buffer.bytes", "socket.send.buffer.bytes"),
];

/// Client options that tune only how Kafka's Java consumer polls, heartbeats and times
/// out its own calls: the client here has no such setting (it joins no group and polls
/// on its own schedule), so they are accepted with a warning that they do nothing,
/// and a file written for Databricks still runs.
pub const IGNORED_OPTIONS: &[&str] = &[
    "kafka.request.timeout.ms",
    "kafka.default.api.timeout.ms",
    "kafka.session.timeout.ms",
    "kafka.heartbeat.interval.ms",
    "kafka.max.poll.records",
    "kafka.max.poll.interval.ms",
    "kafka.fetch.max.wait.ms",
];

/// Whether `key` (lower case) is a `kafka.*` option this build knows.
pub fn is_client_option(key: &str) -> bool {
    CLIENT_OPTIONS.contains(&key)
        || PASSED_OPTIONS.contains(&key)
        || IGNORED_OPTIONS.contains(&key)
        || RENAMED_OPTIONS.iter().any(|(k, _)| *k == key)
}

/// `kafka.security.protocol`'s values, as Kafka's clients name them.
pub const SECURITY_PROTOCOLS: &[&str] = &["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// Where a partition without a checkpointed offset starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartingOffsets {
    Earliest,
    Latest,
    /// Per topic, per partition: an offset, or -2 (earliest) / -1 (latest), as Spark's
    /// JSON form (`{"orders":{"0":23,"1":-2}}`); partitions it leaves out start at the
    /// earliest offset.
    Given(BTreeMap<String, BTreeMap<i32, i64>>),
}

/// Which topics are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    Topics(Vec<String>),
    /// A regular expression a whole topic name must match.
    Pattern(String),
}

/// A resolved `read_kafka` call.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadKafka {
    /// The table name that stands for this call in the flow's rewritten query.
    pub table: String,
    pub bootstrap_servers: Vec<String>,
    pub subscription: Subscription,
    pub starting_offsets: StartingOffsets,
    /// Records one batch takes at most, spread over the partitions by their backlog.
    pub max_offsets_per_trigger: Option<u64>,
    /// Offsets deleted before they were read fail the read (the default), or are
    /// skipped with a warning.
    pub fail_on_data_loss: bool,
    pub include_headers: bool,
    /// `kafka.*` options, names lower case.
    pub client: BTreeMap<String, String>,
    pub span: Span,
}

impl ReadKafka {
    /// Names the source apart from every other of the pipeline: the key of its
    /// position in a flow's checkpoint.
    pub fn key(&self) -> String {
        let what = match &self.subscription {
            Subscription::Topics(t) => t.join(","),
            Subscription::Pattern(p) => format!("pattern:{p}"),
        };
        format!("kafka:{}:{what}", self.bootstrap_servers.join(","))
    }

    /// The rows' schema.
    pub fn schema(&self) -> SchemaRef {
        record_schema(self.include_headers)
    }
}

/// The columns Databricks gives a Kafka record: `key` and `value` as binary, `topic`,
/// `partition`, `offset`, `timestamp`, `timestampType`, and `headers` when asked for.
pub fn record_schema(include_headers: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("offset", DataType::Int64, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("timestampType", DataType::Int32, true),
    ];
    if include_headers {
        fields.push(Field::new("headers", headers_type(), true));
    }
    Arc::new(Schema::new(fields))
}

/// `ARRAY<STRUCT<key: STRING, value: BINARY>>`.
pub fn headers_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(
        DataType::Struct(header_fields()),
        true,
    )))
}

/// The fields of one header.
pub fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

/// `startingOffsets`: `earliest`, `latest` or Spark's JSON per partition.
pub fn parse_starting_offsets(text: &str) -> Result<StartingOffsets, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("earliest") {
        return Ok(StartingOffsets::Earliest);
    }
    if t.eq_ignore_ascii_case("latest") {
        return Ok(StartingOffsets::Latest);
    }
    let value: serde_json::Value = serde_json::from_str(t)
        .map_err(|_| format!("`{t}` is neither earliest, latest nor JSON"))?;
    let topics = value
        .as_object()
        .ok_or("the JSON form is an object of topics".to_string())?;
    let mut out = BTreeMap::new();
    for (topic, partitions) in topics {
        let partitions = partitions
            .as_object()
            .ok_or(format!("topic `{topic}`: an object of partitions"))?;
        let mut offsets = BTreeMap::new();
        for (p, o) in partitions {
            let p: i32 = p
                .parse()
                .map_err(|_| format!("topic `{topic}`: `{p}` is not a partition number"))?;
            let o = o.as_i64().filter(|o| *o >= -2).ok_or(format!(
                "topic `{topic}` partition {p}: an offset, -2 (earliest) or -1 (latest)"
            ))?;
            offsets.insert(p, o);
        }
        out.insert(topic.clone(), offsets);
    }
    Ok(StartingOffsets::Given(out))
}

/// `subscribe`: topic names separated by commas.
pub fn parse_topics(text: &str) -> Result<Vec<String>, String> {
    let topics: Vec<String> = text.split(',').map(|t| t.trim().to_string()).collect();
    match topics.iter().find(|t| !valid_topic(t)) {
        Some(bad) => Err(format!(
            "`{bad}` is not a topic name (letters, digits, '.', '_' and '-', at most 249)"
        )),
        None => Ok(topics),
    }
}

fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `bootstrapServers`: `host:port` pairs separated by commas.
pub fn parse_servers(text: &str) -> Result<Vec<String>, String> {
    let servers: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
    for s in &servers {
        let port = s.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
        if !matches!(port, Some((h, Ok(_))) if !h.is_empty()) {
            return Err(format!("`{s}` is not host:port"));
        }
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_offsets() {
        assert_eq!(
            parse_starting_offsets("EARLIEST"),
            Ok(StartingOffsets::Earliest)
        );
        assert_eq!(
            parse_starting_offsets(r#"{"a":{"0":5,"2":-2}}"#),
            Ok(StartingOffsets::Given(
                [("a".to_string(), [(0, 5), (2, -2)].into())].into()
            ))
        );
        for bad in ["first", r#"{"a":{"x":1}}"#, r#"{"a":{"0":-3}}"#, "[1]"] {
            assert!(parse_starting_offsets(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topics_and_servers() {
        assert_eq!(parse_topics("a, b.c").unwrap(), ["a", "b.c"]);
        assert!(parse_topics("a,,b").is_err());
        assert!(parse_topics("a b").is_err());
        assert_eq!(parse_servers("h:9092,k:1").unwrap(), ["h:9092", "k:1"]);
        assert!(parse_servers("h").is_err());
        assert!(parse_servers(":9092").is_err());
    }

    #[test]
    fn the_columns_are_databricks() {
        let names: Vec<String> = record_schema(true)
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names,
            [
                "key",
                "value",
                "topic",
                "partition",
                "offset",
                "timestamp",
                "timestampType",
                "headers"
            ]
        );
        assert_eq!(record_schema(false).fields().len(), 7);
    }
}
