//! `pipeline.yaml`: the pipeline's name, where its tables live, which SQL files
//! define it and the `${key}` configuration substituted into them.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The settings of one pipeline folder.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Required; names the pipeline in messages, locks and the event log.
    pub name: String,
    /// Where tables and checkpoints live, relative to the pipeline folder.
    #[serde(default = "default_storage")]
    pub storage: String,
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
    /// landing folders are rescanned where file notifications are unavailable.
    #[serde(default = "default_trigger_interval")]
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

fn default_libraries() -> Vec<String> {
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
