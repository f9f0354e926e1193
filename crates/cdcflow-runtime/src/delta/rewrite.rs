//! A table rewritten as it is read: each core decodes its share of the source files'
//! row groups, a visitor picks from each batch the rows to keep, and the core encodes
//! them into a new file of the destination at once. No table is held whole: memory
//! follows the batch, not the table. What the visitor sets aside comes back to the
//! caller, and more rows can be added before the files are committed together.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use deltalake::kernel::Action;
use deltalake::writer::DeltaWriter;
use deltalake::{DeltaTable, DeltaTableError};

use super::{Commit, Staged, StagedData, encoding, parallel, read, url_of};
use crate::RunError;

/// Rows read to judge a new file's encoding before its writer starts.
const JUDGE_ROWS: usize = 64 * 1024;

/// The files a [`rewrite`] wrote, awaiting the rest of the write.
pub struct Rewrite {
    dir: PathBuf,
    table: DeltaTable,
    schema: SchemaRef,
    adds: Vec<Action>,
}

/// Reads the Parquet `sources` in batches of `read` on every core and writes the rows
/// `visit` makes of each (in `schema`) into new files of the table at `dir`; what it
/// sets aside comes back in source order. `None` (nothing read) when the table has
/// rules of its own or other columns, which only deltalake's write operation writes
/// ([`parallel::applies`]).
pub async fn rewrite<T, F>(
    sources: &[PathBuf],
    read: &SchemaRef,
    dir: &Path,
    schema: &SchemaRef,
    commit: &Commit,
    visit: F,
) -> Result<Option<(Rewrite, Vec<T>)>, RunError>
where
    T: Send + 'static,
    F: Fn(RecordBatch) -> Result<(Option<RecordBatch>, T), ArrowError> + Send + Sync + 'static,
{
    std::fs::create_dir_all(dir).map_err(|e| RunError::io(dir, e))?;
    let table = DeltaTable::try_from_url(url_of(dir)?)
        .await
        .map_err(|e| RunError::delta(dir, e))?;
    if !parallel::applies(&table, schema, commit) {
        return Ok(None);
    }
    let visit = Arc::new(visit);
    let mut tasks = Vec::new();
    for run in read::plan(sources)? {
        let (visit, table) = (Arc::clone(&visit), table.clone());
        let (read, schema) = (Arc::clone(read), Arc::clone(schema));
        tasks.push(tokio::spawn(async move {
            rewrite_run(&run, &table, (&read, &schema), visit.as_ref()).await
        }));
    }
    let mut adds = Vec::new();
    let mut aside = Vec::new();
    for task in tasks {
        let (run_adds, run_aside) = task.await.map_err(|e| {
            RunError::delta(dir, DeltaTableError::Generic(format!("rewrite task: {e}")))
        })??;
        adds.extend(run_adds);
        aside.extend(run_aside);
    }
    let rewrite = Rewrite {
        dir: dir.to_path_buf(),
        table,
        schema: Arc::clone(schema),
        adds,
    };
    Ok(Some((rewrite, aside)))
}

/// One core's share: its row groups read, visited and the kept rows written to one
/// file, whose encoding is judged on the first kept rows.
async fn rewrite_run<T>(
    run: &read::Run,
    table: &DeltaTable,
    (read, schema): (&SchemaRef, &SchemaRef),
    visit: &(dyn Fn(RecordBatch) -> Result<(Option<RecordBatch>, T), ArrowError> + Send + Sync),
) -> Result<(Vec<Action>, Vec<T>), RunError> {
    let dir = table.table_url().to_string();
    let delta_err = |e: DeltaTableError| RunError::delta(Path::new(&dir), e);
    let mut aside = Vec::new();
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut writer = None;
    for batch in run.batches(read) {
        let (kept, set_aside) = visit(batch?)?;
        aside.push(set_aside);
        let Some(kept) = kept.filter(|k| k.num_rows() > 0) else {
            continue;
        };
        let writer = match &mut writer {
            Some(w) => w,
            None => {
                pending.push(kept);
                if pending.iter().map(RecordBatch::num_rows).sum::<usize>() < JUDGE_ROWS {
                    continue;
                }
                let properties = encoding::writer_properties_for(schema, &pending, run.rows);
                let mut w = parallel::file_writer(table, schema, properties).map_err(delta_err)?;
                for b in pending.drain(..) {
                    w.write(b).await.map_err(delta_err)?;
                }
                writer = Some(w);
                continue;
            }
        };
        writer.write(kept).await.map_err(delta_err)?;
    }
    let mut writer = match (writer, pending.is_empty()) {
        (Some(w), _) => w,
        (None, true) => return Ok((vec![], aside)),
        (None, false) => {
            let properties = encoding::writer_properties_for(schema, &pending, run.rows);
            let mut w = parallel::file_writer(table, schema, properties).map_err(delta_err)?;
            for b in pending.drain(..) {
                w.write(b).await.map_err(delta_err)?;
            }
            w
        }
    };
    let adds = writer.flush().await.map_err(delta_err)?;
    Ok((adds.into_iter().map(Action::Add).collect(), aside))
}

impl Rewrite {
    /// The rewrite with `batches` added as files of their own, ready to commit.
    pub async fn with(self, batches: Vec<RecordBatch>) -> Result<Staged, RunError> {
        let Self {
            dir,
            table,
            schema,
            mut adds,
        } = self;
        if batches.iter().any(|b| b.num_rows() > 0) {
            adds.extend(
                parallel::stage(&table, &schema, batches)
                    .await
                    .map_err(|e| RunError::delta(&dir, e))?,
            );
        }
        Ok(Staged {
            dir,
            table,
            schema,
            data: StagedData::Files(adds),
        })
    }
}
