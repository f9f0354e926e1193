//! What a read says while it waits on the server, as it waits: a run that sits silent
//! behind another session's transaction looks hung. The command that runs the
//! pipeline decides where it goes (stderr, above a progress line); without one it is
//! logged.

use std::sync::Arc;

/// Something told a line of text.
type Tell = Arc<dyn Fn(&str) + Send + Sync>;

/// Where a read's notices go.
#[derive(Clone, Default)]
pub struct Notices(Option<Tell>);

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notices")
    }
}

impl Notices {
    /// Notices told to `tell`.
    pub fn to(tell: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(tell)))
    }

    pub(crate) fn say(&self, text: &str) {
        match &self.0 {
            Some(tell) => tell(text),
            None => tracing::warn!("{text}"),
        }
    }
}
