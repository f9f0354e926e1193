//! An AUTO CDC FROM SNAPSHOT flow in a run (`cdcflow_plan::snapshot`): for each
//! snapshot to apply, in version order, its rows are compared with the target's current
//! rows (`diff.rs`) and the differences are applied and committed as one AUTO CDC batch
//! sequenced by the version, with the version in the batch's offsets. The next
//! `last_snapshot_version()` is that committed version.
//!
//! A periodic flow (no WITH VERSION) applies one snapshot per run, versioned by the
//! run's start. A flow WITH VERSION asks its version query for the next version until
//! it gives no row; a version not after the last applied one is refused.

pub(crate) mod counts;
mod diff;
mod fold;
mod version;

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

use cdcflow_plan::autocdc::{AutoCdcSpec, END_AT};
use cdcflow_plan::planner::Planner;
use cdcflow_plan::snapshot::{self, DELETED_COLUMN, SnapshotSpec, VERSION_COLUMN};
use cdcflow_plan::stored_shape::Shape;
use cdcflow_plan::{Flow, Input};
use datafusion::arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{Field, SchemaRef};
use datafusion::catalog::view::ViewTable;
use datafusion::common::ScalarValue;
use datafusion::datasource::{MemTable, provider_as_source};
use futures::StreamExt;

pub use counts::{AppliedSnapshot, Counts};

/// Snapshot batches hashed ahead of the one being looked up.
const HASHED_AHEAD: usize = 2;

/// Casts that fail rather than give nulls: a snapshot's rows have the types the flow
/// was planned with, so a value that does not cast is a fault to say, not a null.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: datafusion::arrow::util::display::FormatOptions::new(),
};
use diff::{Columns, Current};
use version::{OFFSETS_KEY, Version};

use super::exec::BatchSource;
use super::flow::{Batch, Prepared};
use super::rules::ApplyMetrics;
use crate::checkpoint::{Offsets, Processed};
use crate::context::RunContext;
use crate::delta::Table;
use crate::inputs::BatchInputs;
use crate::report::{FlowOutcome, FlowReport};
use crate::{RunError, layout};

pub(crate) async fn run(
    rc: &RunContext,
    flow: &Flow,
    spec: &Arc<AutoCdcSpec>,
    report: &mut FlowReport,
) -> Result<(), RunError> {
    let snapshot = spec
        .snapshot
        .as_ref()
        .ok_or_else(|| RunError::internal("a snapshot run of a flow without a snapshot"))?;
    let Prepared {
        target,
        source,
        source_schema,
        rules,
    } = super::flow::prepare(rc, flow, spec)?;
    let app = layout::app_id(&flow.name);
    let checkpoint = rc.checkpoint(flow)?;
    let shape = Shape::of(spec);
    let (state_dir, public_dir) = (
        layout::state_dir(&rc.storage, &target.name)?,
        layout::table_dir(&rc.storage, target)?,
    );
    let mut metrics = ApplyMetrics::default();
    loop {
        let state = Table::open(&state_dir).await?;
        let public = Table::open(&public_dir).await?;
        let committed = state.txn_version(&app).await?;
        if committed.is_some() {
            super::flow::check_shape(&shape, checkpoint.shape().await?, &target.name)?;
        }
        let progress = checkpoint.load(&state, &app).await?;
        let batch = progress.next_batch();
        let last = last_version(&progress, snapshot)?;
        if snapshot.version_view.is_none() && !report.snapshots.is_empty() {
            break; // a periodic flow applies one snapshot per run
        }
        let (next, base) = match public.txn_version(&app).await? > committed {
            // The published table took this batch and the state did not: the batch's
            // version is applied again, compared with the rows before it.
            true => (
                Some(ahead_version(&public, &app, batch, snapshot).await?),
                Some(published_before(&public_dir, &app, committed).await?),
            ),
            false => (
                next_version(rc, flow, snapshot, last.as_ref(), batch, report).await?,
                None,
            ),
        };
        let Some(version) = next else {
            break;
        };
        if let Some(last) = &last
            && version.cmp(last)? != Ordering::Greater
        {
            return Err(out_of_order(flow, &version, last));
        }
        let label = format!("snapshot {} of flow `{}`", version.display(), flow.name);
        // A batch applied again is compared with what the published table took of it,
        // not with its snapshot read again: a periodic snapshot's source may have
        // changed since, and the state must take what the published table took.
        let snapshot_rows = match base.is_some() {
            true => SnapshotRows::Published(&public),
            false => SnapshotRows::Query(&source.name),
        };
        let (events, counts, warnings) = compare(
            rc,
            spec,
            snapshot_rows,
            snapshot,
            &version,
            base.as_ref().unwrap_or(&public),
            &source_schema,
            &label,
            batch,
        )
        .await?;
        report.warnings.extend(warnings);
        report.rows_read += counts.inserted + counts.updated + counts.unchanged;
        if counts.inserted + counts.updated + counts.unchanged == 0 && counts.deleted > 0 {
            report.warnings.push(format!(
                "{label} is empty: all {} rows of `{}` were deleted",
                counts.deleted, target.name
            ));
        }
        let mut offsets = Offsets {
            batch,
            ..Offsets::default()
        };
        offsets
            .positions
            .insert(OFFSETS_KEY.to_string(), version.to_json()?);
        let applied = super::flow::apply_batch(
            rc,
            flow,
            spec,
            Batch {
                target,
                rules: rules.clone(),
                source_schema: &source_schema,
                tables: (state, public),
                checkpoint: &checkpoint,
                shape: &shape,
                number: batch,
                offsets,
                read: BatchSource::Rows(events),
            },
        )
        .await?;
        metrics.add(&applied.metrics);
        report.rows_written = applied.rows_written;
        report.warnings.extend(applied.note);
        report.snapshots.push(AppliedSnapshot {
            version: version.display(),
            counts,
        });
        report.cdc = Some(metrics);
        report.outcome = FlowOutcome::Committed { batch };
    }
    Ok(())
}

/// How a run applies the flow, for `cdcflow explain`.
pub(crate) fn explain(spec: &AutoCdcSpec) -> String {
    let versions = match spec
        .snapshot
        .as_ref()
        .and_then(|s| s.version_view.as_deref())
    {
        Some(view) => {
            format!("each version the view `{view}` gives, in order, until it gives none")
        }
        None => "one snapshot per run, versioned by the run's start time".to_string(),
    };
    format!(
        "AutoCdcFromSnapshot: {versions}\n  read `{}` whole and compare it by KEYS ({}) with the current rows of `{}` (their keys and a digest of their values)\n  apply the inserts, updates and deletes as one AUTO CDC batch (SCD type {}) sequenced by the version\n",
        spec.source,
        spec.keys.join(", "),
        spec.target,
        spec.scd_type
    )
}

/// The version the last committed batch applied.
fn last_version(
    progress: &Processed,
    snapshot: &SnapshotSpec,
) -> Result<Option<Version>, RunError> {
    progress
        .last
        .as_ref()
        .and_then(|o| o.positions.get(OFFSETS_KEY))
        .map(|json| Version::from_json(&snapshot.version_schema(), json))
        .transpose()
}

/// The version of batch `batch`, which the published table committed (its offsets are
/// in that commit).
async fn ahead_version(
    public: &Table,
    app: &str,
    batch: i64,
    snapshot: &SnapshotSpec,
) -> Result<Version, RunError> {
    let offsets = public.batch_offsets(app, &BTreeSet::from([batch])).await?;
    let json = offsets
        .get(&batch)
        .and_then(|o| o.get("positions"))
        .and_then(|p| p.get(OFFSETS_KEY))
        .ok_or_else(|| {
            RunError::input(format!(
                "batch {batch} reached the published table but not its state, and its snapshot version is not recorded"
            ))
            .with_help("run `cdcflow run --full-refresh TABLE` to apply the snapshots again")
        })?;
    Version::from_json(&snapshot.version_schema(), json)
}

/// The published table at its last version whose batch the state has too (none
/// before the first batch: an empty table).
async fn published_before(
    dir: &cdcflow_plan::location::Location,
    app: &str,
    committed: Option<i64>,
) -> Result<Table, RunError> {
    let latest = Table::open(dir).await?.version().unwrap_or(-1);
    for v in (0..latest).rev() {
        let table = Table::open_at(dir, v).await?;
        if table.txn_version(app).await? <= committed {
            return Ok(table);
        }
    }
    Ok(Table::missing(dir))
}

/// The next snapshot's version: the run's start for a periodic flow, else the one row
/// the version query gives with `last_snapshot_version()` bound to `last`.
async fn next_version(
    rc: &RunContext,
    flow: &Flow,
    snapshot: &SnapshotSpec,
    last: Option<&Version>,
    batch: i64,
    report: &mut FlowReport,
) -> Result<Option<Version>, RunError> {
    let schema = snapshot.version_schema();
    let Some(view) = &snapshot.version_view else {
        let version = Version::run_start(&schema, rc.now_micros)?;
        return Ok(Some(match last {
            // The clock went back (another host, a corrected clock): the snapshot is
            // applied just after the last one, not refused.
            Some(last) if version.cmp(last)? != Ordering::Greater => {
                let after = last.micros_after()?;
                report.warnings.push(format!(
                    "the run started at {}, not after the last snapshot ({}): this snapshot is versioned {}",
                    version.display(),
                    last.display(),
                    after.display()
                ));
                after
            }
            _ => version,
        }));
    };
    let mut planner = Planner::with_state(rc.ctx.state());
    let last_rows = last.map(|l| l.row.clone()).into_iter().collect();
    planner.bind(snapshot::LAST_VERSION, relation(&schema, last_rows)?);
    let (rows, _) = read_view(rc, view, planner, batch).await?;
    let rows: Vec<RecordBatch> = rows.into_iter().filter(|b| b.num_rows() > 0).collect();
    let count: usize = rows.iter().map(|b| b.num_rows()).sum();
    let flow = &flow.name;
    match rows.first() {
        None => Ok(None),
        Some(_) if count > 1 => Err(RunError::input(format!(
            "the WITH VERSION query of flow `{flow}` gave {count} rows"
        ))
        .with_help("it gives the one next snapshot's version, or no row when none is left: end it with ORDER BY version LIMIT 1")),
        Some(b) if b.column(0).is_null(0) => Err(RunError::input(format!(
            "the WITH VERSION query of flow `{flow}` gave a null version"
        ))
        .with_help("give no row when no snapshot is left (an aggregate such as max() gives a null row: add HAVING count(*) > 0, or use ORDER BY … LIMIT 1)")),
        Some(b) => Ok(Some(Version::of(&schema, b.column(0))?)),
    }
}

/// A relation of `rows` for a snapshot function to give.
fn relation(
    schema: &SchemaRef,
    rows: Vec<RecordBatch>,
) -> Result<Arc<dyn datafusion::logical_expr::TableSource>, RunError> {
    Ok(provider_as_source(Arc::new(MemTable::try_new(
        Arc::clone(schema),
        vec![rows],
    )?)))
}

/// Reads the private view `view` whole with `planner`'s bindings: its rows, and what
/// the user should hear about the landing files it read.
async fn read_view(
    rc: &RunContext,
    view: &str,
    mut planner: Planner,
    batch: i64,
) -> Result<(Vec<RecordBatch>, Vec<String>), RunError> {
    let (mut stream, warnings) = view_stream(rc, view, &mut planner, batch).await?;
    let mut rows = Vec::new();
    while let Some(b) = stream.next().await {
        rows.push(b?);
    }
    Ok((rows, warnings))
}

async fn view_stream(
    rc: &RunContext,
    view: &str,
    planner: &mut Planner,
    batch: i64,
) -> Result<
    (
        datafusion::physical_plan::SendableRecordBatchStream,
        Vec<String>,
    ),
    RunError,
> {
    let mut inputs = BatchInputs::new(batch);
    let input = [Input::Dataset {
        name: view.to_string(),
        streaming: false,
    }];
    // A snapshot is compared as it is read: a table it reads whole is not held.
    let reader = crate::inputs::InputReader {
        tables_as_streams: true,
        lazy_files: true,
        ..rc.reader()
    };
    reader
        .register(&input, &Processed::default(), planner, &mut inputs)
        .await?;
    if !inputs.quarantine.is_empty() {
        return Err(crate::quarantine::malformed(&inputs.quarantine).with_help(
            "fix the file and land the fixed copy as a new file; a snapshot is read whole, so its malformed records cannot be set apart",
        ));
    }
    if let Some(error) = inputs.unread() {
        return Err(error);
    }
    let source = planner
        .table(view)
        .ok_or_else(|| RunError::internal(format!("view `{view}` could not be registered")))?;
    let provider = datafusion::datasource::source_as_provider(&source)?;
    let plan = match provider.downcast_ref::<ViewTable>() {
        Some(view) => fold::scalar_subqueries(&rc.ctx, view.logical_plan().clone()).await?,
        None => rc.ctx.read_table(provider)?.into_unoptimized_plan(),
    };
    let stream = rc
        .ctx
        .execute_logical_plan(plan)
        .await?
        .execute_stream()
        .await?;
    Ok((stream, inputs.landing_warnings()))
}

/// Where a snapshot's rows come from.
enum SnapshotRows<'a> {
    /// The snapshot's private view (its query).
    Query(&'a str),
    /// The published table's current rows (SCD type 2: its open versions), which took
    /// the snapshot's batch before a crash.
    Published(&'a Table),
}

/// Reads snapshot `version` (its `rows`) and compares it with `base`, the target's
/// published table: the change events (of `events` schema), what they do, and warnings.
#[allow(clippy::too_many_arguments)]
async fn compare(
    rc: &RunContext,
    spec: &AutoCdcSpec,
    rows: SnapshotRows<'_>,
    snapshot: &SnapshotSpec,
    version: &Version,
    base: &Table,
    events: &SchemaRef,
    label: &str,
    batch: i64,
) -> Result<(super::exec::Sourced, Counts, Vec<String>), RunError> {
    let field =
        |name: &String| -> Result<Field, RunError> { Ok(events.field_with_name(name)?.clone()) };
    let columns = Columns {
        keys: spec.keys.iter().map(field).collect::<Result<_, _>>()?,
        values: spec
            .columns
            .iter()
            .filter(|c| !spec.keys.contains(c))
            .map(field)
            .collect::<Result<_, _>>()?,
        end_at: (spec.scd_type == 2)
            .then(|| Field::new(END_AT, snapshot.version.data_type().clone(), true)),
    };
    let read_schema = columns.read_schema();
    let mut current = Current::read(&base.fetched_files().await?, columns)?;
    let mut planner = Planner::with_state(rc.ctx.state());
    if snapshot.version_view.is_some() {
        planner.bind(
            snapshot::CURRENT_VERSION,
            relation(&snapshot.version_schema(), vec![version.row.clone()])?,
        );
    }
    let (stream, warnings) = match rows {
        SnapshotRows::Query(view) => view_stream(rc, view, &mut planner, batch).await?,
        SnapshotRows::Published(table) => {
            (published_rows(rc, table, &read_schema, spec).await?, vec![])
        }
    };
    let value = ScalarValue::try_from_array(version.row.column(0), 0)?;
    let mut out = Vec::new();
    // The next batches are hashed on other threads while this one is looked up.
    let hasher = current.hasher();
    let mut hashed = stream
        .map(|rows| {
            let (hasher, label) = (Arc::clone(&hasher), label.to_string());
            async move {
                let rows = rows?;
                tokio::task::spawn_blocking(move || hasher.hash(rows, &label))
                    .await
                    .map_err(|e| RunError::internal(format!("a snapshot's hashing stopped: {e}")))?
            }
        })
        .buffered(HASHED_AHEAD);
    while let Some(rows) = hashed.next().await {
        let changed = current.probe_hashed(rows?, label)?;
        if changed.num_rows() > 0 {
            out.push((label.to_string(), upserts(events, &changed, &value)?));
        }
    }
    for deletes in current.deletes(events, &value)? {
        out.push((label.to_string(), deletes));
    }
    Ok((out, current.counts, warnings))
}

/// The current rows of the published `table` (SCD type 2: its open versions) in the
/// columns of `schema`, streamed.
async fn published_rows(
    rc: &RunContext,
    table: &Table,
    schema: &SchemaRef,
    spec: &AutoCdcSpec,
) -> Result<datafusion::physical_plan::SendableRecordBatchStream, RunError> {
    table.fetch_current().await?;
    let (provider, _) = crate::delta::scan::whole(table, schema)?;
    let rows = rc.ctx.read_table(provider)?;
    let rows = match spec.scd_type == 2 {
        true => rows.filter(datafusion::prelude::ident(END_AT).is_null())?,
        false => rows,
    };
    Ok(rows.execute_stream().await?)
}

/// Snapshot rows to write, as upsert events of `schema` sequenced by `version`.
fn upserts(
    schema: &SchemaRef,
    rows: &RecordBatch,
    version: &ScalarValue,
) -> Result<RecordBatch, RunError> {
    let n = rows.num_rows();
    let columns = schema
        .fields()
        .iter()
        .map(|f| -> Result<ArrayRef, RunError> {
            match f.name().as_str() {
                VERSION_COLUMN => Ok(version.to_array_of_size(n)?),
                DELETED_COLUMN => Ok(Arc::new(BooleanArray::from(vec![false; n]))),
                name => {
                    let column = rows.column_by_name(name).ok_or_else(|| {
                        RunError::internal(format!("a snapshot row without `{name}`"))
                    })?;
                    Ok(cast_with_options(column, f.data_type(), &STRICT)?)
                }
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

fn out_of_order(flow: &Flow, version: &Version, last: &Version) -> RunError {
    let (version, last) = (version.display(), last.display());
    match version == last {
        true => RunError::input(format!(
            "flow `{}`: snapshot {version} was applied already",
            flow.name
        ))
        .with_help("the WITH VERSION query gives the next snapshot after last_snapshot_version(), or no row: compare with it, e.g. WHERE version > (SELECT version FROM last_snapshot_version())"),
        false => RunError::input(format!(
            "flow `{}`: snapshot {version} comes before {last}, the last applied; nothing was applied",
            flow.name
        ))
        .with_help(format!(
            "snapshots are applied in version order and the target's history after {version} is written; to apply it, run `cdcflow run --full-refresh {}` (every snapshot again, in order), or remove it",
            flow.target
        )),
    }
}
