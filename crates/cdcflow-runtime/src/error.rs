//! Errors of a run, in two kinds: what a user can cause and act on (bad input, a source
//! that changed under a reader, a full disk, a file or table that cannot be read), each
//! with a stable [`ErrorCode`] and, where there is one, a help line; and what only a
//! defect of cdcflow can cause ([`RunError::Internal`]), whose message asks for a report
//! and carries the context it happened in. [`RunError`] is a [`miette::Diagnostic`], so
//! the CLI renders both the way it renders validation diagnostics.

use std::fmt;
use std::path::PathBuf;

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use deltalake::DeltaTableError;

/// The stable code of a user's error, as `cdcflow::run::…` (docs/diagnostics.md lists
/// them). Scripts may match on it; the message text may change between releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Input that cannot be applied as it is (the message says what and where).
    Input,
    /// A KEYS column is null in a change event.
    NullKey,
    /// A SEQUENCE BY value is null in a change event.
    NullSequence,
    /// A streaming source was rewritten after a reader read it.
    SourceRewritten,
    /// The disk of the pipeline's storage is full.
    DiskFull,
    /// Another run holds the pipeline's lock.
    Locked,
    /// A source server (PostgreSQL, MySQL, Kafka) refused or failed.
    Source,
    /// A source server could not be reached (the connection refused or broke, the
    /// server starting or shutting down): trying again later may succeed.
    SourceUnreachable,
    /// A file cannot be read or parsed.
    File,
    /// A Delta table cannot be read or committed.
    Delta,
    /// The file system refused an operation.
    Io,
    /// A query or expression failed while it ran.
    Query,
    /// Data that Arrow cannot represent or convert.
    Data,
    /// A batch larger than the apply can address.
    BatchTooLarge,
    /// A defect of cdcflow.
    Internal,
}

impl ErrorCode {
    /// The code as printed and as matched by scripts.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Input => "cdcflow::run::input",
            Self::NullKey => "cdcflow::run::null_key",
            Self::NullSequence => "cdcflow::run::null_sequence",
            Self::SourceRewritten => "cdcflow::run::source_rewritten",
            Self::DiskFull => "cdcflow::run::disk_full",
            Self::Locked => "cdcflow::run::locked",
            Self::Source => "cdcflow::run::source",
            Self::SourceUnreachable => "cdcflow::run::source_unreachable",
            Self::File => "cdcflow::run::file",
            Self::Delta => "cdcflow::run::delta",
            Self::Io => "cdcflow::run::io",
            Self::Query => "cdcflow::run::query",
            Self::Data => "cdcflow::run::data",
            Self::BatchTooLarge => "cdcflow::run::batch_too_large",
            Self::Internal => "cdcflow::internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Input that cannot be applied (null keys, rewritten sources, …).
    #[error("{message}")]
    Input {
        code: ErrorCode,
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
    DataFusion(DataFusionError),
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// What only a defect of cdcflow can cause, never a user's input: the message, and
    /// what was being done, innermost first.
    #[error("{}", internal_message(message, context))]
    Internal {
        message: String,
        context: Vec<String>,
    },
}

impl From<DataFusionError> for RunError {
    /// A run error that an execution plan of cdcflow's carried through DataFusion
    /// (`cdc::exec`) comes out as itself, with its code and help.
    fn from(e: DataFusionError) -> Self {
        match e {
            DataFusionError::External(inner) => match inner.downcast::<RunError>() {
                Ok(run) => *run,
                Err(inner) => Self::DataFusion(DataFusionError::External(inner)),
            },
            DataFusionError::Context(context, inner) => match RunError::from(*inner) {
                Self::DataFusion(inner) => {
                    Self::DataFusion(DataFusionError::Context(context, Box::new(inner)))
                }
                run => run,
            },
            e => Self::DataFusion(e),
        }
    }
}

/// An internal error's text: what happened, where, and that it is a bug to report.
fn internal_message(message: &str, context: &[String]) -> String {
    let mut text = format!("internal error: {message}");
    for c in context {
        text.push_str(&format!(", while {c}"));
    }
    text.push_str(
        " (a bug in cdcflow, not in the pipeline: please report it with this message and the command; nothing was changed by this step)",
    );
    text
}

impl RunError {
    pub fn input(message: impl Into<String>) -> Self {
        Self::Input {
            code: ErrorCode::Input,
            message: message.into(),
            help: None,
        }
    }

    /// A user's error of a specific kind.
    pub fn user(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Input {
            code,
            message: message.into(),
            help: None,
        }
    }

    pub fn with_help(self, help: impl Into<String>) -> Self {
        match self {
            Self::Input { code, message, .. } => Self::Input {
                code,
                message,
                help: Some(help.into()),
            },
            other => other,
        }
    }

    /// The same error, saying for an internal one what was being done when it happened
    /// (a user's error already names what it is about).
    pub fn context(self, doing: impl FnOnce() -> String) -> Self {
        match self {
            Self::Internal {
                message,
                mut context,
            } => {
                context.push(doing());
                Self::Internal { message, context }
            }
            Self::DataFusion(e) if is_internal_datafusion(&e) => {
                Self::internal(e.to_string()).context(doing)
            }
            other => other,
        }
    }

    /// Whether this is a defect of cdcflow rather than something a user can act on.
    pub fn is_internal(&self) -> bool {
        self.code() == ErrorCode::Internal
    }

    /// The error's stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Input { code, .. } => *code,
            Self::Rewritten { .. } => ErrorCode::SourceRewritten,
            Self::File { .. } => ErrorCode::File,
            Self::Delta { .. } => ErrorCode::Delta,
            Self::DataFusion(e) if is_internal_datafusion(e) => ErrorCode::Internal,
            Self::DataFusion(_) => ErrorCode::Query,
            Self::Arrow(_) => ErrorCode::Data,
            Self::Io { .. } => ErrorCode::Io,
            Self::Internal { .. } => ErrorCode::Internal,
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
        Self::Internal {
            message: message.into(),
            context: Vec::new(),
        }
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
        Self::user(
            ErrorCode::DiskFull,
            format!("no space left on device while writing {}", path.display()),
        )
        .with_help("free space on the disk of the pipeline's storage folder and run again: what was not committed is read again, what was is kept")
    }
}

/// DataFusion's own defects, apart from what a query or its data can cause.
fn is_internal_datafusion(e: &DataFusionError) -> bool {
    matches!(e.find_root(), DataFusionError::Internal(_))
}

impl miette::Diagnostic for RunError {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(RunError::code(self)))
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        RunError::help(self).map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_error_has_its_code_and_help_and_a_defect_asks_for_a_report() {
        let user =
            RunError::user(ErrorCode::NullKey, "2 rows with a null key").with_help("filter them");
        assert_eq!(user.code().as_str(), "cdcflow::run::null_key");
        assert_eq!(user.help(), Some("filter them"));
        assert!(!user.is_internal());

        let bug = RunError::internal("a column went missing")
            .context(|| "applying flow `f`".into())
            .context(|| "batch 3".into());
        assert!(bug.is_internal());
        let text = bug.to_string();
        assert!(
            text.starts_with(
                "internal error: a column went missing, while applying flow `f`, while batch 3"
            ),
            "{text}"
        );
        assert!(text.contains("please report it"), "{text}");
    }

    #[test]
    fn datafusion_errors_are_a_users_unless_datafusion_calls_them_internal() {
        let plan = RunError::from(DataFusionError::Plan("no such column".into()));
        assert_eq!(plan.code(), ErrorCode::Query);
        let defect = RunError::from(DataFusionError::Internal("bad state".into()));
        assert!(defect.is_internal());
        let wrapped = defect.context(|| "running flow `g`".into());
        assert!(matches!(wrapped, RunError::Internal { .. }), "{wrapped}");
    }
}
