//! What applying a batch of change events can fail with: the apply's own error, apart
//! from the run's. The kernel works on arrays it built itself from checked events, so
//! an Arrow failure inside it is a defect; what a user can cause (a batch beyond the
//! apply's row positions, a generated column that fails on the data, a published table
//! edited outside the pipeline) has a variant of its own.

use datafusion::arrow::error::ArrowError;

use crate::{ErrorCode, RunError};

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// More rows than the apply's 32-bit row positions can name.
    #[error("more than 2^32 {what} in one batch")]
    TooManyRows { what: &'static str },
    /// Keys live in the state have no row in the published table.
    #[error(
        "{keys} key(s) live in the AUTO CDC state have no row in the published table (was it changed outside the pipeline?)"
    )]
    LostValues { keys: usize },
    /// A generated column's expression failed on the batch, or gave null where the
    /// column is NOT NULL.
    #[error("generated column `{column}`: {message}")]
    Generated { column: String, message: String },
    /// What the apply's own bookkeeping should have made impossible.
    #[error("{0}")]
    Defect(String),
    /// An Arrow kernel failed on the apply's arrays.
    #[error(transparent)]
    Arrow(#[from] ArrowError),
}

impl ApplyError {
    pub(crate) fn too_many(what: &'static str) -> Self {
        Self::TooManyRows { what }
    }
}

impl From<ApplyError> for RunError {
    fn from(e: ApplyError) -> Self {
        match e {
            ApplyError::TooManyRows { .. } => RunError::user(ErrorCode::BatchTooLarge, e.to_string())
                .with_help("a batch takes every new input at once: run the pipeline more often, or land the changes in smaller runs, so each batch stays under 2^32 rows"),
            ApplyError::LostValues { .. } => RunError::user(ErrorCode::Input, e.to_string())
                .with_help("run a full refresh of the table: `cdcflow run --full-refresh <table>`"),
            ApplyError::Generated { .. } => RunError::user(ErrorCode::Query, e.to_string()),
            // A batch too large for Arrow's 32-bit offsets is the data's size, and a key
            // of a type Arrow cannot compare or hash is the table's: neither is a bug.
            ApplyError::Arrow(
                a @ (ArrowError::OffsetOverflowError(_) | ArrowError::NotYetImplemented(_)),
            ) => RunError::Arrow(a),
            ApplyError::Arrow(a) => {
                RunError::internal(a.to_string()).context(|| "applying change events".into())
            }
            ApplyError::Defect(message) => {
                RunError::internal(message).context(|| "applying change events".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_user_can_cause_keeps_a_users_code_and_arrow_failures_are_defects() {
        let too_many = RunError::from(ApplyError::too_many("rows"));
        assert_eq!(too_many.code(), ErrorCode::BatchTooLarge);
        assert!(too_many.help().is_some_and(|h| h.contains("2^32")));

        let lost = RunError::from(ApplyError::LostValues { keys: 3 });
        assert!(lost.help().is_some_and(|h| h.contains("--full-refresh")));

        let defect = RunError::from(ApplyError::Arrow(ArrowError::ComputeError("x".into())));
        assert!(defect.is_internal());
        assert!(
            defect.to_string().contains("while applying change events"),
            "{defect}"
        );

        let unsupported = RunError::from(ApplyError::Arrow(ArrowError::NotYetImplemented(
            "row format for Map".into(),
        )));
        assert_eq!(unsupported.code(), ErrorCode::Data);
    }
}
