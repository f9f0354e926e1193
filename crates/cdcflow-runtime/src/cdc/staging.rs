//! How a batch is applied: by the cheapest way its target's tables allow. A target's
//! first batch a partition of its keys at a time (`partitioned.rs`); later ones by
//! merge-on-write where both tables take deletion vectors (`merged.rs`, the default);
//! else streaming through both tables (`streamed.rs`); else, for what none of these
//! takes, in memory (left to the caller, who knows the target).

use datafusion::arrow::array::RecordBatch;

use super::events::concat_parts;
use super::kernel::Rules;
use super::streamed::{Streamed, Targets};
use super::{merged, partitioned, streamed};
use crate::RunError;

/// A staged batch, or its events back when only the in-memory apply can take it.
pub enum Staging {
    Staged(Box<Streamed>),
    InMemory(RecordBatch),
}

/// Applies `events` to `targets` and stages both tables' files, without committing.
pub async fn stage(
    rules: &Rules,
    targets: &Targets<'_>,
    events: Vec<RecordBatch>,
    now_micros: i64,
) -> Result<Staging, RunError> {
    if let Some(done) = partitioned::apply(rules, targets, &events, now_micros).await? {
        return Ok(Staging::Staged(Box::new(done)));
    }
    let events = concat_parts(&rules.event_schema(), events)?;
    if let Some(merge) = merged::prepare(rules, targets, &events, now_micros)? {
        return Ok(Staging::Staged(Box::new(
            merge.apply(targets, events).await?,
        )));
    }
    if let Some(done) = streamed::apply(rules, targets, &events, now_micros).await? {
        return Ok(Staging::Staged(Box::new(done)));
    }
    Ok(Staging::InMemory(events))
}
