//! Errors of a run, each with the context a user needs to act on it.

use std::path::PathBuf;

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use deltalake::DeltaTableError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Input that cannot be applied (null keys, rewritten sources, …).
    #[error("{message}")]
    Input {
        message: String,
        help: Option<String>,
    },
    /// A streaming source that removed rows its reader had read (a full refresh
    /// rewrote it): the reader's table must be refreshed too.
    #[error("{message}")]
    Rewritten {
        message: String,
        help: String,
        version: i64,
    },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("Delta table {path}: {source}")]
    Delta {
        path: PathBuf,
        #[source]
        source: DeltaTableError,
    },
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// What only a defect of cdcflow can cause, never a user's input.
    #[error("internal error: {0} (a bug in cdcflow; nothing was changed by this step)")]
    Internal(String),
}

impl RunError {
    pub fn input(message: impl Into<String>) -> Self {
        Self::Input {
            message: message.into(),
            help: None,
        }
    }

    pub fn with_help(self, help: impl Into<String>) -> Self {
        match self {
            Self::Input { message, .. } => Self::Input {
                message,
                help: Some(help.into()),
            },
            other => other,
        }
    }

    pub fn help(&self) -> Option<&str> {
        match self {
            Self::Input { help, .. } => help.as_deref(),
            Self::Rewritten { help, .. } => Some(help),
            _ => None,
        }
    }

    /// The message and, when there is one, its help, on one line.
    pub fn with_help_inline(&self) -> String {
        match self.help() {
            Some(help) => format!("{self} ({help})"),
            None => self.to_string(),
        }
    }

    /// Streaming source `source` removed rows at `version` (a full refresh rewrote it);
    /// `readers` are the tables that read it as a stream, which fail until refreshed.
    pub fn rewritten(source: &str, version: i64, readers: &[String]) -> Self {
        let message = format!(
            "`{source}` was rewritten at version {version} (a full refresh?) after this flow read it: a streaming read needs an append-only source"
        );
        let help = match readers {
            [] => "run --full-refresh on the tables reading it as a stream".to_string(),
            _ => {
                let list = readers.join(" ");
                format!(
                    "the tables that read `{source}` as a stream fail until they are refreshed too: run `cdcflow run --full-refresh {list}` (next time, `--full-refresh {source} --cascade` refreshes them in the same run)"
                )
            }
        };
        Self::Rewritten {
            message,
            help,
            version,
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::Internal(message.into())
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::StorageFull {
            return Self::disk_full(&path);
        }
        Self::Io { path, source }
    }

    pub fn delta(path: impl Into<PathBuf>, source: DeltaTableError) -> Self {
        let path = path.into();
        // deltalake passes object_store's I/O errors on as text.
        let text = source.to_string();
        if text.contains("No space left on device") || text.contains("os error 28") {
            return Self::disk_full(&path);
        }
        Self::Delta { path, source }
    }

    /// A write that found its disk full, named by what it was writing.
    fn disk_full(path: &std::path::Path) -> Self {
        Self::input(format!(
            "no space left on device while writing {}",
            path.display()
        ))
        .with_help("free space on the disk of the pipeline's storage folder and run again: what was not committed is read again, what was is kept")
    }
}
