//! The table properties (`TBLPROPERTIES`) whose values cdcflow reads: named once, for
//! validate, which checks their values, and the run, which acts on them.

/// How long an SCD type 1 tombstone is kept, in seconds (Databricks' name).
pub const TOMBSTONE_RETENTION: &str = "pipelines.cdc.tombstoneGCThresholdInSeconds";
/// Two days, the Databricks default.
pub const DEFAULT_TOMBSTONE_RETENTION_SECS: i64 = 2 * 24 * 3600;
/// `false`: a full refresh leaves the table as it is.
pub const RESET_ALLOWED: &str = "pipelines.reset.allowed";
/// Whether a table's rows may be deleted by deletion vectors (merge-on-write).
pub const DELETION_VECTORS: &str = "delta.enableDeletionVectors";
