//! `pipeline.yaml`: the pipeline's name, where its tables live, which SQL files
//! define it and the `${key}` configuration substituted into them.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::connections::Connection;

/// The settings of one pipeline folder.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Required; names the pipeline in messages, locks and the event log.
    pub name: String,
    /// Where tables and checkpoints live, relative to the pipeline folder.
    #[serde(default = "default_storage")]
    pub storage: String,
    /// The default catalog of the pipeline's names, as a Databricks pipeline's
    /// `catalog` setting: `orders` is `<catalog>.<schema>.orders` (`crate::namespace`).
    #[serde(default)]
    pub catalog: Option<String>,
    /// The default schema of the pipeline's names (Databricks' `schema`, formerly `target`).
    #[serde(default)]
    pub schema: Option<String>,
    /// Tables from outside the pipeline, by name (`prod.crm.customers`), read from a
    /// local copy: a Delta table, or Parquet, CSV or JSON files.
    #[serde(default)]
    pub external_tables: BTreeMap<String, ExternalTableConfig>,
    /// Globs of SQL files, relative to the folder; default every `*.sql` below it.
    #[serde(default = "default_libraries")]
    pub libraries: Vec<String>,
    /// Values substituted into SQL as `${key}`.
    #[serde(default)]
    pub configuration: BTreeMap<String, ConfigValue>,
    /// What a malformed landing record does: `quarantine` (default) keeps it with its
    /// file and line in `<table>__quarantine` while good records proceed; `fail` fails
    /// the flow, naming file and line, and commits nothing.
    #[serde(default)]
    pub bad_records: BadRecords,
    /// `cdcflow run --continuous`: the least time between two batches, and how often
    /// landing folders are rescanned where file notifications are unavailable; from 0
    /// to [`MAX_TRIGGER_INTERVAL_SECONDS`].
    #[serde(
        default = "default_trigger_interval",
        deserialize_with = "trigger_interval"
    )]
    pub trigger_interval_seconds: f64,
    /// How long a landing file must go unchanged (size and modification time) before
    /// it is read: a file written within this period is still being written and is left
    /// for a later batch. Default 1 s.
    #[serde(default = "default_landing_settle")]
    pub landing_settle_seconds: f64,
    /// Whether symbolic links in a landing folder that lead out of it are followed
    /// (default false: such a link is reported and not read).
    #[serde(default)]
    pub follow_symlinks_out_of_landing: bool,
    /// The databases sources read (`read_postgres(connection => name, …)`), by name
    /// ([`crate::connections`]).
    #[serde(default)]
    pub connections: BTreeMap<String, Connection>,
    /// Declarations that each capture every table of a list or pattern from one
    /// connection, by name ([`crate::syncs`]).
    #[serde(default)]
    pub syncs: BTreeMap<String, crate::syncs::SyncConfig>,
}

/// Long enough to span the pauses of a writer that appends line by line or flushes a
/// buffer at a time (a second covers the usual flush intervals of loggers and
/// exporters), short enough that a file dropped just before `cdcflow run` costs at
/// most a second of waiting. Writers that land a file whole (written under a hidden or
/// `.tmp` name, then renamed) are never affected.
fn default_landing_settle() -> f64 {
    1.0
}

fn default_trigger_interval() -> f64 {
    1.0
}

/// The longest trigger interval, a day: a pipeline refreshed less often is better run
/// by a scheduler (`cdcflow run` from cron) than kept waiting.
pub const MAX_TRIGGER_INTERVAL_SECONDS: f64 = 86_400.0;

/// A number of seconds a `Duration` can hold; `.inf`, `.nan` and negative numbers are
/// errors at the value rather than a panic when continuous mode starts. Checked in the
/// visitor, so that the YAML reader places the error at the value.
fn trigger_interval<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct Seconds;
    impl serde::de::Visitor<'_> for Seconds {
        type Value = f64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "a number of seconds from 0 to {MAX_TRIGGER_INTERVAL_SECONDS}"
            )
        }

        fn visit_f64<E: serde::de::Error>(self, seconds: f64) -> Result<f64, E> {
            if (0.0..=MAX_TRIGGER_INTERVAL_SECONDS).contains(&seconds) {
                Ok(seconds)
            } else {
                Err(E::custom(format!(
                    "must be from 0 to {MAX_TRIGGER_INTERVAL_SECONDS} seconds, not {seconds}"
                )))
            }
        }

        fn visit_i64<E: serde::de::Error>(self, seconds: i64) -> Result<f64, E> {
            self.visit_f64(seconds as f64)
        }

        fn visit_u64<E: serde::de::Error>(self, seconds: u64) -> Result<f64, E> {
            self.visit_f64(seconds as f64)
        }
    }
    d.deserialize_f64(Seconds)
}

/// One entry of `external_tables:`. Read only: cdcflow never writes, compacts or
/// vacuums it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalTableConfig {
    pub format: ExternalFormat,
    /// The table's folder (Delta) or its files' folder or file; relative to the
    /// pipeline folder.
    pub path: String,
    /// The columns, as in `schema =>` (`id BIGINT, name STRING`); required for CSV and
    /// JSON, read from the files (Parquet) or the log (Delta) when left out.
    #[serde(default)]
    pub schema: Option<String>,
    /// Options as `read_files` takes them (`header`, `sep`); files only.
    #[serde(default)]
    pub options: BTreeMap<String, ConfigValue>,
}

/// How an external table is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExternalFormat {
    Delta,
    Parquet,
    Csv,
    Json,
}

impl ExternalFormat {
    pub fn name(self) -> &'static str {
        match self {
            Self::Delta => "delta",
            Self::Parquet => "parquet",
            Self::Csv => "csv",
            Self::Json => "json",
        }
    }
}

/// See [`PipelineConfig::bad_records`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRecords {
    #[default]
    Quarantine,
    Fail,
}

/// A configuration value: YAML scalars only.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ConfigValue {
    String(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

impl std::fmt::Display for ConfigValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigValue::String(s) => f.write_str(s),
            ConfigValue::Integer(i) => write!(f, "{i}"),
            ConfigValue::Float(x) => write!(f, "{x}"),
            ConfigValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

fn default_storage() -> String {
    "_storage".to_string()
}

pub(crate) fn default_libraries() -> Vec<String> {
    vec!["**/*.sql".to_string()]
}

/// A YAML error with its 1-based position, when serde_yaml knows it.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub message: String,
    pub line: Option<u64>,
    pub column: Option<u64>,
}

impl PipelineConfig {
    /// Parses the text of `pipeline.yaml`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        serde_yaml::from_str(text).map_err(|e| {
            let loc = e.location();
            let message = e.to_string();
            // serde_yaml appends " at line L column C"; the span says that already.
            let message = match message.find(" at line ") {
                Some(i) => message[..i].to_string(),
                None => message,
            };
            ConfigError {
                message,
                line: loc.as_ref().map(|l| l.line() as u64),
                column: loc.as_ref().map(|l| l.column() as u64),
            }
        })
    }

    /// [`PipelineConfig::trigger_interval_seconds`] as a duration.
    pub fn trigger_interval(&self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.trigger_interval_seconds)
            .unwrap_or(std::time::Duration::from_secs(1))
    }

    /// The configuration as strings, for substitution.
    pub fn configuration_strings(&self) -> BTreeMap<String, String> {
        self.configuration
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply() {
        let c = PipelineConfig::parse("name: p\n").unwrap();
        assert_eq!(c.storage, "_storage");
        assert_eq!(c.libraries, vec!["**/*.sql"]);
        assert_eq!(c.landing_settle_seconds, 1.0);
        assert!(!c.follow_symlinks_out_of_landing);
    }

    #[test]
    fn unknown_key_has_a_position() {
        let e = PipelineConfig::parse("name: p\nstorag: x\n").unwrap_err();
        assert!(
            e.message.contains("unknown field `storag`"),
            "{}",
            e.message
        );
        assert_eq!(e.line, Some(2));
        assert_eq!(e.column, Some(1));
    }

    #[test]
    fn a_trigger_interval_no_duration_holds_is_an_error_at_the_value() {
        for value in [".inf", "-.inf", ".nan", "1e300", "-1", "86401"] {
            let e = PipelineConfig::parse(&format!("name: p\ntrigger_interval_seconds: {value}\n"))
                .unwrap_err();
            assert!(
                e.message
                    .contains("trigger_interval_seconds: must be from 0 to 86400"),
                "{value}: {}",
                e.message
            );
            assert_eq!((e.line, e.column), (Some(2), Some(27)), "{value}");
        }
    }

    #[test]
    fn a_trigger_interval_within_a_day_is_kept() {
        for (value, seconds) in [("0", 0.0), ("0.25", 0.25), ("86400", 86_400.0)] {
            let c = PipelineConfig::parse(&format!("name: p\ntrigger_interval_seconds: {value}\n"))
                .unwrap();
            assert_eq!(c.trigger_interval().as_secs_f64(), seconds);
        }
    }

    #[test]
    fn connections_in_parts_and_as_a_dsn() {
        use crate::connections::{ConnectionKind, Target};
        let c = PipelineConfig::parse(
            "name: p\nconnections:\n  crm:\n    kind: postgres\n    host: db\n    database: crm\n    user: u\n    password_env: CRM_PW\n  erp:\n    kind: postgresql\n    dsn_env: ERP_DSN\n",
        )
        .unwrap();
        assert_eq!(c.connections["crm"].kind, ConnectionKind::Postgres);
        assert_eq!(
            c.connections["crm"].target,
            Target::Parts {
                host: "db".into(),
                port: 5432,
                database: "crm".into(),
                user: "u".into(),
                password_env: Some("CRM_PW".into())
            }
        );
        assert_eq!(
            c.connections["erp"].target,
            Target::DsnEnv("ERP_DSN".into())
        );
        assert_eq!(c.connections["crm"].sslmode, None);
    }

    #[test]
    fn tls_settings_and_mysql_connections() {
        use crate::connections::{ClientCert, ConnectionKind, PemSource, SslMode, Target};
        let c = PipelineConfig::parse(
            "name: p
connections:
  crm:
    kind: postgres
    host: db
    database: crm
    user: u
    sslmode: verify-full
    sslrootcert: /ca.pem
    sslcert: /client.pem
    sslkey_env: CRM_KEY
  shop:
    kind: mariadb
    host: h
    database: s
    user: r
",
        )
        .unwrap();
        assert_eq!(c.connections["crm"].sslmode, Some(SslMode::VerifyFull));
        assert_eq!(c.connections["crm"].sslrootcert.as_deref(), Some("/ca.pem"));
        assert_eq!(
            c.connections["crm"].client_cert,
            Some(ClientCert {
                cert: PemSource::File("/client.pem".into()),
                key: PemSource::Env("CRM_KEY".into()),
            })
        );
        assert_eq!(c.connections["shop"].client_cert, None);
        for (lines, message) in [
            ("    sslcert: /c.pem\n", "needs its private key"),
            ("    sslkey_env: K\n", "needs its certificate"),
            (
                "    sslcert: /c.pem\n    sslcert_env: C\n    sslkey: /k.pem\n",
                "keep one",
            ),
            (
                "    sslcert: /c.pem\n    sslkey_env: not-a-name\n",
                "`sslkey_env` names an environment variable, and its value is not a variable's name",
            ),
        ] {
            let e = PipelineConfig::parse(&format!(
                "name: p\nconnections:\n  crm:\n    kind: postgres\n    host: db\n    database: crm\n    user: u\n{lines}"
            ))
            .expect_err(lines)
            .message;
            assert!(e.contains(message), "{lines}: {e}");
        }
        assert_eq!(c.connections["shop"].kind, ConnectionKind::Mysql);
        assert!(matches!(
            c.connections["shop"].target,
            Target::Parts { port: 3306, .. }
        ));
        let bad = PipelineConfig::parse(
            "name: p
connections:
  crm:
    kind: postgres
    host: db
    database: crm
    user: u
    sslmode: sometimes
",
        );
        assert!(
            format!("{bad:?}").contains("unknown variant `sometimes`"),
            "{bad:?}"
        );
    }

    #[test]
    fn a_bad_connection_is_an_error_at_its_entry() {
        // serde_yaml places an unknown key at itself, a bad value at the entry's first
        // key, and what is found once the entry is read whole at the entry's name.
        let cases = [
            (
                "    kind: oracle\n    host: h\n",
                "unknown variant `oracle`",
                4,
            ),
            (
                "    kind: postgres\n    host: h\n    database: d\n    user: u\n    password: hunter2\n",
                "never written in pipeline.yaml",
                4,
            ),
            (
                "    kind: postgres\n    host: h\n",
                "missing `database`, `user`",
                3,
            ),
            (
                "    kind: postgres\n    dsn_env: X\n    host: h\n",
                "remove `host`",
                3,
            ),
            (
                "    kind: postgres\n    dsn_env: 'not a name'\n",
                "names an environment variable",
                3,
            ),
            (
                "    kind: postgres\n    host: h\n    database: d\n    user: u\n    password_env: Hunter2\n",
                "looks like a password",
                3,
            ),
            (
                "    kind: postgres\n    hots: h\n",
                "unknown field `hots`",
                5,
            ),
        ];
        for (body, wanted, line) in cases {
            let e = PipelineConfig::parse(&format!("name: p\nconnections:\n  crm:\n{body}"))
                .unwrap_err();
            assert!(e.message.contains(wanted), "{body}: {}", e.message);
            // A value where a variable's name belongs may be the secret: never echoed.
            assert!(
                !e.message.contains("Hunter2") && !e.message.contains("not a name"),
                "{}",
                e.message
            );
            assert!(
                e.message.starts_with("connections"),
                "{body}: {}",
                e.message
            );
            assert_eq!(e.line, Some(line), "{body}: {}", e.message);
        }
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        /// YAML-shaped text: the keys pipeline.yaml knows and some it does not, with
        /// scalars, lists, maps, anchors and broken indentation.
        fn yamlish() -> impl Strategy<Value = String> {
            let key = prop_oneof![
                Just("name"),
                Just("storage"),
                Just("libraries"),
                Just("configuration"),
                Just("bad_records"),
                Just("trigger_interval_seconds"),
                Just("landing_settle_seconds"),
                Just("follow_symlinks_out_of_landing"),
                Just("x.y"),
                Just("&a"),
                Just("*a"),
                Just("<<"),
            ];
            let value = prop_oneof![
                Just(String::new()),
                Just("p".to_string()),
                Just("- a\n  - b".to_string()),
                Just("{a: 1, b: [2, 3]}".to_string()),
                Just("quarantine".to_string()),
                Just("fail".to_string()),
                Just(".inf".to_string()),
                Just("1e300".to_string()),
                Just("'unterminated".to_string()),
                Just("!!binary x".to_string()),
                "[ -~]{0,12}",
            ];
            proptest::collection::vec((key, value, 0usize..4), 0..8).prop_map(|lines| {
                lines
                    .into_iter()
                    .map(|(k, v, indent)| format!("{}{k}: {v}\n", " ".repeat(indent)))
                    .collect()
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn the_loader_never_panics_on_yamlish_text(text in yamlish()) {
                let _ = PipelineConfig::parse(&text);
            }

            #[test]
            fn the_loader_never_panics_on_any_text(text in "\\PC{0,200}") {
                let _ = PipelineConfig::parse(&text);
            }
        }
    }
}
