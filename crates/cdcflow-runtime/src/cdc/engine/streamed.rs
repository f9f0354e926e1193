//! A batch applied while the stored tables stream through (`touched.rs` says what is
//! decided): each core reads its share of the state's row groups, sets the members
//! aside and writes the kept rows straight into a new state file; then the same for the
//! published rows, where the untouched ones go to a new published file and the member
//! upserts' values are set aside. The kernel decides the members, and its rows are
//! added as files of their own. Neither table is ever held whole, so memory follows
//! the batch and its touched keys, not the tables.
//!
//! Taken when both tables exist and can be written file by file (`delta::rewrite`),
//! and the batch touches some keys only; otherwise `cdc::apply` works in memory.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;

use super::touched::Touch;
use crate::RunError;
use crate::cdc::kernel::{Applied, ApplyMetrics, Rules, filtered};
use crate::delta::{self, Commit, Mode, Staged, Table, rewrite};

/// Both tables staged, and what the apply did.
pub struct Streamed {
    pub public: Staged,
    pub state: Staged,
    pub metrics: ApplyMetrics,
    /// Rows of the new published table.
    pub public_rows: usize,
    /// How both commits change their tables.
    pub mode: Mode,
}

impl Streamed {
    /// A batch applied in memory, both tables' files encoded together.
    pub async fn staged(
        applied: Applied,
        rules: &Rules,
        targets: &Targets<'_>,
    ) -> Result<Self, RunError> {
        let public_rows = applied.public_rows();
        let (public_schema, state_schema) = (rules.public_schema(), rules.state_schema());
        let (public, state) = tokio::try_join!(
            delta::stage(
                &targets.public.at,
                &public_schema,
                applied.public,
                targets.public_commit
            ),
            delta::stage(
                &targets.state.at,
                &state_schema,
                applied.state,
                targets.state_commit
            ),
        )?;
        Ok(Self {
            public,
            state,
            metrics: applied.metrics,
            public_rows,
            mode: Mode::Overwrite,
        })
    }

    /// Commits the published table, then the state: a crash between the two repeats
    /// the batch, which changes nothing in the published table (`touched.rs`).
    pub async fn commit(self, targets: &Targets<'_>) -> Result<(), RunError> {
        self.public.commit(self.mode, targets.public_commit).await?;
        self.state.commit(self.mode, targets.state_commit).await
    }
}

/// The tables a batch rewrites: where they are and what their commits record.
pub struct Targets<'a> {
    pub state: &'a Table,
    pub state_commit: &'a Commit,
    pub public: &'a Table,
    pub public_commit: &'a Commit,
}

/// Applies `events` with the tables streaming through, staging both tables' files;
/// `None` when the batch must be applied in memory (known before anything is written).
pub async fn apply(
    rules: &Rules,
    targets: &Targets<'_>,
    events: &RecordBatch,
    now_micros: i64,
) -> Result<Option<Streamed>, RunError> {
    let (state_schema, public_schema) = (rules.state_schema(), rules.public_schema());
    let rewritable = targets
        .state
        .rewritable(&state_schema, targets.state_commit)
        && targets
            .public
            .rewritable(&public_schema, targets.public_commit);
    if !rewritable {
        return Ok(None);
    }
    let touch = Arc::new(Touch::new(rules, events, false, now_micros)?);
    if touch.every_key() {
        return Ok(None);
    }
    let splitter = Arc::clone(&touch);
    let Some((state, members)) = rewrite(
        &targets.state.fetched_files().await?,
        &state_schema,
        targets.state,
        &state_schema,
        targets.state_commit,
        move |batch| {
            let (members, kept) = splitter.split(&batch)?;
            Ok((kept, members))
        },
    )
    .await?
    else {
        return Ok(None);
    };
    let members: Vec<RecordBatch> = members.into_iter().flatten().collect();
    let members = concat_batches(&state_schema, &members)?;
    let wanted = Arc::new(touch.wanted(&members)?);
    let prober = Arc::clone(&touch);
    let Some((public, probed)) = rewrite(
        &targets.public.fetched_files().await?,
        &public_schema,
        targets.public,
        &public_schema,
        targets.public_commit,
        move |batch| {
            let probed = prober.probe(&batch, wanted.as_ref().as_ref())?;
            let untouched = filtered(&batch, &probed.keep)?;
            let kept_rows = untouched.as_ref().map_or(0, RecordBatch::num_rows);
            Ok((untouched, (probed.hits, kept_rows)))
        },
    )
    .await?
    else {
        return Ok(None);
    };
    let (hits, kept): (Vec<_>, Vec<usize>) = probed.into_iter().unzip();
    let decided = touch.decide(members, hits, events.clone())?;
    let public_rows = kept.iter().sum::<usize>()
        + decided
            .public
            .iter()
            .map(RecordBatch::num_rows)
            .sum::<usize>();
    let (public, state) = tokio::try_join!(public.with(decided.public), state.with(decided.state))?;
    Ok(Some(Streamed {
        public,
        state,
        metrics: decided.metrics,
        public_rows,
        mode: Mode::Overwrite,
    }))
}
