//! A target's first batch split over workers. A first batch on one machine writes both
//! tables as it creates them (`engine/partitioned.rs`); split, it needs tables to
//! merge into. So both are created empty first, the published table then the state,
//! and the batch then goes the way of later ones: each slice writes files of its own
//! keys, tagged with their buckets. The empty tables' commits carry neither the batch's
//! transaction nor its offsets, so a run stopped after them applies the batch again.

use cdcflow_plan::autocdc::AutoCdcSpec;
use cdcflow_plan::table_properties::DELETION_VECTORS;

use super::kernel::Rules;
use crate::RunError;
use crate::delta::{self, Commit, Mode, Operation, Table};

/// `tables` (state, published), created empty when neither exists and a batch of
/// `spec`'s flow can be split over workers once they do: both take deletion vectors,
/// neither is partitioned or clustered, and the flow has no APPLY AS TRUNCATE and no
/// computed column (`exec::ApplyTarget::slices_for`).
pub(super) async fn created_empty(
    spec: &AutoCdcSpec,
    rules: &Rules,
    (state, public): (Table, Table),
    (state_commit, public_commit): (&Commit, &Commit),
) -> Result<(Table, Table), RunError> {
    let takes_vectors = |c: &Commit| {
        c.configuration.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case(DELETION_VECTORS) && v.eq_ignore_ascii_case("true")
        })
    };
    let laid_out = |c: &Commit| {
        !c.cluster_columns.is_empty() || c.partition_columns.as_ref().is_some_and(|p| !p.is_empty())
    };
    if state.exists()
        || public.exists()
        || !super::slice::splittable(spec, rules)
        || !takes_vectors(state_commit)
        || !takes_vectors(public_commit)
        || laid_out(public_commit)
    {
        return Ok((state, public));
    }
    let empty = |c: &Commit| Commit {
        txns: vec![],
        offsets: None,
        landing_files: vec![],
        operation: Operation::Write,
        ..c.clone()
    };
    // The published table first: a state without it would be a lost published table.
    delta::write(
        &public.at,
        &rules.public_schema(),
        vec![],
        Mode::Overwrite,
        &empty(public_commit),
    )
    .await?;
    delta::write(
        &state.at,
        &rules.state_schema(),
        vec![],
        Mode::Overwrite,
        &empty(state_commit),
    )
    .await?;
    Ok((
        Table::open(&state.at).await?,
        Table::open(&public.at).await?,
    ))
}
