//! The pipeline's tables as a catalog: for `cdcflow query` and `cdcflow tables`.

use std::path::PathBuf;

use cdcflow_plan::Pipeline;
use cdcflow_plan::planner::session_config;
use cdcflow_sql::ast::DatasetKind;
use datafusion::common::TableReference;
use datafusion::prelude::SessionContext;
use serde::Serialize;

use crate::delta::Table;
use crate::{RunError, layout};

/// One stored table of the pipeline.
#[derive(Debug, Clone, Serialize)]
pub struct TableInfo {
    pub name: String,
    /// `streaming table` or `materialized view`.
    pub kind: &'static str,
    /// `None` until a run created it.
    pub rows: Option<u64>,
    pub version: Option<i64>,
    pub path: PathBuf,
}

fn kind_name(kind: DatasetKind) -> &'static str {
    match kind {
        DatasetKind::StreamingTable => "streaming table",
        DatasetKind::MaterializedView => "materialized view",
        DatasetKind::View => "view",
    }
}

/// A session where every table the pipeline has stored is registered by its name.
pub async fn session(pipeline: &Pipeline) -> Result<SessionContext, RunError> {
    let ctx = SessionContext::new_with_config(session_config());
    let storage = pipeline.storage_dir();
    for d in pipeline.datasets.iter().filter(|d| d.is_published()) {
        let dir = layout::table_dir(&storage, d)?;
        let table = Table::open(&dir).await?;
        let Some(t) = table.table else { continue };
        let provider = t.table_provider().await?;
        ctx.register_table(TableReference::bare(d.name.as_str()), provider)?;
        let quarantine = crate::quarantine::table_name(&d.name);
        let q = Table::open(&layout::quarantine_dir(&dir)).await?;
        if let Some(t) = q.table {
            let provider = t.table_provider().await?;
            ctx.register_table(TableReference::bare(quarantine.as_str()), provider)?;
        }
    }
    let log = Table::open(&crate::event_log::dir(&storage)).await?;
    if let Some(t) = log.table {
        ctx.register_table(
            TableReference::bare(crate::event_log::TABLE),
            t.table_provider().await?,
        )?;
    }
    Ok(ctx)
}

/// Every table of the pipeline with its kind, row count and Delta version.
pub async fn tables(pipeline: &Pipeline) -> Result<Vec<TableInfo>, RunError> {
    let ctx = session(pipeline).await?;
    let storage = pipeline.storage_dir();
    let mut out = Vec::new();
    for d in pipeline.datasets.iter().filter(|d| d.is_published()) {
        let dir = layout::table_dir(&storage, d)?;
        let table = Table::open(&dir).await?;
        let rows = match table.exists() {
            true => Some(
                ctx.table(TableReference::bare(d.name.as_str()))
                    .await?
                    .count()
                    .await? as u64,
            ),
            false => None,
        };
        out.push(TableInfo {
            name: d.name.clone(),
            kind: kind_name(d.kind),
            rows,
            version: table.version(),
            path: dir,
        });
    }
    Ok(out)
}
