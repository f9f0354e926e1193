//! The pipeline's tables as a catalog: for `cdcflow query` and `cdcflow tables`.

use std::path::PathBuf;
use std::sync::Arc;

use cdcflow_plan::DatasetKind;
use cdcflow_plan::location::Location;
use cdcflow_plan::{Input, Pipeline};
use datafusion::common::TableReference;
use datafusion::prelude::SessionContext;
use serde::Serialize;

use crate::delta::Table;
use crate::{RunError, layout};

/// One stored table of the pipeline.
#[derive(Debug, Clone, Serialize)]
pub struct TableInfo {
    pub name: String,
    /// `streaming table`, `materialized view`, or `quarantine` for the table that keeps
    /// another's malformed landing records.
    pub kind: &'static str,
    /// AUTO CDC targets: 1 (current state) or 2 (history).
    pub scd_type: Option<u8>,
    /// The quarantine table of a table that reads landing files or PostgreSQL (it
    /// exists once a run has set a record apart).
    pub quarantine: Option<String>,
    /// `None` until a run created it.
    pub rows: Option<u64>,
    pub version: Option<i64>,
    pub path: PathBuf,
    /// Why the table cannot be read (a damaged Delta log), when it cannot.
    pub error: Option<String>,
}

fn kind_name(kind: DatasetKind) -> &'static str {
    match kind {
        DatasetKind::StreamingTable => "streaming table",
        DatasetKind::MaterializedView => "materialized view",
        DatasetKind::View => "view",
    }
}

/// A published table that cannot be read (its Delta log is damaged), and why.
#[derive(Debug)]
pub struct Unreadable {
    pub name: String,
    pub error: RunError,
}

/// A session where every table the pipeline has stored is registered by its name.
/// Tables that cannot be read are left out (and logged): see [`open`].
pub async fn session(pipeline: &Pipeline) -> Result<SessionContext, RunError> {
    let (ctx, unreadable) = open(pipeline).await?;
    for u in unreadable {
        tracing::warn!(table = %u.name, error = %u.error, "table left out of the catalog");
    }
    Ok(ctx)
}

/// [`session`], and the published tables that could not be opened: one damaged table
/// leaves the others readable.
pub async fn open(pipeline: &Pipeline) -> Result<(SessionContext, Vec<Unreadable>), RunError> {
    let ctx = cdcflow_plan::functions::session_context();
    let storage = pipeline.storage();
    let mut unreadable = Vec::new();
    for d in pipeline.datasets.iter().filter(|d| d.is_published()) {
        let dir = layout::table_dir(&storage, d)?;
        if let Err(error) = register(&ctx, &d.name, &dir).await {
            unreadable.push(Unreadable {
                name: d.name.clone(),
                error,
            });
            continue;
        }
        let quarantine = crate::quarantine::table_name(&d.name);
        if let Err(error) = register(&ctx, &quarantine, &layout::quarantine_dir(&dir)).await {
            unreadable.push(Unreadable {
                name: quarantine,
                error,
            });
        }
        let late = crate::stateful::late::table_name(&d.name);
        if let Err(error) = register(&ctx, &late, &layout::late_dir(&dir)).await {
            unreadable.push(Unreadable { name: late, error });
        }
    }
    let log = crate::event_log::TABLE;
    if let Err(error) = register(&ctx, log, &crate::event_log::dir(&storage)).await {
        unreadable.push(Unreadable {
            name: log.to_string(),
            error,
        });
    }
    Ok((ctx, unreadable))
}

/// A session that knows only the pipeline's table `name`: what a reader of that one
/// table opens (`locate` says why a name cannot be read).
pub async fn session_of(pipeline: &Pipeline, name: &str) -> Result<SessionContext, RunError> {
    let located = locate(pipeline, name).await?;
    let ctx = cdcflow_plan::functions::session_context();
    register(&ctx, &located.name, &located.dir).await?;
    Ok(ctx)
}

/// Registers the table at `dir` as `name`, when it exists.
async fn register(ctx: &SessionContext, name: &str, dir: &Location) -> Result<(), RunError> {
    let table = Table::open(dir).await?;
    if let Some(t) = table.table {
        let provider = t.table_provider().await?;
        let reference = reference(name);
        make_namespace(ctx, &reference);
        ctx.register_table(reference, provider)?;
    }
    Ok(())
}

/// How SQL names a table the pipeline knows as `name`: a dataset known by several
/// parts (`silver.orders` beside `bronze.orders`) is read as `silver.orders`.
pub fn reference(name: &str) -> TableReference {
    match name.split('.').collect::<Vec<_>>().as_slice() {
        [schema, table] => TableReference::partial(*schema, *table),
        [catalog, schema, table] => TableReference::full(*catalog, *schema, *table),
        _ => TableReference::bare(name),
    }
}

/// Adds the catalog and schema `reference` names to the session, where missing.
fn make_namespace(ctx: &SessionContext, reference: &TableReference) {
    use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
    let Some(schema) = reference.schema() else {
        return;
    };
    let options = ctx.state().config_options().catalog.clone();
    let catalog_name = reference.catalog().unwrap_or(&options.default_catalog);
    let catalog = ctx.catalog(catalog_name).unwrap_or_else(|| {
        let catalog: Arc<dyn CatalogProvider> = Arc::new(MemoryCatalogProvider::new());
        ctx.register_catalog(catalog_name, Arc::clone(&catalog));
        catalog
    });
    if catalog.schema(schema).is_none() {
        // Registering into a memory catalog cannot fail.
        let _ = catalog.register_schema(schema, Arc::new(MemorySchemaProvider::new()));
    }
}

/// Every table of the pipeline with its kind, row count and Delta version; a table that
/// cannot be read is listed with its error.
pub async fn tables(pipeline: &Pipeline) -> Result<Vec<TableInfo>, RunError> {
    let (ctx, unreadable) = open(pipeline).await?;
    let storage = pipeline.storage();
    let mut out = Vec::new();
    for d in pipeline.datasets.iter().filter(|d| d.is_published()) {
        let dir = layout::table_dir(&storage, d)?;
        let flows = || pipeline.flows.iter().filter(|f| f.target == d.name);
        let sets_apart = flows().any(|f| {
            f.inputs
                .iter()
                .any(|i| matches!(i, Input::Files(_) | Input::Postgres(_) | Input::Mysql(_)))
        });
        let quarantine = sets_apart.then(|| crate::quarantine::table_name(&d.name));
        let info = TableInfo {
            name: d.name.clone(),
            kind: kind_name(d.kind),
            scd_type: flows().find_map(|f| f.auto_cdc().map(|spec| spec.scd_type)),
            quarantine: quarantine.clone(),
            rows: None,
            version: None,
            path: dir.shown(),
            error: None,
        };
        out.push(describe(&ctx, &unreadable, info, &dir).await?);
        if let Some(name) = quarantine {
            let info = TableInfo {
                name,
                kind: "quarantine",
                scd_type: None,
                quarantine: None,
                rows: None,
                version: None,
                path: layout::quarantine_dir(&dir).shown(),
                error: None,
            };
            out.push(describe(&ctx, &unreadable, info, &layout::quarantine_dir(&dir)).await?);
        }
    }
    Ok(out)
}

/// A table `cdcflow query` knows by name, where it is stored, whether it exists yet.
#[derive(Debug, Clone)]
pub struct Located {
    pub name: String,
    /// `streaming table`, `materialized view`, `quarantine` or `event log`.
    pub kind: &'static str,
    pub dir: Location,
}

/// Every table `cdcflow query` can name: the published tables, their quarantine
/// tables and the event log, created or not.
pub fn all(pipeline: &Pipeline) -> Result<Vec<Located>, RunError> {
    let storage = pipeline.storage();
    let mut out = Vec::new();
    for d in pipeline.datasets.iter().filter(|d| d.is_published()) {
        let dir = layout::table_dir(&storage, d)?;
        out.push(Located {
            name: crate::quarantine::table_name(&d.name),
            kind: "quarantine",
            dir: layout::quarantine_dir(&dir),
        });
        out.push(Located {
            name: crate::stateful::late::table_name(&d.name),
            kind: "late rows",
            dir: layout::late_dir(&dir),
        });
        out.push(Located {
            name: d.name.clone(),
            kind: kind_name(d.kind),
            dir,
        });
    }
    out.push(Located {
        name: crate::event_log::TABLE.to_string(),
        kind: "event log",
        dir: crate::event_log::dir(&storage),
    });
    // Each published table before its quarantine.
    out.sort_by_key(|l| (l.kind == "event log", l.kind == "quarantine"));
    Ok(out)
}

/// The table `name` (as the query spells it; case-insensitive when not exact), which
/// must exist: an unknown name and a table no run has created yet are errors that say
/// so.
pub async fn locate(pipeline: &Pipeline, name: &str) -> Result<Located, RunError> {
    let tables = all(pipeline)?;
    let found = tables
        .iter()
        .find(|l| l.name == name)
        .or_else(|| tables.iter().find(|l| l.name.eq_ignore_ascii_case(name)));
    let Some(found) = found else {
        let names: Vec<&str> = tables
            .iter()
            .filter(|l| l.kind != "quarantine")
            .map(|l| l.name.as_str())
            .collect();
        return Err(RunError::input(format!("unknown table `{name}`"))
            .with_help(format!("the pipeline's tables: {}", names.join(", "))));
    };
    if !exists(&found.dir).await? {
        return Err(
            RunError::input(format!("table `{}` has not been created yet", found.name)).with_help(
                match found.kind {
                    "quarantine" => {
                        "it is created by the first run that sets a malformed landing record apart"
                    }
                    _ => "`cdcflow run` creates it",
                },
            ),
        );
    }
    Ok(found.clone())
}

/// Whether a Delta table is at `at`.
pub async fn exists(at: &Location) -> Result<bool, RunError> {
    match at {
        Location::Local(dir) => Ok(crate::delta::has_commits(dir)),
        Location::Remote(_) => Ok(Table::open(at).await?.exists()),
    }
}

/// `info` with the rows and version of its table, or the error that keeps it unreadable.
async fn describe(
    ctx: &SessionContext,
    unreadable: &[Unreadable],
    mut info: TableInfo,
    at: &Location,
) -> Result<TableInfo, RunError> {
    if let Some(u) = unreadable.iter().find(|u| u.name == info.name) {
        info.error = Some(u.error.with_help_inline());
        return Ok(info);
    }
    let table = Table::open(at).await?;
    if table.exists() {
        info.rows = Some(ctx.table(reference(&info.name)).await?.count().await? as u64);
    }
    info.version = table.version();
    Ok(info)
}
