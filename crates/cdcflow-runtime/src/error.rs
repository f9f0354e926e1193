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
            _ => None,
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::Internal(message.into())
    }

    pub fn delta(path: impl Into<PathBuf>, source: DeltaTableError) -> Self {
        Self::Delta {
            path: path.into(),
            source,
        }
    }
}
