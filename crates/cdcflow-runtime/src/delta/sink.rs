//! A table's new files written as their rows are produced, one file per core: a
//! producer that makes its rows a part at a time (the first batch of an AUTO CDC
//! target, applied a share of its keys at a time) hands each part over and lets it go,
//! so the rows are never held whole, and the files stay as large as one write would
//! make them rather than one per part.
//!
//! Each file's encoding is judged on its first rows, as a rewritten file's is
//! (`rewrite.rs`). The files are committed together like any staged write.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use deltalake::kernel::Action;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::{DeltaResult, DeltaTable, DeltaTableError};

use super::{Commit, Staged, StagedData, Table, cluster, encoding, parallel};
use crate::RunError;

/// Rows a file's encoding is judged on before its writer starts.
const JUDGE_ROWS: usize = 64 * 1024;

/// The files of one write to a table, filled a part at a time.
pub struct Sink {
    dir: std::path::PathBuf,
    table: DeltaTable,
    schema: SchemaRef,
    files: Vec<SinkFile>,
    /// The columns each part is sorted by before it is shared out (`CLUSTER BY`).
    cluster: Vec<String>,
}

impl Sink {
    /// A sink of about `rows` rows of `schema` into new files of `dest` (created at its
    /// commit when it does not exist). `None` when the table has rules of its own or
    /// other columns, which only deltalake's write operation writes.
    pub async fn new(
        dest: &Table,
        schema: &SchemaRef,
        commit: &Commit,
        rows: usize,
    ) -> Result<Option<Self>, RunError> {
        let dir = dest.dir.as_path();
        let table = dest.for_write().await?;
        if !parallel::applies(&table, schema, commit) {
            return Ok(None);
        }
        let count = parallel::files_for(rows);
        let layout = commit.file_layout();
        let files = (0..count)
            .map(|_| SinkFile {
                table: table.clone(),
                schema: Arc::clone(schema),
                partitions: layout.partitions.clone(),
                rows: rows.div_ceil(count),
                written: 0,
                pending: Vec::new(),
                writer: None,
            })
            .collect();
        Ok(Some(Self {
            dir: dir.to_path_buf(),
            table,
            schema: Arc::clone(schema),
            files,
            cluster: layout.cluster,
        }))
    }

    /// Encodes `batches` into the files, each batch to the file with the fewest rows
    /// so far, the files on every core at once.
    /// A clustered table's part is sorted first and cut into one contiguous range
    /// per file, so each file takes a narrow range of the clustering columns.
    pub async fn write(&mut self, batches: Vec<RecordBatch>) -> Result<(), RunError> {
        let mut shares: Vec<Vec<RecordBatch>> = vec![Vec::new(); self.files.len()];
        let mut planned: Vec<usize> = self.files.iter().map(|f| f.written).collect();
        let batches = match cluster::sorts(&batches, &self.cluster) {
            true => cluster::sorted_whole(batches, &self.cluster)?.map_or_else(Vec::new, |all| {
                cluster::cut(&all, all.num_rows().div_ceil(self.files.len()))
            }),
            false => batches,
        };
        for batch in batches.into_iter().filter(|b| b.num_rows() > 0) {
            let Some((least, _)) = planned.iter().enumerate().min_by_key(|&(_, &r)| r) else {
                break;
            };
            planned[least] += batch.num_rows();
            shares[least].push(batch);
        }
        let files = std::mem::take(&mut self.files);
        let mut tasks = Vec::with_capacity(files.len());
        for (mut file, share) in files.into_iter().zip(shares) {
            tasks.push(tokio::spawn(async move {
                for batch in share {
                    file.push(batch).await?;
                }
                Ok::<_, DeltaTableError>(file)
            }));
        }
        for task in tasks {
            let file = task.await.map_err(|e| self.task_error(&e))?;
            self.files
                .push(file.map_err(|e| RunError::delta(&self.dir, e))?);
        }
        Ok(())
    }

    /// The files written, ready to commit.
    pub async fn finish(self) -> Result<Staged, RunError> {
        let (dir, table, schema) = (
            self.dir.clone(),
            self.table.clone(),
            Arc::clone(&self.schema),
        );
        let adds = self.finish_files().await?;
        Ok(Staged {
            dir,
            table,
            schema,
            data: StagedData::Files(adds),
        })
    }

    /// The add actions of the files written, not yet committed.
    pub async fn finish_files(self) -> Result<Vec<Action>, RunError> {
        let Self { dir, files, .. } = self;
        let tasks: Vec<_> = files
            .into_iter()
            .map(|file| tokio::spawn(file.finish()))
            .collect();
        let mut adds = Vec::new();
        for task in tasks {
            let written = task.await.map_err(|e| {
                RunError::delta(
                    &dir,
                    DeltaTableError::Generic(format!("file sink task: {e}")),
                )
            })?;
            adds.extend(written.map_err(|e| RunError::delta(&dir, e))?);
        }
        Ok(adds)
    }

    /// The number of files written at once: parts handed over together are encoded
    /// on that many cores.
    pub fn width(&self) -> usize {
        self.files.len()
    }

    fn task_error(&self, e: &tokio::task::JoinError) -> RunError {
        RunError::delta(
            &self.dir,
            DeltaTableError::Generic(format!("file sink task: {e}")),
        )
    }
}

/// One new file: its first rows wait until there are enough to judge its encoding by,
/// then every row goes to the writer as it comes.
struct SinkFile {
    table: DeltaTable,
    schema: SchemaRef,
    /// The partition columns, should the write create the table.
    partitions: Vec<String>,
    /// Rows the file is expected to hold, for the encoding's estimates.
    rows: usize,
    written: usize,
    pending: Vec<RecordBatch>,
    writer: Option<RecordBatchWriter>,
}

impl SinkFile {
    async fn push(&mut self, batch: RecordBatch) -> DeltaResult<()> {
        self.written += batch.num_rows();
        if let Some(writer) = &mut self.writer {
            return writer.write(batch).await;
        }
        self.pending.push(batch);
        if self.written >= JUDGE_ROWS {
            self.start().await?;
        }
        Ok(())
    }

    /// The writer, its encoding judged on the rows that came so far.
    async fn start(&mut self) -> DeltaResult<()> {
        let properties =
            encoding::writer_properties_for(&self.schema, &self.pending, self.rows.max(1));
        let mut writer =
            parallel::file_writer(&self.table, &self.schema, &self.partitions, properties)?;
        for batch in self.pending.drain(..) {
            writer.write(batch).await?;
        }
        self.writer = Some(writer);
        Ok(())
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
