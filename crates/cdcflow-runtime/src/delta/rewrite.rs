//! A table rewritten as it is read: each core decodes its share of the source files'
//! row groups, a visitor picks from each batch the rows to keep, and the core encodes
//! them into a new file of the destination at once. No table is held whole: memory
//! follows the batch, not the table. What the visitor sets aside comes back to the
//! caller, and more rows can be added before the files are committed together.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use deltalake::kernel::Action;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::{DeltaResult, DeltaTable, DeltaTableError};

use super::{Commit, DataFile, Staged, StagedData, Table, encoding, parallel, read};
use crate::RunError;

/// Rows read to judge a new file's encoding before its writer starts.
const JUDGE_ROWS: usize = 64 * 1024;

/// The files a [`rewrite`] wrote, awaiting the rest of the write.
pub struct Rewrite {
    dir: PathBuf,
    table: DeltaTable,
    schema: SchemaRef,
    adds: Vec<Action>,
    layout: parallel::FileLayout,
}

/// Reads the Parquet `sources` in batches of `read` on every core and writes the rows
/// `visit` makes of each (in `schema`) into new files of the table `dest` (created at
/// its commit when it does not exist); what it sets aside comes back in source order.
/// `None` (nothing read) when the table has rules of its own or other columns, which
/// only deltalake's write operation writes ([`parallel::applies`]).
pub async fn rewrite<T, F>(
    sources: &[DataFile],
    read: &SchemaRef,
    dest: &Table,
    schema: &SchemaRef,
    commit: &Commit,
    visit: F,
) -> Result<Option<(Rewrite, Vec<T>)>, RunError>
where
    T: Send + 'static,
    F: Fn(RecordBatch) -> Result<(Option<RecordBatch>, T), RunError> + Send + Sync + 'static,
{
    let dir = dest.dir.as_path();
    let table = dest.for_write().await?;
    if !parallel::applies(&table, schema, commit) {
        return Ok(None);
    }
    let visit = Arc::new(visit);
    let layout = commit.file_layout();
    let mut tasks = Vec::new();
    for run in read::plan(sources)? {
        let (visit, table) = (Arc::clone(&visit), table.clone());
        let (read, schema) = (Arc::clone(read), Arc::clone(schema));
        let partitions = layout.partitions.clone();
        tasks.push(tokio::spawn(async move {
            rewrite_run(&run, &table, (&read, &schema), &partitions, visit.as_ref()).await
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
        layout,
    };
    Ok(Some((rewrite, aside)))
}

/// One core's share: its row groups read, visited and the kept rows written to one
/// file.
async fn rewrite_run<T>(
    run: &read::Run,
    table: &DeltaTable,
    (read, schema): (&SchemaRef, &SchemaRef),
    partitions: &[String],
    visit: &(dyn Fn(RecordBatch) -> Result<(Option<RecordBatch>, T), RunError> + Send + Sync),
) -> Result<(Vec<Action>, Vec<T>), RunError> {
    let dir = table.table_url().to_string();
    let delta_err = |e: DeltaTableError| RunError::delta(Path::new(&dir), e);
    let mut aside = Vec::new();
    let mut file = RunFile {
        table,
        schema,
        partitions,
        rows: run.rows,
        pending: Vec::new(),
        writer: None,
    };
    for batch in run.batches(read) {
        let (kept, set_aside) = visit(batch?)?;
        aside.push(set_aside);
        if let Some(kept) = kept.filter(|k| k.num_rows() > 0) {
            file.push(kept).await.map_err(delta_err)?;
        }
    }
    let adds = file.finish().await.map_err(delta_err)?;
    Ok((adds, aside))
}

/// The new file of one core: its first rows wait until there are enough to judge its
/// encoding by, then every row goes to the writer as it comes.
struct RunFile<'a> {
    table: &'a DeltaTable,
    schema: &'a SchemaRef,
    /// The partition columns, should the write create the table.
    partitions: &'a [String],
    /// Rows the run reads: the file holds at most these.
    rows: usize,
    pending: Vec<RecordBatch>,
    writer: Option<RecordBatchWriter>,
}

impl RunFile<'_> {
    async fn push(&mut self, batch: RecordBatch) -> DeltaResult<()> {
        if let Some(writer) = &mut self.writer {
            return writer.write(batch).await;
        }
        self.pending.push(batch);
        if self
            .pending
            .iter()
            .map(RecordBatch::num_rows)
            .sum::<usize>()
            >= JUDGE_ROWS
        {
            self.start().await?;
        }
        Ok(())
    }

    /// The writer, its encoding judged on the rows that came so far.
    async fn start(&mut self) -> DeltaResult<&mut RecordBatchWriter> {
        let properties = encoding::writer_properties_for(self.schema, &self.pending, self.rows);
        let mut writer =
            parallel::file_writer(self.table, self.schema, self.partitions, properties)?;
        for batch in self.pending.drain(..) {
            writer.write(batch).await?;
        }
        Ok(self.writer.insert(writer))
    }

    /// The file's add action; none when no row came.
    async fn finish(mut self) -> DeltaResult<Vec<Action>> {
        if self.writer.is_none() && !self.pending.is_empty() {
            self.start().await?;
        }
        let Some(writer) = self.writer.as_mut() else {
            return Ok(vec![]);
        };
        let adds = writer.flush().await?;
        Ok(adds.into_iter().map(Action::Add).collect())
    }
}

impl Rewrite {
    /// The rewrite with `batches` added as files of their own, ready to commit.
    pub async fn with(self, batches: Vec<RecordBatch>) -> Result<Staged, RunError> {
        let Self {
            dir,
            table,
            schema,
            mut adds,
            layout,
        } = self;
        if batches.iter().any(|b| b.num_rows() > 0) {
            adds.extend(
                parallel::stage(&table, &schema, batches, &layout)
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
