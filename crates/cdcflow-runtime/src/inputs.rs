//! What a flow reads in one batch: new landing files, rows appended to a streaming
//! source since the version last read, or whole tables; registered under the names the
//! flow's query uses, and written down as the batch's [`Offsets`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cdcflow_plan::DatasetKind;
use cdcflow_plan::config::PipelineConfig;
use cdcflow_plan::location::Location;
use cdcflow_plan::read_files::{Links, ReadFiles};
use cdcflow_plan::{Dataset, ExternalDelta, FlowKind, Input, Pipeline};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::view::ViewTable;
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::prelude::SessionContext;

use cdcflow_plan::planner::Planner;

use crate::checkpoint::{Offsets, Processed};
use crate::delta::{self, DataFile, Table};
use crate::landing::{self, FileName, ReadRecord, Readiness, Stamp};
use crate::sources::{Acknowledge, PartitionLag, Sources};
use crate::{RunError, cascade, file_metadata, files, layout, quarantine};

mod files_table;

/// The inputs of one batch.
pub struct BatchInputs {
    pub offsets: Offsets,
    /// Whether a streaming input has anything new (or a materialized view's inputs
    /// changed).
    pub has_new: bool,
    pub rows: u64,
    pub files: u64,
    /// Parts of the fingerprint of non-streaming inputs.
    fingerprint: Vec<String>,
    /// Records that could not be read, with the landing file they are in.
    pub quarantine: Vec<(quarantine::Source, files::BadRecord)>,
    /// Landing files left for a later run, still being written.
    pub incomplete: Vec<String>,
    /// Landing files left for a later run, with columns the schema inferred when the
    /// run started lacks (each with those columns).
    pub new_columns: Vec<String>,
    /// Landing files that changed after a batch read them, with how; not read again.
    pub changed: Vec<String>,
    /// Symbolic links in landing folders not followed: they lead out of the folder.
    pub refused_links: Vec<String>,
    /// `read_files` paths that do not exist (as written): nothing was read from them.
    pub missing: Vec<String>,
    /// The landing files read as a stream, as shown to users: the commit names them.
    pub landing: Vec<String>,
    /// The earliest modification time of the new landing files (their arrival), µs;
    /// for external sources, the earliest source commit time of the rows read.
    pub oldest_arrival_micros: Option<i64>,
    /// External sources to tell once the batch is committed ([`crate::sources`]).
    pub acknowledgements: Vec<Box<dyn Acknowledge>>,
    /// An external source has more than this batch took: the flow runs another batch.
    pub more: bool,
    /// Broker tombstones among the rows read (records without a value).
    pub tombstones: u64,
    /// What the external sources said of their reads ([`crate::sources::SourceRead::warnings`]).
    pub source_warnings: Vec<String>,
    /// The columns of the external sources' tables that have a default, with it
    /// ([`crate::sources::SourceRead::defaults`]).
    pub source_defaults: BTreeMap<String, String>,
    /// Per partition of the brokers' topics read, how far behind the batch leaves the
    /// flow.
    pub partition_lag: Vec<PartitionLag>,
    /// The folder of the flow's target table, where left-out values of an external
    /// source's changes are taken from ([`crate::carried`]).
    pub target: Option<Location>,
}

impl BatchInputs {
    pub fn new(batch: i64) -> Self {
        Self {
            offsets: Offsets {
                batch,
                ..Offsets::default()
            },
            has_new: false,
            rows: 0,
            files: 0,
            fingerprint: vec![],
            quarantine: vec![],
            incomplete: vec![],
            new_columns: vec![],
            changed: vec![],
            refused_links: vec![],
            missing: vec![],
            landing: vec![],
            oldest_arrival_micros: None,
            acknowledgements: vec![],
            more: false,
            tombstones: 0,
            source_warnings: vec![],
            source_defaults: BTreeMap::new(),
            partition_lag: vec![],
            target: None,
        }
    }

    /// A snapshot missing some of its files fails rather than be applied: the rows of a
    /// file left for a later run (still being written, of new columns, a link not followed)
    /// or of a folder that is not there would be taken for deleted.
    pub fn unread(&self) -> Option<RunError> {
        let (what, files) = if !self.missing.is_empty() {
            ("does not exist", &self.missing)
        } else if !self.incomplete.is_empty() {
            ("is still being written", &self.incomplete)
        } else if !self.new_columns.is_empty() {
            ("has columns the schema lacks", &self.new_columns)
        } else if !self.refused_links.is_empty() {
            ("is a link out of the landing folder", &self.refused_links)
        } else {
            return None;
        };
        Some(
            RunError::input(format!(
                "a snapshot could not be read whole: {} {what}; nothing was applied",
                files.join(", ")
            ))
            .with_help("a snapshot is applied whole, and a row it lacks is deleted: run again once the files are complete (a new column: declare it in the read's schema =>, or run --full-refresh)"),
        )
    }

    /// What the user should hear about the inputs of this batch: its external
    /// sources' reads, and its landing files.
    pub fn landing_warnings(&self) -> Vec<String> {
        let mut out = self.source_warnings.clone();
        // Said on every run: a misspelt folder would otherwise read nothing, silently.
        for path in &self.missing {
            out.push(format!(
                "landing path `{path}` does not exist: nothing was read from it (correct the path, or create the folder if files are yet to come)"
            ));
        }
        if !self.incomplete.is_empty() {
            out.push(format!(
                "{} landing file(s) still being written (changed within `landing_settle_seconds`, or no final line end) were left for a later run: {}",
                self.incomplete.len(),
                self.incomplete.join(", ")
            ));
        }
        // Said even when nothing else is new: these files wait for another run.
        if !self.new_columns.is_empty() {
            out.push(format!(
                "{} landing file(s) have columns the schema inferred when the run started lacks, and were left for the next run, which infers them (a continuous run: restart it): {}",
                self.new_columns.len(),
                self.new_columns.join(", ")
            ));
        }
        if !self.changed.is_empty() {
            out.push(format!(
                "{} landing file(s) changed after a batch read them; the change is not read: {} (land changed data as a new file, or set `cloudFiles.allowOverwrites => 'true'` to read a rewritten file again)",
                self.changed.len(),
                self.changed.join(", ")
            ));
        }
        if !self.refused_links.is_empty() {
            out.push(format!(
                "{} symbolic link(s) leading out of the landing folder were not followed: {} (set `follow_symlinks_out_of_landing: true` in pipeline.yaml to read them)",
                self.refused_links.len(),
                self.refused_links.join(", ")
            ));
        }
        out
    }

    /// Fixes the fingerprint into the offsets (materialized views), with `definition`
    /// (the query as it stands) so that an edited query or configuration recomputes.
    /// The query is kept as its hash: substituted `--conf` values may be credentials.
    pub fn seal_fingerprint(&mut self, definition: &str) {
        self.fingerprint.push(format!(
            "query_sha256={}",
            crate::fingerprint::sha256_hex(definition)
        ));
        self.offsets.fingerprint = Some(self.fingerprint.join(";"));
    }
}

/// Reads the new input of one batch of `flow` into `planner`.
pub struct InputReader<'a> {
    pub pipeline: &'a Pipeline,
    pub storage: &'a Location,
    pub ctx: &'a SessionContext,
    pub sources: Option<&'a Sources>,
    /// Tables read whole are read as the query runs (`delta::scan`), not first into
    /// memory.
    pub tables_as_streams: bool,
    /// A `read_files` whose query reads `_metadata` is read as the query runs, only the
    /// files the query's filters on `_metadata` keep (`crate::files_table`): a snapshot
    /// picks its files from a folder of many.
    pub lazy_files: bool,
}

impl InputReader<'_> {
    fn dataset(&self, name: &str) -> Result<&Dataset, RunError> {
        self.pipeline
            .dataset(name)
            .ok_or_else(|| RunError::input(format!("unknown dataset `{name}`")))
    }

    fn schema_of(&self, d: &Dataset) -> Result<SchemaRef, RunError> {
        d.schema.clone().ok_or_else(|| {
            RunError::input(format!(
                "the schema of `{}` is not known (no schema declared and no landing files to infer it from)",
                d.name
            ))
        })
    }

    /// Registers every input of `inputs` in `planner` and records what is read.
    pub async fn register(
        &self,
        inputs: &[Input],
        progress: &Processed,
        planner: &mut Planner,
        batch: &mut BatchInputs,
    ) -> Result<(), RunError> {
        for input in inputs {
            match input {
                Input::Files(rf) => self.register_files(rf, progress, planner, batch).await?,
                Input::Delta(d) => self.register_external(d, progress, planner, batch).await?,
                Input::Postgres(rp) => {
                    // Only a declared schema shapes the rows: the columns found when
                    // the run began may have grown since (a column added while a
                    // continuous run follows the table), and the read has them all.
                    let declared = rp
                        .declared_columns
                        .as_deref()
                        .map(cdcflow_plan::read_postgres::change_schema);
                    self.register_source(input, &rp.table, declared, progress, planner, batch)
                        .await?
                }
                Input::Mysql(rm) => {
                    // As for PostgreSQL: the read has every column, also one added
                    // since the run began.
                    let declared = rm
                        .declared_columns
                        .as_deref()
                        .map(cdcflow_plan::read_mysql::change_schema);
                    self.register_source(input, &rm.table, declared, progress, planner, batch)
                        .await?
                }
                Input::Query(rq) => {
                    self.register_source(
                        input,
                        &rq.table,
                        rq.declared_columns.clone(),
                        progress,
                        planner,
                        batch,
                    )
                    .await?
                }
                Input::Kafka(rk) => {
                    let declared = Some(rk.schema());
                    self.register_source(input, &rk.table, declared, progress, planner, batch)
                        .await?
                }
                Input::Dataset { name, streaming } => {
                    let d = self.dataset(name)?;
                    if d.kind == DatasetKind::View {
                        let read = match *streaming {
                            true => ViewRead::Stream(progress),
                            false => ViewRead::Whole,
                        };
                        self.register_view(d, read, planner, batch).await?;
                        continue;
                    }
                    let schema = self.schema_of(d)?;
                    let rows = if *streaming && d.kind == DatasetKind::StreamingTable {
                        let (rows, version) = self
                            .appended(d, progress.source_version(&d.name), &schema)
                            .await?;
                        if let Some(v) = version {
                            batch.offsets.sources.insert(d.name.clone(), v);
                        }
                        batch.has_new |= !rows.is_empty();
                        rows.into_iter().map(|(_, b)| b).collect()
                    } else {
                        let table = Table::open(&layout::table_dir(self.storage, d)?).await?;
                        batch.fingerprint.push(format!(
                            "{}@{}",
                            d.name,
                            table.data_version().await?.unwrap_or(-1)
                        ));
                        table.fetch_current().await?;
                        if self.tables_as_streams {
                            let (scan, rows) = delta::scan::whole(&table, &schema)?;
                            batch.rows += rows;
                            planner.register(&d.name, provider_as_source(scan));
                            continue;
                        }
                        vec![table.read_all(&schema).await?]
                    };
                    batch.rows += rows.iter().map(|b| b.num_rows() as u64).sum::<u64>();
                    register_rows(planner, &d.name, schema, rows)?;
                }
            }
        }
        Ok(())
    }

    /// An external Delta table: the rows of its commits after the version this flow
    /// read last (`STREAM`), or all of it. Only read: nothing is written there.
    async fn register_external(
        &self,
        d: &ExternalDelta,
        progress: &Processed,
        planner: &mut Planner,
        batch: &mut BatchInputs,
    ) -> Result<(), RunError> {
        let table = Table::open(&d.location).await?;
        if !table.exists() {
            return Err(RunError::input(format!(
                "external table `{}`: no Delta table at {}",
                d.name, d.location
            ))
            .with_help(
                "`path:` in pipeline.yaml's external_tables names the folder (or s3:// prefix) holding _delta_log",
            ));
        }
        if d.location.is_remote() {
            // Its columns were declared, not read from the table: a declared column
            // the table lacks would be read as nulls.
            check_declared(d, &table)?;
        }
        let rows = match d.streaming {
            true => {
                let key = d.offset_key();
                let (rows, version) = table
                    .appended_since(progress.source_version(&key), &d.schema)
                    .await
                    .map_err(|e| match e {
                        RunError::Rewritten { version, .. } => RunError::input(format!(
                            "external table `{}` removed or rewrote rows at version {version}; a stream reads only appends",
                            d.name
                        ))
                        .with_help("read it without STREAM(…) (whole, each run), or run `cdcflow run --full-refresh` on the tables it feeds"),
                        e => e,
                    })?;
                if let Some(v) = version.or(progress.source_version(&key)) {
                    batch.offsets.sources.insert(key, v);
                }
                batch.has_new |= !rows.is_empty();
                rows.into_iter().map(|(_, b)| b).collect()
            }
            false => {
                batch.fingerprint.push(format!(
                    "{}@{}",
                    d.offset_key(),
                    table.data_version().await?.unwrap_or(-1)
                ));
                table.fetch_current().await?;
                if self.tables_as_streams {
                    let (scan, rows) = delta::scan::whole(&table, &d.schema)?;
                    batch.rows += rows;
                    planner.register(&d.table, provider_as_source(scan));
                    return Ok(());
                }
                vec![table.read_all(&d.schema).await?]
            }
        };
        batch.rows += rows
            .iter()
            .map(|b: &RecordBatch| b.num_rows() as u64)
            .sum::<u64>();
        register_rows(planner, &d.table, Arc::clone(&d.schema), rows)
    }

    /// The rows appended to streaming table `d` after version `after`.
    pub async fn appended(
        &self,
        d: &Dataset,
        after: Option<i64>,
        schema: &SchemaRef,
    ) -> Result<(Vec<(String, RecordBatch)>, Option<i64>), RunError> {
        let (files, version) = self.appended_files(d, after).await?;
        Ok((delta::read_named(&files, schema)?, version))
    }

    /// The files of streaming table `d` holding what it appended after version `after`,
    /// each named for messages, and the version they reach.
    pub async fn appended_files(
        &self,
        d: &Dataset,
        after: Option<i64>,
    ) -> Result<(Vec<(String, DataFile)>, Option<i64>), RunError> {
        let table = Table::open(&layout::table_dir(self.storage, d)?).await?;
        let (files, version) = table.appended_files(after).await.map_err(|e| match e {
            RunError::Rewritten { version, .. } => {
                let readers = cascade::broken_readers(self.pipeline, std::slice::from_ref(&d.name));
                RunError::rewritten(&d.name, version, &readers)
            }
            e => e,
        })?;
        let files = files
            .into_iter()
            .map(|(file, f)| (format!("{} ({file})", d.name), f))
            .collect();
        Ok((files, version.or(after)))
    }

    /// Reads an external source after the position the last committed batch recorded;
    /// the rows take the declared schema when there is one.
    async fn register_source(
        &self,
        input: &Input,
        name: &str,
        declared: Option<SchemaRef>,
        progress: &Processed,
        planner: &mut Planner,
        batch: &mut BatchInputs,
    ) -> Result<(), RunError> {
        let source = match self.sources {
            Some(sources) => sources.open(self.pipeline, input)?,
            None => return Err(crate::sources::missing_kind(input)),
        };
        let key = source.checkpoint_key();
        let mut read = source.read(progress.source_position(&key)).await?;
        if let Some(carried) = read.carried.take().filter(|c| !c.cells.is_empty()) {
            let target = batch.target.clone().ok_or_else(|| {
                RunError::input(format!(
                    "`{name}`: changes left values out (unchanged TOASTed values) and this read has no table to take them from"
                ))
            })?;
            if let Some(first) = read.rows.first_mut() {
                *first = crate::carried::fill(first, &carried, &target).await?;
            }
        }
        if !read.rejected.is_empty() {
            // Kept under the source's name, as a landing file's malformed records are
            // under the file's; the batch commits them even when no row is left.
            let source = quarantine::Source {
                shown: key.clone(),
                bytes: key.clone().into_bytes(),
            };
            batch.has_new = true;
            batch.quarantine.extend(read.rejected.drain(..).map(|r| {
                let record = files::BadRecord {
                    line: None,
                    text: Some(r.record),
                    error: r.error,
                };
                (source.clone(), record)
            }));
        }
        let schema = declared.unwrap_or_else(|| Arc::clone(&read.schema));
        let rows = read
            .rows
            .iter()
            .map(|b| delta::conform(b, &schema))
            .collect::<Result<Vec<_>, _>>()?;
        let count: u64 = rows.iter().map(|b| b.num_rows() as u64).sum();
        batch.rows += count;
        batch.has_new |= count > 0 || read.must_commit;
        if let Some(at) = read.oldest_change_micros {
            batch.oldest_arrival_micros =
                Some(batch.oldest_arrival_micros.map_or(at, |o| o.min(at)));
        }
        batch.offsets.positions.insert(key, read.position);
        batch.more |= read.more;
        batch.tombstones += read.tombstones;
        batch.source_warnings.append(&mut read.warnings);
        batch
            .source_defaults
            .extend(std::mem::take(&mut read.defaults));
        batch.partition_lag.extend(read.lag);
        batch.acknowledgements.extend(read.acknowledge);
        register_rows(planner, name, schema, rows)
    }

    async fn register_files(
        &self,
        rf: &ReadFiles,
        progress: &Processed,
        planner: &mut Planner,
        batch: &mut BatchInputs,
    ) -> Result<(), RunError> {
        let staged = match crate::landing_remote::url_of(rf) {
            Some(url) => {
                Some(crate::landing_remote::stage(rf, &url, progress.files.get(&rf.table)).await?)
            }
            // Taken for a local folder, it would not exist and be read as empty.
            None if rf.path_text.contains("://") => {
                return Err(RunError::input(format!(
                    "`{}` is not a URL of an object store cdcflow reads",
                    rf.path_text
                ))
                .with_help(format!(
                    "give a folder path, or a URL of {} (docs/storage.md)",
                    cdcflow_plan::location::SCHEMES.join("://, ")
                )));
            }
            None => None,
        };
        // A landing folder at a URL is read from the scratch folder its objects were
        // fetched into; messages still name the URL.
        let remote_source = staged.as_ref().map(|s| s.source(rf));
        let rf = remote_source.as_ref().unwrap_or(rf);
        let schema = rf
            .schema()
            .map_err(|e| RunError::input(format!("{}: {e}", rf.path_text)))?
            .ok_or_else(|| {
                RunError::input(format!(
                    "`{}` has no schema => and no landing files to infer one from",
                    rf.path_text
                ))
            })?;
        // With `_metadata`, each file's rows carry its own (`file_metadata`).
        let read_schema = match rf.metadata {
            true => cdcflow_plan::file_metadata::with_column(&schema),
            false => Arc::clone(&schema),
        };
        let config = &self.pipeline.config;
        let links = match config.follow_symlinks_out_of_landing {
            true => Links::Anywhere,
            false => Links::InsideOnly,
        };
        if !rf.path.exists() {
            batch.missing.push(rf.path_text.clone());
        }
        let listing = rf.list(links).map_err(|e| RunError::io(&rf.path, e))?;
        batch.refused_links.extend(
            listing
                .refused_links
                .iter()
                .map(|p| FileName::of(rf, p).shown_under(rf)),
        );
        let no_records = BTreeMap::new();
        let seen = progress.files.get(&rf.table).unwrap_or(&no_records);
        let overwrites = allow_overwrites(rf);
        let mut new: Vec<(PathBuf, FileName)> = Vec::new();
        for path in listing.files {
            let name = FileName::of(rf, &path);
            if rf.streaming
                && let Some(read) = seen.get(&name)
            {
                match read.change(&path) {
                    None => continue,
                    Some(how) if !overwrites => {
                        batch
                            .changed
                            .push(format!("{} ({how})", name.shown_under(rf)));
                        continue;
                    }
                    // Read again as a new file, as Auto Loader's allowOverwrites does.
                    Some(_) => {}
                }
            }
            new.push((path, name));
        }
        // The lazy table reads its files after this returns, when a remote folder's
        // scratch copy is gone.
        if self.lazy_files && rf.metadata && !rf.streaming && staged.is_none() {
            let table = files_table::FilesTable {
                read: rf.clone(),
                schema,
                read_schema: Arc::clone(&read_schema),
                files: new,
                settle: settle_period(config),
            };
            planner.register(&rf.table, provider_as_source(Arc::new(table)));
            return Ok(());
        }
        let (rows, records) =
            read_listed(rf, &schema, &read_schema, new, settle_period(config), batch).await?;
        batch.files += records.len() as u64;
        batch.rows += rows.iter().map(|b| b.num_rows() as u64).sum::<u64>();
        if rf.streaming {
            batch.has_new |= !records.is_empty();
            batch.offsets.files.insert(rf.table.clone(), records);
        }
        register_rows(planner, &rf.table, read_schema, rows)
    }

    /// A view is planned over its own inputs and registered as a view. Read as a stream,
    /// its streaming inputs are read as the reading flow's own (the rows appended since
    /// the version its last batch read, recorded in its offsets), so that the view's
    /// query runs over the new rows only; read whole, so are its inputs.
    async fn register_view(
        &self,
        view: &Dataset,
        read: ViewRead<'_>,
        planner: &mut Planner,
        batch: &mut BatchInputs,
    ) -> Result<(), RunError> {
        let flow = self
            .pipeline
            .flows_into(&view.name)
            .next()
            .ok_or_else(|| RunError::internal(format!("view `{}` has no query", view.name)))?;
        let FlowKind::Query { .. } = &flow.kind else {
            return Err(RunError::internal(format!(
                "view `{}` is not defined by a query",
                view.name
            )));
        };
        let whole = Processed::default();
        let (inputs, progress) = match read {
            ViewRead::Stream(progress) => (flow.inputs.clone(), progress),
            ViewRead::Whole => (flow.inputs.iter().map(read_whole).collect(), &whole),
        };
        let mut inner = Planner::with_state(self.ctx.state());
        inner.inherit_bindings(planner);
        Box::pin(self.register(&inputs, progress, &mut inner, batch)).await?;
        let plan = flow.plan_with(&inner)?;
        planner.register(
            &view.name,
            provider_as_source(Arc::new(ViewTable::new(plan, None))),
        );
        Ok(())
    }
}

/// How a flow reads a view.
enum ViewRead<'p> {
    /// As a stream (`STREAM(view)`, an AUTO CDC source): incrementally, after `progress`.
    Stream(&'p Processed),
    /// Whole, every input of the view read in full.
    Whole,
}

/// `input` read in full, not as a stream.
fn read_whole(input: &Input) -> Input {
    match input {
        Input::Dataset { name, .. } => Input::Dataset {
            name: name.clone(),
            streaming: false,
        },
        Input::Files(rf) => Input::Files(ReadFiles {
            streaming: false,
            ..rf.clone()
        }),
        Input::Delta(d) => Input::Delta(ExternalDelta {
            streaming: false,
            ..d.clone()
        }),
        // A change source is a stream only.
        Input::Postgres(rp) => Input::Postgres(rp.clone()),
        Input::Mysql(rm) => Input::Mysql(rm.clone()),
        Input::Query(rq) => Input::Query(rq.clone()),
        Input::Kafka(rk) => Input::Kafka(rk.clone()),
    }
}

/// Fails unless remote external table `d`'s Delta table has every column its
/// declaration names.
fn check_declared(d: &ExternalDelta, table: &Table) -> Result<(), RunError> {
    let Some(actual) = table.arrow_schema() else {
        return Ok(());
    };
    for field in d.schema.fields() {
        if actual.field_with_name(field.name()).is_err() {
            let has: Vec<&str> = actual.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(RunError::input(format!(
                "external table `{}`: the Delta table at {} has no column `{}` of its declared `schema:`",
                d.name,
                d.location,
                field.name()
            ))
            .with_help(format!("the table's columns are: {}", has.join(", "))));
        }
    }
    Ok(())
}

/// Reads the landing files `new` of `rf` (of `schema`; rows of `read_schema`, with
/// `_metadata` when the query reads it), each once it has settled for `settle`: their
/// rows and records. Files left for later, malformed records and the fingerprint go to
/// `batch`.
pub(crate) async fn read_listed(
    rf: &ReadFiles,
    schema: &SchemaRef,
    read_schema: &SchemaRef,
    new: Vec<(PathBuf, FileName)>,
    settle: Duration,
    batch: &mut BatchInputs,
) -> Result<(Vec<RecordBatch>, Vec<ReadRecord>), RunError> {
    // Fetched from an object store: whole once visible, so never left to settle; and
    // `_metadata` gives the object's URL.
    let remote = crate::landing_remote::url_of(rf).is_some();
    let settle = if remote { Duration::ZERO } else { settle };
    let paths: Vec<PathBuf> = new.iter().map(|(p, _)| p.clone()).collect();
    let readiness = landing::settle(&paths, settle).await;
    let mut rows = Vec::new();
    let mut records = Vec::new();
    for ((path, name), ready) in new.into_iter().zip(readiness) {
        let shown = name.shown_under(rf);
        let stamp = match ready {
            Readiness::Settled(stamp) => stamp,
            // Nothing is recorded, so it is read once it has content.
            Readiness::Empty | Readiness::Gone => continue,
            Readiness::Changing => {
                batch.incomplete.push(shown);
                continue;
            }
        };
        if !rf.streaming {
            batch.fingerprint.push(format!("{name}:{}", stamp.size));
        }
        let read = files::read_file(rf, schema, &path)?;
        // Written to while it was read: what was read may be half of it.
        if read.incomplete || Stamp::of(&path).ok() != Some(stamp) {
            batch.incomplete.push(shown);
            continue;
        }
        if !read.new_columns.is_empty() {
            let columns = read.new_columns.join("`, `");
            // Logged too: a continuous run shows no summary for a batch that
            // committed nothing, and the file waits until the run is restarted.
            tracing::warn!(file = %shown, columns = %columns, "landing file has columns the inferred schema lacks; left for the next run");
            batch.new_columns.push(format!("{shown} (`{columns}`)"));
            if !rf.streaming {
                // So that the run that reads it recomputes what read the folder.
                batch.fingerprint.push(format!("{name}:waiting"));
            }
            continue;
        }
        if rf.streaming
            && let Some(at) = stamp.modified_micros
        {
            batch.oldest_arrival_micros =
                Some(batch.oldest_arrival_micros.map_or(at, |o| o.min(at)));
        }
        match rf.metadata {
            true => rows.extend(file_metadata::attach(
                read.batches,
                (
                    &path,
                    remote.then(|| landing::readable(&name.bytes_under(rf))),
                ),
                &stamp,
                read_schema,
            )?),
            false => rows.extend(read.batches),
        }
        if rf.streaming {
            batch.landing.push(shown.clone());
        }
        let source = quarantine::Source {
            bytes: name.bytes_under(rf),
            shown,
        };
        batch
            .quarantine
            .extend(read.bad.into_iter().map(|b| (source.clone(), b)));
        records.push(ReadRecord {
            name,
            stamp: Some(stamp),
            fingerprint: read.fingerprint,
        });
    }
    Ok((rows, records))
}

fn register_rows(
    planner: &mut Planner,
    name: &str,
    schema: SchemaRef,
    rows: Vec<RecordBatch>,
) -> Result<(), RunError> {
    let table = MemTable::try_new(schema, vec![rows])?;
    planner.register(name, provider_as_source(Arc::new(table)));
    Ok(())
}

/// `cloudFiles.allowOverwrites` (Auto Loader's name): a landing file that changes after
/// it was read is read again, whole, as a new file (rows from its first reading stay).
pub fn allow_overwrites(rf: &ReadFiles) -> bool {
    ["cloudfiles.allowoverwrites", "allowoverwrites"]
        .iter()
        .find_map(|k| rf.options.get(*k))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// `landing_settle_seconds` of pipeline.yaml; a value that is no duration counts as 0.
pub fn settle_period(config: &PipelineConfig) -> Duration {
    Duration::try_from_secs_f64(config.landing_settle_seconds.max(0.0)).unwrap_or_default()
}
