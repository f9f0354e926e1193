//! The compaction of one Delta table: the chosen files' live rows read group by group,
//! sorted by the table's keys when it has any, written as new files in cdcflow's
//! encodings and swapped for the old ones in one commit that changes no data.
//!
//! The commit is `DeltaOperation::Optimize`: `remove(dataChange=false)` of every
//! rewritten file (its deletion vector kept in the remove) and `add(dataChange=false)`
//! of the new files, no application transaction. Streaming readers skip it
//! (`Table::appended_since` reads only `dataChange` adds), and the flows' transaction
//! ids stay as they were. A crash before the commit leaves the new files unreferenced:
//! the table reads as before.

use cdcflow_plan::location::Location;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, LogicalFileView};
use deltalake::protocol::DeltaOperation;
use deltalake::{DeltaTable, DeltaTableError};

use super::TableCompaction;
use super::choose::{self, FileFacts, Policy};
use crate::cdc::slice::TAG;
use crate::delta::{self, Commit, Table};
use crate::{RunError, failpoint};

/// A table to compact.
pub(super) struct Target {
    pub dir: Location,
    /// The dataset it belongs to.
    pub dataset: String,
    /// The AUTO CDC state of the dataset rather than its published table.
    pub state: bool,
    /// The columns its rows are sorted by (an AUTO CDC target's KEYS), none to keep
    /// their order.
    pub keys: Vec<String>,
}

impl Target {
    /// The name of its commits (and failpoints): the dataset's, `__state` for the state.
    fn commit_name(&self) -> String {
        match self.state {
            true => format!("{}__state", self.dataset),
            false => self.dataset.clone(),
        }
    }

    /// A report of nothing done yet.
    pub fn outcome(&self) -> TableCompaction {
        TableCompaction {
            table: self.dataset.clone(),
            state: self.state,
            ..TableCompaction::default()
        }
    }

    /// Compacts the table when `policy` finds files worth it.
    pub async fn compact(&self, policy: Policy) -> Result<TableCompaction, RunError> {
        let mut out = self.outcome();
        let table = Table::open(&self.dir).await?;
        let dir = table.dir.as_path();
        let Some(t) = &table.table else {
            out.skipped = Some("not created yet".into());
            return Ok(out);
        };
        let err = |e: DeltaTableError| RunError::delta(dir, e);
        let snapshot = t.snapshot().map_err(err)?;
        let schema = snapshot.snapshot().arrow_schema();
        if !table.rewritable(&schema, &Commit::default()) {
            out.skipped = Some(
                "the table has Delta rules of its own (constraints, generated columns, column mapping, change data feed) that cdcflow's file writer does not keep".into(),
            );
            return Ok(out);
        }
        let views: Vec<LogicalFileView> = snapshot.log_data().iter().collect();
        let keys: Vec<&str> = self
            .keys
            .iter()
            .filter_map(|k| schema.fields().find(k).map(|(_, f)| f.name().as_str()))
            .collect();
        let facts: Vec<FileFacts> = views.iter().map(|v| facts(v, keys.first())).collect();
        out.files_before = views.len();
        // Files of different partitions, or of different key buckets (written by the
        // slices of split batches, `cdc/slice.rs`), are never written together: each
        // is judged and rewritten on its own, and keeps its bucket tag.
        let mut victims = Vec::new();
        let mut groups = Vec::new();
        for (bucket_tag, members) in partitions(&views) {
            let part: Vec<FileFacts> = members.iter().map(|&i| facts[i].clone()).collect();
            let chosen = choose::victims(&part, policy, !keys.is_empty());
            for group in choose::groups(&part, &chosen) {
                let group = group.into_iter().map(|j| members[j]).collect::<Vec<_>>();
                groups.push((bucket_tag.clone(), group));
            }
            victims.extend(chosen.into_iter().map(|j| members[j]));
        }
        if victims.is_empty() {
            return Ok(out);
        }
        let target = choose::target_rows(&facts);
        let mut adds = Vec::new();
        table.fetch_vectors().await?;
        for (bucket_tag, group) in groups {
            // A bucket's files are fetched a group at a time: one group is held.
            let paths: Vec<String> = group.iter().map(|&i| views[i].path().to_string()).collect();
            table.fetch(paths.clone()).await?;
            let rows = read_group(&table, &views, &group, &schema)?;
            table.forget(&paths)?;
            out.rows += rows.num_rows() as u64;
            let rows = delta::sorted(rows, &keys)?;
            let mut written = write_files(t, &schema, &rows, target).await.map_err(err)?;
            if let Some(tag) = &bucket_tag {
                for add in &mut written {
                    add.tags
                        .get_or_insert_with(Default::default)
                        .insert(TAG.to_string(), Some(tag.clone()));
                }
            }
            adds.extend(written);
        }
        out.files_removed = victims.len();
        out.bytes_removed = victims.iter().map(|&i| facts[i].size).sum();
        out.files_added = adds.len();
        out.bytes_added = adds.iter().map(|a| a.size.max(0) as u64).sum();
        let mut actions: Vec<Action> = victims
            .iter()
            .map(|&i| Action::Remove(views[i].remove_action(false)))
            .collect();
        actions.extend(adds.into_iter().map(Action::Add));
        let name = self.commit_name();
        failpoint::hit(&format!("optimize-staged:{name}"));
        crate::storage::lease::fence(&table.dir.to_string_lossy())?;
        // No retry: a commit landing on another version than the one read could drop
        // rows committed since (delta-rs's conflict check ignores removes that change
        // no data). The run lock keeps cdcflow's own writers away.
        CommitBuilder::from(CommitProperties::default().with_max_retries(0))
            .with_actions(actions)
            .build(
                Some(snapshot),
                t.log_store(),
                DeltaOperation::Optimize {
                    predicate: None,
                    target_size: choose::TARGET_BYTES as i64,
                },
            )
            .await
            .map_err(err)?;
        failpoint::hit(&format!("optimize-committed:{name}"));
        Ok(out)
    }
}

/// The live rows of the files `group` of `views` (of `table`), in one batch.
fn read_group(
    table: &Table,
    views: &[LogicalFileView],
    group: &[usize],
    schema: &SchemaRef,
) -> Result<RecordBatch, RunError> {
    let mut batches = Vec::new();
    for &i in group {
        batches.extend(read_live(table, &views[i], schema)?);
    }
    Ok(concat_batches(schema, &batches)?)
}

/// The indexes of `views` by partition (all of them together for an unpartitioned
/// table) and key-bucket tag, each in log order, with the tag.
fn partitions(views: &[LogicalFileView]) -> Vec<(Option<String>, Vec<usize>)> {
    type Place = (Vec<(String, Option<String>)>, Option<String>);
    let mut by_place: std::collections::BTreeMap<Place, Vec<usize>> = Default::default();
    for (i, view) in views.iter().enumerate() {
        #[allow(deprecated)]
        let add = view.add_action();
        let mut values: Vec<(String, Option<String>)> = add.partition_values.into_iter().collect();
        values.sort();
        let tag = add.tags.and_then(|mut t| t.remove(TAG)).flatten();
        by_place.entry((values, tag)).or_default().push(i);
    }
    by_place
        .into_iter()
        .map(|((_, tag), members)| (tag, members))
        .collect()
}

/// The live rows of one data file, in `schema`.
///
/// The one place compaction reads a file: its live rows, deletion vector applied.
fn read_live(
    table: &Table,
    view: &LogicalFileView,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>, RunError> {
    delta::read::read_files(&[table.file_of(view)?], schema)
}

/// What the log says about a file; `key` names the column whose smallest value orders
/// the files.
fn facts(view: &LogicalFileView, key: Option<&&str>) -> FileFacts {
    let min_key = key.and_then(|k| {
        let stats: serde_json::Value = serde_json::from_str(&view.stats()?).ok()?;
        stats.get("minValues")?.get(*k).cloned()
    });
    FileFacts {
        size: view.size().max(0) as u64,
        records: view.num_records(),
        deleted: view
            .deletion_vector_descriptor()
            .map_or(0, |dv| usize::try_from(dv.cardinality).unwrap_or(0)),
        min_key,
    }
}

/// `rows` written as new data files of `table` of at most `target` rows each, evenly
/// cut, encoded at once; their adds change no data.
async fn write_files(
    table: &DeltaTable,
    schema: &SchemaRef,
    rows: &RecordBatch,
    target: usize,
) -> Result<Vec<Add>, DeltaTableError> {
    if rows.num_rows() == 0 {
        return Ok(vec![]);
    }
    let per_file = choose::rows_per_file(rows.num_rows(), target);
    // The table exists: its own partitioning is kept, and the rows come sorted.
    let layout = delta::FileLayout::default();
    let writes = (0..rows.num_rows()).step_by(per_file).map(|start| {
        let part = rows.slice(start, per_file.min(rows.num_rows() - start));
        delta::stage_files(table, schema, vec![part], &layout)
    });
    let mut adds = Vec::new();
    for action in futures::future::try_join_all(writes)
        .await?
        .into_iter()
        .flatten()
    {
        if let Action::Add(mut add) = action {
            add.data_change = false;
            adds.push(add);
        }
    }
    Ok(adds)
}
