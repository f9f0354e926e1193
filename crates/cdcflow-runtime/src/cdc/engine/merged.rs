//! A batch applied by merge-on-write: the stored rows it decides again are deleted by
//! deletion vectors and their new rows appended, in both tables, so a batch writes what
//! it changes and never the rows it does not touch (docs/runtime.md, "Merge-on-write").
//!
//! What is read: the state (its members are found by key, as in `touched.rs`; a plain
//! SCD type 1 state is four narrow columns) and only the key columns of the published
//! table, for the positions of the touched keys' rows; of both, only the files whose
//! key statistics may hold a touched key (a single integer key). A plain SCD type 1
//! state keeps no values; a stored upsert that stays its key's winner keeps its
//! published row untouched, so its values are never needed, except where an incoming
//! upsert ties it (same key and sequence: the kernel ranks the two by their values),
//! and those few rows are fetched by position.
//!
//! Commits go published table first, state second, as in `streamed.rs`. A batch applied
//! again after a crash between them reads the positions from the published table as it
//! then is, so it deletes and appends the same rows again: the result is the same.
//!
//! Taken when both tables exist, allow deletion vectors and can be written file by
//! file, and the batch does not concern every key (a TRUNCATE): [`prepare`] says so
//! before anything is read, so that the batch's events can be handed over whole and
//! let go once the kernel has split them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cdc::apply_error::ApplyError;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::{cast, concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Int8Type, Int64Type, Schema, SchemaRef};
use datafusion::parquet::file::metadata::RowGroupMetaData;

use super::keyset::key_columns;
use super::keyset::{KeySet, NONE, hashes};
use super::streamed::{Streamed, Targets};
use super::touched::Touch;
use crate::RunError;
use crate::cdc::kernel::{Op, Rules, filtered};
use crate::cdc::rules::ApplyMetrics;
use crate::cdc::slice::{Slice, TAG};
use crate::delta::pruning::KeyStats;
use crate::delta::read::{self, Located};
use crate::delta::{Commit, DataFile, Mode, Sink, Table, merge};
use crate::par;
use deltalake::kernel::Action;

/// Row positions to delete, per file index.
type Deletes = BTreeMap<usize, Vec<u64>>;

/// Published rows holding members' values, each with its member (`Touch::probe`).
type Hits = Vec<Option<(RecordBatch, Vec<u32>)>>;

/// A batch that merge-on-write can take: both tables exist, allow deletion vectors and
/// keep their columns, and the batch does not concern every key.
pub struct Prepared {
    rules: Rules,
    touch: Touch,
}

/// Whether both tables take merge-on-write: they exist, allow deletion vectors and keep
/// their columns.
pub fn mergeable(rules: &Rules, targets: &Targets<'_>) -> bool {
    let mergeable = |table: &Table, schema: &SchemaRef, commit| {
        table.rewritable(schema, commit) && table.has_deletion_vectors()
    };
    mergeable(targets.state, &rules.state_schema(), targets.state_commit)
        && mergeable(
            targets.public,
            &rules.public_schema(),
            targets.public_commit,
        )
}

/// Whether merge-on-write can take `events` (known before anything is read or written);
/// `None` when the batch must take another path.
pub fn prepare(
    rules: &Rules,
    targets: &Targets<'_>,
    events: &RecordBatch,
    now_micros: i64,
) -> Result<Option<Prepared>, RunError> {
    if !mergeable(rules, targets) {
        return Ok(None);
    }
    let touch = Touch::new(rules, events, false, now_micros)?;
    if touch.every_key() {
        return Ok(None);
    }
    Ok(Some(Prepared {
        rules: rules.clone(),
        touch,
    }))
}

impl Prepared {
    /// Applies `events` (those it was prepared with) by merge-on-write, staging both
    /// tables' changes. The events are taken: the kernel lets them go once it has them
    /// in shares, before it builds its output.
    pub async fn apply(
        self,
        targets: &Targets<'_>,
        events: RecordBatch,
    ) -> Result<Streamed, RunError> {
        let written = write(&self.rules, targets, self.touch, events, None).await?;
        let (state_schema, public_schema) = (self.rules.state_schema(), self.rules.public_schema());
        let (public, state) = tokio::try_join!(
            merge::stage_written(
                targets.public,
                &written.public_files,
                written.public.deleted,
                &public_schema,
                written.public.added,
            ),
            merge::stage_written(
                targets.state,
                &written.state_files,
                written.state.deleted,
                &state_schema,
                written.state.added,
            ),
        )?;
        Ok(Streamed {
            public_rows: written.public_rows,
            public,
            state,
            metrics: written.metrics,
            mode: Mode::Merge,
        })
    }

    /// Applies `events`, the events of `slice` of a batch's keys, by merge-on-write,
    /// writing both tables' new files but no deletion vector: what it changed comes
    /// back for the batch's one commit (`exec/commit.rs`), with the markers the slice
    /// would write, of which the commit keeps the newest.
    pub async fn apply_slice(
        mut self,
        targets: &Targets<'_>,
        events: RecordBatch,
        slice: Slice,
    ) -> Result<SliceChanges, RunError> {
        self.touch.only_slice(slice);
        let written = write(&self.rules, targets, self.touch, events, Some(slice)).await?;
        let files_read = written.state_files.len() + written.public_files.len();
        let mut changes = SliceChanges {
            public: Changes::of(written.public, &written.public_files)?,
            state: Changes::of(written.state, &written.state_files)?,
            markers: written.markers,
            metrics: written.metrics,
            files_read,
        };
        // Each file it wrote says which keys it may hold: later slices read only those
        // of their own buckets.
        for action in changes
            .public
            .added
            .iter_mut()
            .chain(&mut changes.state.added)
        {
            if let Action::Add(add) = action {
                add.tags
                    .get_or_insert_with(Default::default)
                    .insert(TAG.to_string(), Some(slice.tag()));
            }
        }
        Ok(changes)
    }
}

/// What one slice of a batch changed in both tables, uncommitted.
pub struct SliceChanges {
    pub public: Changes,
    pub state: Changes,
    /// The state's marker rows (TRUNCATE, collected-tombstone horizon) as this slice
    /// decided them: every slice sees the stored ones.
    pub markers: Vec<RecordBatch>,
    pub metrics: ApplyMetrics,
    /// Files of both tables it considered reading: those its buckets' keys may be in.
    pub files_read: usize,
}

/// A table's changes by one slice: files written, and row positions to delete by the
/// path of the file (as the log names it) they are in.
#[derive(Debug, Default)]
pub struct Changes {
    pub added: Vec<Action>,
    pub deleted: BTreeMap<String, Vec<u64>>,
}

impl Changes {
    fn of(written: Written, files: &[DataFile]) -> Result<Self, RunError> {
        let mut deleted = BTreeMap::new();
        for (index, positions) in written.deleted {
            let path = files
                .get(index)
                .and_then(DataFile::log_path)
                .ok_or_else(|| RunError::internal("a deleted row outside the table's files"))?;
            deleted.insert(path.to_string(), positions);
        }
        Ok(Self {
            added: written.added,
            deleted,
        })
    }
}

/// The files of `table` a slice's keys may be in ([`Slice::may_hold`], by their tags),
/// a remote table's fetched (only those); every file for a batch applied whole.
async fn files_of(table: &Table, slice: Option<Slice>) -> Result<Vec<DataFile>, RunError> {
    let Some(slice) = slice else {
        return table.fetched_files().await;
    };
    table.fetch_vectors().await?;
    let files: Vec<DataFile> = table
        .files()?
        .into_iter()
        .filter(|f| slice.may_hold(f.tag(TAG)))
        .collect();
    let paths = files
        .iter()
        .filter_map(|f| f.log_path().map(str::to_string))
        .collect();
    table.fetch(paths).await?;
    Ok(files)
}

/// Both tables' new files written, and the rows they delete, by file index.
struct BothWritten {
    state: Written,
    public: Written,
    state_files: Vec<DataFile>,
    public_files: Vec<DataFile>,
    /// Kept apart when asked, else written with the state's rows.
    markers: Vec<RecordBatch>,
    metrics: ApplyMetrics,
    /// Rows of the published table once the changes are committed.
    public_rows: usize,
}

async fn write(
    rules: &Rules,
    targets: &Targets<'_>,
    mut touch: Touch,
    events: RecordBatch,
    slice: Option<Slice>,
) -> Result<BothWritten, RunError> {
    let markers_apart = slice.is_some();
    let (state_schema, public_schema) = (rules.state_schema(), rules.public_schema());
    let touched = touched_values(rules, &events)?;
    let state_files = files_of(targets.state, slice).await?;
    // The state's files are read where they may hold a touched key, and where they may
    // hold an SCD type 1 tombstone past its retention, which every batch collects.
    let (op, recorded) = (
        state_schema.field(touch.op()).name(),
        state_schema.field(touch.recorded()).name(),
    );
    let horizon = touch.horizon();
    let state_read = Candidates::of(&state_files, touched.as_ref(), |f| {
        f.may_hold_before(op, Op::Delete as i64, recorded, horizon)
    });
    let state_keep = |g: &RowGroupMetaData| {
        touched
            .as_ref()
            .is_none_or(|(key, values)| g.may_hold(key, values))
            || g.may_hold_before(op, Op::Delete as i64, recorded, horizon)
    };
    let (members, member_at) = scan_state(&touch, &state_read, &state_schema, state_keep)?;
    let public_files = files_of(targets.public, slice).await?;
    let public_read = Candidates::of(&public_files, touched.as_ref(), |_| false);
    let key_schema = key_schema(&public_schema, rules);
    let public_keep = |g: &RowGroupMetaData| {
        touched
            .as_ref()
            .is_none_or(|(key, values)| g.may_hold(key, values))
    };
    let mut published = scan_published(&touch, &public_read, &key_schema, public_keep)?;
    published.live_rows += public_read.skipped_rows;
    drop(touched);

    let hits = match touch.tied(&members, &events)? {
        Some(tied) if tied.len() > 0 => {
            fetch_tied(&touch, &tied, &published, &public_files, &public_schema)?
        }
        _ => vec![],
    };
    // Both tables are read: what the kernel holds next is all the batch holds.
    touch.forget_touched();
    let pending = touch.decide_pending(members, hits, events)?;
    let decisions = &pending.decisions;
    let metrics = decisions.metrics();

    // Each table's new rows are built and written a part at a time, the state's first:
    // a narrow state's rows say which published rows stay.
    let (markers, apart) = match markers_apart {
        true => (vec![], decisions.markers()?),
        false => (decisions.markers()?, vec![]),
    };
    let state_parts = decisions
        .state()
        .chain(markers.into_iter().map(Ok))
        .map(|part| part.map_err(RunError::from));
    let state = write_parts(
        targets.state,
        member_at,
        &state_schema,
        targets.state_commit,
        decisions.state_rows(),
        state_parts,
        pending.narrow(),
    )
    .await?;
    let stayed = pending.stayed(&touch, &state.kept)?;

    // The published rows of touched keys are replaced, except those of stored upserts
    // that stayed their key's winner: they are kept, and the kernel's copies (without
    // values) dropped.
    let stayed_rows = match &stayed {
        Some(stayed) => published.rows_of(stayed)?,
        None => vec![false; published.keys.num_rows()],
    };
    if let Some(stayed) = &stayed {
        published.check_every_key_found(stayed)?;
    }
    let mut public_deletes = Deletes::new();
    for (r, kept) in stayed_rows.iter().enumerate() {
        if !kept {
            public_deletes
                .entry(published.file[r])
                .or_default()
                .push(published.position[r]);
        }
    }
    let deleted_rows = public_deletes.values().map(Vec::len).sum::<usize>();
    let rows = decisions.public_rows();
    let visible = |part: Result<RecordBatch, ApplyError>| {
        let part = part?;
        match &stayed {
            Some(stayed) if stayed.len() > 0 => without_keys(&part, stayed, rules),
            _ => Ok(part),
        }
    };
    // A narrow state's inputs carry the members' published values besides the events,
    // more than the visible rows they give: those are gathered first, and the inputs
    // let go before they are written. A wide state's new rows are the larger, and are
    // written as they are gathered.
    let gathered = match pending.narrow() {
        true => Some(
            decisions
                .public()
                .map(visible)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        false => None,
    };
    let parts: Parts<'_> = match gathered {
        Some(rows) => {
            drop(pending);
            Box::new(rows.into_iter().map(Ok))
        }
        None => Box::new(pending.decisions.public().map(visible)),
    };
    let public = write_parts(
        targets.public,
        public_deletes,
        &public_schema,
        targets.public_commit,
        rows,
        parts,
        false,
    )
    .await?;
    Ok(BothWritten {
        public_rows: published.live_rows - deleted_rows + public.rows,
        state,
        public,
        state_files,
        public_files,
        markers: apart,
        metrics,
    })
}

/// A table's new rows, a part at a time.
type Parts<'a> = Box<dyn Iterator<Item = Result<RecordBatch, RunError>> + Send + 'a>;

/// One table's merge-on-write, its new files written.
struct Written {
    /// The new files' add actions, uncommitted.
    added: Vec<Action>,
    /// Rows to delete, by index into the table's files.
    deleted: Deletes,
    /// Rows added.
    rows: usize,
    /// The rows added, when asked to keep them.
    kept: Vec<RecordBatch>,
}

/// Writes the new files of a merge-on-write of `table` (see [`merge::stage_written`])
/// whose new rows come a part at a time (about `rows` of them): each part is written
/// once a file writer per core has one, and let go, unless `keep` asks for them back.
/// A table written clustered, or that only deltalake's write operation can take, gets
/// its rows whole.
async fn write_parts(
    table: &Table,
    deleted: Deletes,
    schema: &SchemaRef,
    commit: &Commit,
    rows: usize,
    parts: impl Iterator<Item = Result<RecordBatch, RunError>>,
    keep: bool,
) -> Result<Written, RunError> {
    let sink = match commit.file_layout().cluster.is_empty() {
        true => Sink::new(table, schema, commit, rows).await?,
        false => None,
    };
    let (mut added_rows, mut kept) = (0, Vec::new());
    let Some(mut sink) = sink else {
        let batches = parts.collect::<Result<Vec<_>, _>>()?;
        added_rows = batches.iter().map(RecordBatch::num_rows).sum();
        if keep {
            kept = batches.clone();
        }
        return Ok(Written {
            added: merge::write_files(table, schema, batches, commit).await?,
            deleted,
            rows: added_rows,
            kept,
        });
    };
    let mut group = Vec::with_capacity(sink.width());
    for part in parts {
        let part = part?;
        if part.num_rows() == 0 {
            continue;
        }
        added_rows += part.num_rows();
        if keep {
            kept.push(part.clone());
        }
        group.push(part);
        if group.len() >= sink.width() {
            sink.write(std::mem::take(&mut group)).await?;
        }
    }
    if !group.is_empty() {
        sink.write(group).await?;
    }
    Ok(Written {
        added: sink.finish_files().await?,
        deleted,
        rows: added_rows,
        kept,
    })
}

/// The state's members, and where each was.
fn scan_state(
    touch: &Touch,
    files: &Candidates,
    schema: &SchemaRef,
    keep: impl Fn(&RowGroupMetaData) -> bool,
) -> Result<(RecordBatch, Deletes), RunError> {
    let (runs, _) = read::plan_where(&files.files, keep)?;
    let parts = par::map(runs, |run| {
        let mut members = Vec::new();
        let mut at = Vec::new();
        for located in run.located(schema) {
            let Located {
                file,
                positions,
                batch,
            } = located?;
            let mask = touch.members(&batch)?;
            if let Some(m) = filtered(&batch, &mask)? {
                members.push(m);
                at.push((files.index[file], kept_positions(&positions, &mask)));
            }
        }
        Ok::<_, RunError>((members, at))
    })?;
    let mut members = Vec::new();
    let mut deletes = Deletes::new();
    for (m, at) in parts {
        members.extend(m);
        for (file, positions) in at {
            deletes.entry(file).or_default().extend(positions);
        }
    }
    Ok((concat_batches(schema, &members)?, deletes))
}

fn kept_positions(positions: &UInt64Array, mask: &[bool]) -> Vec<u64> {
    positions
        .values()
        .iter()
        .zip(mask)
        .filter(|(_, m)| **m)
        .map(|(p, _)| *p)
        .collect()
}

/// The files of a table a batch must read: those whose key statistics may hold a
/// touched key (all of them when the key is not one integer column).
struct Candidates {
    files: Vec<DataFile>,
    /// Per file read, its index among the table's files.
    index: Vec<usize>,
    /// Live rows of the files left unread.
    skipped_rows: usize,
}

impl Candidates {
    /// The files of `all` that may hold a `touched` key or that `also` asks for.
    fn of(
        all: &[DataFile],
        touched: Option<&(String, Vec<i64>)>,
        also: impl Fn(&DataFile) -> bool,
    ) -> Self {
        let mut out = Self {
            files: Vec::new(),
            index: Vec::new(),
            skipped_rows: 0,
        };
        for (i, file) in all.iter().enumerate() {
            let skipped = touched
                .filter(|(column, values)| !file.may_hold(column, values) && !also(file))
                .and_then(|_| file.live_rows());
            match skipped {
                Some(rows) => out.skipped_rows += usize::try_from(rows).unwrap_or(usize::MAX),
                None => {
                    out.files.push(file.clone());
                    out.index.push(i);
                }
            }
        }
        out
    }
}

/// The key column's name and the touched keys, ascending, when the key is one integer
/// column (what file statistics can prune by).
fn touched_values(
    rules: &Rules,
    events: &RecordBatch,
) -> Result<Option<(String, Vec<i64>)>, RunError> {
    let [key] = rules.keys[..] else {
        return Ok(None);
    };
    let column = events.column(key);
    if !column.data_type().is_integer() {
        return Ok(None);
    }
    let values = cast(column, &DataType::Int64)?;
    let ops = events.column(rules.op_col()).as_primitive::<Int8Type>();
    let mut keys: Vec<i64> = values
        .as_primitive::<Int64Type>()
        .iter()
        .zip(ops.values())
        .filter(|(_, op)| **op == Op::Upsert as i8 || **op == Op::Delete as i8)
        .filter_map(|(k, _)| k)
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let name = rules.columns.field(key).name().clone();
    Ok(Some((name, keys)))
}

/// The published table's key columns, in KEYS order.
fn key_schema(public: &SchemaRef, rules: &Rules) -> SchemaRef {
    let fields: Vec<_> = rules
        .keys
        .iter()
        .map(|&k| public.field(k).clone())
        .collect();
    Arc::new(Schema::new(fields))
}

/// The published rows of touched keys: their keys, files and positions.
struct Published {
    keys: RecordBatch,
    file: Vec<usize>,
    position: Vec<u64>,
    /// Rows of the published table before the batch.
    live_rows: usize,
}

fn scan_published(
    touch: &Touch,
    files: &Candidates,
    key_schema: &SchemaRef,
    keep: impl Fn(&RowGroupMetaData) -> bool,
) -> Result<Published, RunError> {
    let (runs, skipped) = read::plan_where(&files.files, keep)?;
    let parts = par::map(runs, |run| {
        let mut keys = Vec::new();
        let mut file = Vec::new();
        let mut position = Vec::new();
        let mut live_rows = 0;
        for located in run.located(key_schema) {
            let located = located?;
            live_rows += located.batch.num_rows();
            let mask = touch.touches(located.batch.columns())?;
            if let Some(touched) = filtered(&located.batch, &mask)? {
                keys.push(touched);
                let at = kept_positions(&located.positions, &mask);
                file.extend(std::iter::repeat_n(files.index[located.file], at.len()));
                position.extend(at);
            }
        }
        Ok::<_, RunError>((keys, file, position, live_rows))
    })?;
    let mut out = Published {
        keys: RecordBatch::new_empty(Arc::clone(key_schema)),
        file: Vec::new(),
        position: Vec::new(),
        live_rows: usize::try_from(skipped).unwrap_or(usize::MAX),
    };
    let mut keys = Vec::new();
    for (k, f, p, rows) in parts {
        keys.extend(k);
        out.file.extend(f);
        out.position.extend(p);
        out.live_rows += rows;
    }
    out.keys = concat_batches(key_schema, &keys)?;
    Ok(out)
}

impl Published {
    /// Per published row of a touched key, whether its key is in `set`.
    fn rows_of(&self, set: &KeySet) -> Result<Vec<bool>, RunError> {
        let keys: Vec<ArrayRef> = self.keys.columns().to_vec();
        Ok(set
            .find(&keys, &hashes(&keys)?)?
            .iter()
            .map(|&f| f != NONE)
            .collect())
    }

    /// Fails when a stored upsert that stayed its key's winner has no published row:
    /// its values are lost (the published table was changed behind the pipeline's back).
    fn check_every_key_found(&self, stayed: &KeySet) -> Result<(), RunError> {
        if stayed.len() == 0 {
            return Ok(());
        }
        let keys: Vec<ArrayRef> = self.keys.columns().to_vec();
        let found = KeySet::new(keys, 0..self.keys.num_rows())?;
        let missing = stayed.len() - stayed.count_in(&found)?;
        if missing == 0 {
            return Ok(());
        }
        Err(RunError::input(format!(
            "{missing} key(s) live in the AUTO CDC state have no row in the published table (was it changed outside the pipeline?); run a full refresh of the table"
        )))
    }
}

/// The published rows (all columns) of the `tied` keys, probed for their members'
/// values as `Touch::probe` does.
fn fetch_tied(
    touch: &Touch,
    tied: &KeySet,
    published: &Published,
    files: &[DataFile],
    schema: &SchemaRef,
) -> Result<Hits, RunError> {
    let mut wanted: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (r, is_tied) in published.rows_of(tied)?.into_iter().enumerate() {
        if is_tied {
            wanted
                .entry(published.file[r])
                .or_default()
                .push(published.position[r]);
        }
    }
    let mut hits = Vec::new();
    for (file, mut positions) in wanted {
        positions.sort_unstable();
        for batch in read::fetch(&files[file], &positions, schema)? {
            hits.push(touch.probe(&batch, Some(tied))?.hits);
        }
    }
    Ok(hits)
}

/// `batch` (published rows) without the rows whose key is in `set`.
fn without_keys(batch: &RecordBatch, set: &KeySet, rules: &Rules) -> Result<RecordBatch, RunError> {
    let keys = key_columns(batch, &rules.keys);
    let keep: BooleanArray = set
        .find(&keys, &hashes(&keys)?)?
        .iter()
        .map(|&f| Some(f == NONE))
        .collect();
    Ok(filter_record_batch(batch, &keep)?)
}
