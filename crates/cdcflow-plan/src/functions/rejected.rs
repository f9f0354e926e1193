//! Values a function set apart instead of failing the query (`debezium(…, map('mode',
//! 'QUARANTINE'))`), handed to the run that executes the query so that it keeps them in
//! the target's quarantine table, in the commit of the batch they came in.
//!
//! The run puts a [`Rejected`] in the session's configuration for one execution; a
//! function finds it in its call's `config_options`. Where there is none (a view read
//! by AUTO CDC, a materialized view, `cdcflow query`), nothing keeps the values, and the
//! function fails as it would without the option, saying where it works.

use std::any::Any;
use std::sync::{Arc, Mutex};

use datafusion::common::config::{ConfigEntry, ConfigExtension, ConfigOptions, ExtensionOptions};
use datafusion::common::{Result, config_err};

/// One value a function could not read: its text and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedValue {
    /// The function that refused it (`debezium()`).
    pub function: &'static str,
    pub text: String,
    pub error: String,
}

/// The values set apart during one execution.
///
/// DataFusion copies configuration extensions when it copies a session's options
/// (`cloned`), and asks that a copy share no state; this one shares its list on
/// purpose: it is the execution's output channel, not a setting, and every copy made
/// for the execution must report into the list the run reads afterwards.
#[derive(Debug, Clone, Default)]
pub struct Rejected(Arc<Mutex<Vec<RejectedValue>>>);

impl Rejected {
    /// The collector of `config`, if the run gave it one.
    pub fn of(config: &ConfigOptions) -> Option<&Rejected> {
        config.extensions.get::<Rejected>()
    }

    pub fn push(&self, value: RejectedValue) {
        if let Ok(mut list) = self.0.lock() {
            list.push(value);
        }
    }

    /// Everything set apart so far, in the order it came.
    pub fn take(&self) -> Vec<RejectedValue> {
        self.0
            .lock()
            .map(|mut list| std::mem::take(&mut *list))
            .unwrap_or_default()
    }
}

impl ConfigExtension for Rejected {
    const PREFIX: &'static str = "cdcflow_rejected";
}

impl ExtensionOptions for Rejected {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, _value: &str) -> Result<()> {
        config_err!("`{}.{key}` is not a setting", Self::PREFIX)
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        vec![]
    }
}
