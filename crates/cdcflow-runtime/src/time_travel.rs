//! Time travel in `cdcflow query`: `FROM t VERSION AS OF 2` and `FROM t TIMESTAMP AS OF
//! '…'` read that Delta version of `t`, or fail saying why it cannot be read (no such
//! version, a version older than the table, a log entry or data files that cleanup
//! removed). DataFusion's planner would ignore the clause and read the current version.
//!
//! Each such table reference is rewritten, before planning, to a name of its own bound
//! to the table loaded at that version; the reference keeps its name as its alias, so
//! `t.col` still resolves.

use std::ops::ControlFlow;
use std::sync::Arc;

use cdcflow_plan::Pipeline;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Int64Type, TimestampMillisecondType};
use datafusion::catalog::TableProvider;
use datafusion::common::TableReference;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement;
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, ObjectName, ObjectNamePart, TableAlias, TableFactor, TableVersion, VisitMut,
    VisitorMut,
};

use crate::RunError;
use crate::catalog::{self, Located};
use crate::delta::Table;
use crate::history;

/// Which version of a table to read.
#[derive(Debug, Clone, PartialEq)]
pub enum At {
    Version(i64),
    /// Milliseconds since the epoch (UTC): the newest version committed at or before.
    Timestamp(i64),
}

/// One `AS OF` reference found in the statement.
struct Travel {
    table: String,
    /// The name the reference now has.
    bound: String,
    version: TableVersion,
}

/// Binds every `VERSION AS OF` / `TIMESTAMP AS OF` reference of `statement` to that
/// version of its table, registered in `ctx` under a name of its own.
pub async fn resolve(
    ctx: &SessionContext,
    pipeline: &Pipeline,
    statement: &mut Statement,
) -> Result<(), RunError> {
    let mut found = Rebind {
        travels: vec![],
        datasets: pipeline.datasets.iter().map(|d| d.name.clone()).collect(),
    };
    visit(statement, &mut found);
    for travel in found.travels {
        if ctx.table_exist(TableReference::bare(travel.bound.as_str()))? {
            continue;
        }
        let at = at(ctx, &travel).await?;
        let provider = provider(pipeline, &travel.table, &at).await?;
        ctx.register_table(TableReference::bare(travel.bound.as_str()), provider)?;
    }
    Ok(())
}

fn visit(statement: &mut Statement, found: &mut Rebind) {
    match statement {
        Statement::Statement(s) => {
            let _ = s.visit(found);
        }
        Statement::Explain(e) => visit(&mut e.statement, found),
        // Statements that write are refused after planning.
        _ => {}
    }
}

/// Renames each table reference with a version to the name its version is bound to.
struct Rebind {
    travels: Vec<Travel>,
    /// The pipeline's dataset names: one known by several parts (`silver.orders`) is
    /// named by them all.
    datasets: Vec<String>,
}

impl VisitorMut for Rebind {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            alias,
            version,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let Some(v) = version.take() else {
            return ControlFlow::Continue(());
        };
        let last = name
            .0
            .last()
            .and_then(ObjectNamePart::as_ident)
            .map(|i| i.value.clone())
            .unwrap_or_else(|| name.to_string());
        let whole: Vec<String> = name
            .0
            .iter()
            .filter_map(ObjectNamePart::as_ident)
            .map(|i| i.value.clone())
            .collect();
        let whole = whole.join(".");
        let table = match self.datasets.iter().any(|d| d.eq_ignore_ascii_case(&whole)) {
            true => whole,
            false => last.clone(),
        };
        let bound = format!("{table} {v}");
        if alias.is_none() {
            *alias = Some(TableAlias {
                explicit: false,
                name: Ident::new(last),
                columns: vec![],
                at: None,
            });
        }
        *name = ObjectName::from(vec![Ident::with_quote('"', bound.clone())]);
        self.travels.push(Travel {
            table,
            bound,
            version: v,
        });
        ControlFlow::Continue(())
    }
}

/// The version a reference asks for: its expression evaluated (a literal, or a
/// constant expression such as `current_timestamp() - INTERVAL 1 HOUR`).
async fn at(ctx: &SessionContext, travel: &Travel) -> Result<At, RunError> {
    let (expr, timestamp) = match &travel.version {
        TableVersion::VersionAsOf(e) => (e, false),
        TableVersion::TimestampAsOf(e) | TableVersion::ForSystemTimeAsOf(e) => (e, true),
        other => {
            return Err(
                RunError::input(format!("`{}`: `{other}` is not supported", travel.table))
                    .with_help("read an older version with VERSION AS OF n or TIMESTAMP AS OF '…'"),
            );
        }
    };
    let bad = || {
        let (what, help) = match timestamp {
            true => (
                "a timestamp",
                "write it as '2026-12-01 10:00:00' (UTC) or an expression such as current_timestamp() - INTERVAL 1 HOUR; DESCRIBE HISTORY lists each version's timestamp",
            ),
            false => (
                "a version number",
                "DESCRIBE HISTORY lists the table's versions",
            ),
        };
        RunError::input(format!(
            "`{}` {}: {expr} is not {what}",
            travel.table, travel.version
        ))
        .with_help(help)
    };
    let cast = match timestamp {
        true => "TIMESTAMP(3, 'UTC')",
        false => "BIGINT",
    };
    let value = constant(ctx, expr, cast).await.map_err(|_| bad())?;
    let Some(value) = value else {
        return Err(bad());
    };
    Ok(match timestamp {
        true => At::Timestamp(value),
        false => At::Version(value),
    })
}

/// `expr` cast to `cast`, as an integer (milliseconds for a timestamp); `None` for null.
async fn constant(ctx: &SessionContext, expr: &Expr, cast: &str) -> Result<Option<i64>, RunError> {
    let sql = match cast {
        "BIGINT" => format!("SELECT CAST(({expr}) AS BIGINT)"),
        _ => format!(
            "SELECT arrow_cast(CAST(({expr}) AS TIMESTAMP), 'Timestamp(Millisecond, Some(\"UTC\"))')"
        ),
    };
    let batches = ctx.sql(&sql).await?.collect().await?;
    let Some(column) = batches
        .first()
        .filter(|b| b.num_rows() == 1)
        .map(|b| b.column(0))
    else {
        return Ok(None);
    };
    if column.is_null(0) {
        return Ok(None);
    }
    Ok(Some(match cast {
        "BIGINT" => column.as_primitive::<Int64Type>().value(0),
        _ => column.as_primitive::<TimestampMillisecondType>().value(0),
    }))
}

/// The table `name` of the pipeline at `at`, ready to query; an error that says why
/// when that version cannot be read.
pub async fn provider(
    pipeline: &Pipeline,
    name: &str,
    at: &At,
) -> Result<Arc<dyn TableProvider>, RunError> {
    let located = catalog::locate(pipeline, name).await?;
    let table = Table::open(&located.dir).await?;
    let newest = table.version().unwrap_or(0);
    let version = match *at {
        At::Version(v) if (0..=newest).contains(&v) => v,
        At::Version(v) => {
            return Err(RunError::input(format!(
                "`{}` has no version {v}: its versions are 0 to {newest}",
                located.name
            ))
            .with_help(history_help(&located)));
        }
        At::Timestamp(ms) => version_at(&located, &table, ms).await?,
    };
    let Some(t) = &table.table else {
        return Err(RunError::input(format!(
            "table `{}` has not been created yet",
            located.name
        )));
    };
    if table.commit_actions(t, version).await?.is_none() {
        return Err(RunError::input(format!(
            "version {version} of `{}` is gone from its Delta log (log cleanup removed it)",
            located.name
        ))
        .with_help(history_help(&located)));
    }
    let old = Table::open_at(&located.dir, version).await?;
    // A bucket's missing file fails the query that reads it, naming it.
    let missing: Vec<_> = match located.dir.is_remote() {
        true => Vec::new(),
        false => old
            .files()?
            .into_iter()
            .filter(|f| !f.path.exists())
            .collect(),
    };
    if let Some(first) = missing.first() {
        return Err(RunError::input(format!(
            "version {version} of `{}` can no longer be read: vacuum removed {} of its data files (such as {})",
            located.name,
            missing.len(),
            first.path.file_name().unwrap_or_default().to_string_lossy()
        ))
        .with_help("vacuum keeps only the files the versions within the table's retention need (`delta.deletedFileRetentionDuration`, 7 days by default); read a newer version"));
    }
    let Some(t) = old.table else {
        return Err(RunError::input(format!(
            "version {version} of `{}` cannot be read",
            located.name
        )));
    };
    Ok(t.table_provider().await?)
}

/// The newest version of the table committed at or before `ms`, by the timestamps
/// `DESCRIBE HISTORY` shows.
async fn version_at(located: &Located, table: &Table, ms: i64) -> Result<i64, RunError> {
    let entries = history::entries(table, None).await?;
    if let Some(e) = entries
        .iter()
        .find(|e| e.timestamp.is_some_and(|t| t <= ms))
    {
        return Ok(e.version);
    }
    let when = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
            .unwrap_or_else(|| ms.to_string())
    };
    let oldest = entries
        .last()
        .and_then(|e| e.timestamp.map(|t| (e.version, t)));
    Err(RunError::input(match oldest {
        Some((v, t)) => format!(
            "`{}` has no version as old as {}: its oldest version in the log, {v}, was committed at {}",
            located.name,
            when(ms),
            when(t)
        ),
        None => format!("`{}` has no version as old as {}", located.name, when(ms)),
    })
    .with_help(history_help(located)))
}

fn history_help(located: &Located) -> String {
    format!(
        "`DESCRIBE HISTORY {}` lists the versions that can be read",
        located.name
    )
}
