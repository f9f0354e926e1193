//! Resolving a `read_kafka` call: named literal options, a streaming read, the servers,
//! one of `subscribe` / `subscribePattern`, and each option's value, every mistake at
//! its place in the file.

use super::*;
use crate::read_kafka::{self, ReadKafka, Subscription};

const CODE: &str = "cdcflow::read_kafka";
const EXAMPLE: &str = "STREAM read_kafka(bootstrapServers => 'broker:9092', subscribe => 'orders', startingOffsets => 'earliest')";

impl Resolver<'_> {
    pub(super) fn read_kafka(
        &mut self,
        call: &SourceCall,
        table: String,
        file: FileId,
    ) -> Option<ReadKafka> {
        let mut ok = true;
        let mut error =
            |this: &mut Self, span: Span, message: String, label: &str, help: String| {
                this.error(file, span, CODE, message, label, Some(help));
                ok = false;
            };
        for span in &call.invalid {
            error(
                self,
                *span,
                "read_kafka takes named literal arguments".into(),
                "not a named literal",
                format!("write them as name => 'value': {EXAMPLE}"),
            );
        }
        if !call.streaming {
            error(
                self,
                call.span,
                "read_kafka is a streaming source: it reads the records appended to topics".into(),
                "read without STREAM",
                format!("read it as a stream into a streaming table: FROM {EXAMPLE}"),
            );
        }
        for (key, text, span) in &call.options {
            if read_kafka::IGNORED_OPTIONS.contains(&key.as_str()) {
                self.diags.push(
                    Diagnostic::warning(
                        CODE,
                        format!("`{key}` tunes Kafka's Java consumer; cdcflow's client has no such setting, so it does nothing here"),
                    )
                    .at(self.locate(file, *span, "ignored"))
                    .help("remove it, or keep it for Databricks: the read is the same"),
                );
                continue;
            }
            let counted = read_kafka::PASSED_OPTIONS.contains(&key.as_str())
                || read_kafka::RENAMED_OPTIONS.iter().any(|(k, _)| k == key);
            if counted && key != "kafka.client.rack" && text.trim().parse::<u64>().is_err() {
                error(
                    self,
                    *span,
                    format!("{key} is a whole number of bytes or milliseconds, not `{text}`"),
                    "not a number",
                    format!("{key} => '1048576'"),
                );
                continue;
            }
            if key == "kafka.ssl.endpoint.identification.algorithm"
                && !text.is_empty()
                && !text.eq_ignore_ascii_case("https")
            {
                error(
                    self,
                    *span,
                    format!("kafka.ssl.endpoint.identification.algorithm is `https` or empty, not `{text}`"),
                    "host name check",
                    "'https' checks the broker's name against its certificate (the default); '' turns the check off".into(),
                );
                continue;
            }
            let known =
                read_kafka::OPTIONS.contains(&key.as_str()) || read_kafka::is_client_option(key);
            if known {
                continue;
            }
            let all = read_kafka::OPTIONS
                .iter()
                .chain(read_kafka::CLIENT_OPTIONS)
                .copied();
            let near = suggest::did_you_mean(key, all)
                .map(|d| format!("{d} "))
                .unwrap_or_default();
            if key == "kafka.sasl.jaas.config" {
                error(
                    self,
                    *span,
                    "kafka.sasl.jaas.config would hold the SASL password in the pipeline's files".into(),
                    "a secret in a file",
                    "give the user and the name of an environment variable holding the password: `kafka.sasl.username` => 'user', `kafka.sasl.password.env` => 'KAFKA_PASSWORD' (export KAFKA_PASSWORD=… before running)".into(),
                );
                continue;
            }
            let what = match key.starts_with("kafka.") {
                true => format!("the Kafka client option `{key}` is not supported"),
                false => format!("read_kafka has no option `{key}`"),
            };
            error(
                self,
                *span,
                what,
                "unknown option",
                format!(
                    "{near}read_kafka takes {}; client options: {}",
                    read_kafka::OPTIONS.join(", "),
                    read_kafka::CLIENT_OPTIONS.join(", ")
                ),
            );
        }
        let option = |name: &str| call.options.iter().find(|o| o.0 == name).cloned();
        let servers = match option("bootstrapservers") {
            Some((_, text, span)) => match read_kafka::parse_servers(&text) {
                Ok(s) => Some(s),
                Err(e) => {
                    error(
                        self,
                        span,
                        format!("bootstrapServers: {e}"),
                        "bootstrapServers",
                        "the brokers to ask first, as host:port separated by commas".into(),
                    );
                    None
                }
            },
            None => {
                error(
                    self,
                    call.span,
                    "read_kafka needs bootstrapServers => 'host:port'".into(),
                    "no bootstrapServers",
                    EXAMPLE.into(),
                );
                None
            }
        };
        let subscription = match (option("subscribe"), option("subscribepattern")) {
            (Some(_), Some((_, _, span))) => {
                error(self, span, "read_kafka takes subscribe or subscribePattern, not both".into(), "second subscription", "keep one: subscribe => 'a,b' names topics, subscribePattern => 'cdc\\..*' matches them".into());
                None
            }
            (Some((_, text, span)), None) => match read_kafka::parse_topics(&text) {
                Ok(t) => Some(Subscription::Topics(t)),
                Err(e) => {
                    error(
                        self,
                        span,
                        format!("subscribe: {e}"),
                        "subscribe",
                        "topic names separated by commas: subscribe => 'orders,customers'".into(),
                    );
                    None
                }
            },
            (None, Some((_, text, span))) => match regex::Regex::new(&format!("^(?:{text})$")) {
                Ok(_) => Some(Subscription::Pattern(text)),
                Err(e) => {
                    let why = e.to_string().lines().last().unwrap_or_default().to_string();
                    error(
                        self,
                        span,
                        format!("subscribePattern is not a regular expression: {why}"),
                        "subscribePattern",
                        "a pattern whole topic names match: subscribePattern => 'cdc\\..*'".into(),
                    );
                    None
                }
            },
            (None, None) => {
                error(
                    self,
                    call.span,
                    "read_kafka needs subscribe => 'topic[,topic]' or subscribePattern => '…'"
                        .into(),
                    "no topics",
                    EXAMPLE.into(),
                );
                None
            }
        };
        let mut starting_offsets = read_kafka::StartingOffsets::Latest;
        if let Some((_, text, span)) = option("startingoffsets") {
            match read_kafka::parse_starting_offsets(&text) {
                Ok(s) => starting_offsets = s,
                Err(e) => error(self, span, format!("startingOffsets: {e}"), "startingOffsets", "earliest, latest (the default), or per partition: '{\"orders\":{\"0\":23,\"1\":-2}}' (-2 earliest, -1 latest)".into()),
            }
        }
        let mut max_offsets_per_trigger = None;
        if let Some((_, text, span)) = option("maxoffsetspertrigger") {
            match text.trim().parse::<u64>() {
                Ok(n) if n > 0 => max_offsets_per_trigger = Some(n),
                _ => error(
                    self,
                    span,
                    format!("maxOffsetsPerTrigger must be a whole number above 0, not `{text}`"),
                    "maxOffsetsPerTrigger",
                    "the records one batch takes at most, over all partitions".into(),
                ),
            }
        }
        let mut flag = |this: &mut Self, name: &str, shown: &str, default: bool| {
            let Some((_, text, span)) = option(name) else {
                return default;
            };
            match text.trim().to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    this.error(
                        file,
                        span,
                        CODE,
                        format!("{shown} is true or false, not `{text}`"),
                        shown,
                        Some(format!("{shown} => 'true' or 'false' (default {default})")),
                    );
                    ok = false;
                    default
                }
            }
        };
        let fail_on_data_loss = flag(self, "failondataloss", "failOnDataLoss", true);
        let include_headers = flag(self, "includeheaders", "includeHeaders", false);
        let client: BTreeMap<String, String> = call
            .options
            .iter()
            .filter(|(k, _, _)| read_kafka::is_client_option(k))
            .filter(|(k, _, _)| !read_kafka::IGNORED_OPTIONS.contains(&k.as_str()))
            .map(|(k, v, _)| (k.clone(), v.clone()))
            .collect();
        if let Some((_, text, span)) = option("kafka.security.protocol") {
            let p = text.to_ascii_uppercase();
            if !read_kafka::SECURITY_PROTOCOLS.contains(&p.as_str()) {
                self.error(
                    file,
                    span,
                    CODE,
                    format!("kafka.security.protocol `{text}` is not supported"),
                    "kafka.security.protocol",
                    Some(format!(
                        "one of {}",
                        read_kafka::SECURITY_PROTOCOLS.join(", ")
                    )),
                );
                ok = false;
            }
        }
        if let Some((_, text, span)) = option("kafka.ssl.truststore.type")
            && !text.eq_ignore_ascii_case("PEM")
        {
            self.error(
                file,
                span,
                CODE,
                format!("kafka.ssl.truststore.type `{text}` is not supported"),
                "kafka.ssl.truststore.type",
                Some("PEM: kafka.ssl.truststore.location names a PEM file of CA certificates (a JKS truststore converts with `keytool -exportcert -rfc`)".into()),
            );
            ok = false;
        }
        if let Some((_, text, span)) = option("kafka.sasl.mechanism") {
            let m = text.to_ascii_uppercase();
            if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&m.as_str()) {
                self.error(
                    file,
                    span,
                    CODE,
                    format!("kafka.sasl.mechanism `{text}` is not supported"),
                    "kafka.sasl.mechanism",
                    Some("PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512".into()),
                );
                ok = false;
            }
        }
        let (Some(bootstrap_servers), Some(subscription), true) = (servers, subscription, ok)
        else {
            return None;
        };
        Some(ReadKafka {
            table,
            bootstrap_servers,
            subscription,
            starting_offsets,
            max_offsets_per_trigger,
            fail_on_data_loss,
            include_headers,
            client,
            span: call.span,
        })
    }
}
