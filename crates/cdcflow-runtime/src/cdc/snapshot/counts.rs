//! What the snapshots of a run did, as its report shows them.

/// What a snapshot did to the target's rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    pub unchanged: u64,
}

/// One snapshot a run applied.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AppliedSnapshot {
    pub version: String,
    #[serde(flatten)]
    pub counts: Counts,
}
