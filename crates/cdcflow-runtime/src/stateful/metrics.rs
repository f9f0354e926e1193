//! What a batch did to a stateful operator's state, under Spark's names for its state
//! operator metrics, and how it is said.

/// What one batch did to the state, as Spark's state operator metrics name it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StateMetrics {
    /// Groups held after the batch (`numRowsTotal`).
    pub rows_total: u64,
    /// Groups the batch's rows updated or created (`numRowsUpdated`).
    pub rows_updated: u64,
    /// Groups the watermark closed, emitted and removed (`numRowsRemoved`).
    pub rows_removed: u64,
    /// The most state held in memory at once during the batch: the largest bucket
    /// merged (`memoryUsedBytes`; the state itself is on disk).
    pub memory_used_bytes: u64,
    /// The state's files on disk after the batch.
    #[serde(default)]
    pub state_bytes: u64,
    /// Rows (one per window) dropped as late (`numRowsDroppedByWatermark`).
    pub rows_dropped_by_watermark: u64,
    /// Rows a deduplication dropped as duplicates of a kept key
    /// (`numDroppedDuplicateRows`).
    #[serde(default)]
    pub duplicates_dropped: u64,
    /// The watermark after the batch, in microseconds since the epoch.
    pub watermark_micros: i64,
}

impl StateMetrics {
    /// One line, as the event log, `run` and `status` show it.
    pub fn summary(&self) -> String {
        // A deduplication's drops, when it had any.
        let duplicates = match self.duplicates_dropped {
            0 => String::new(),
            n => format!(", {n} duplicate(s) dropped"),
        };
        format!(
            "{} row(s) held ({} updated, {} closed or let go; {} bytes on disk, {} in memory), {} row(s) dropped as late{duplicates}, watermark {}",
            self.rows_total,
            self.rows_updated,
            self.rows_removed,
            self.state_bytes,
            self.memory_used_bytes,
            self.rows_dropped_by_watermark,
            format_micros(self.watermark_micros)
        )
    }
}

/// A time in microseconds since the epoch, as `cdcflow query` prints a TIMESTAMP.
pub fn format_micros(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string())
        .unwrap_or_else(|| micros.to_string())
}
