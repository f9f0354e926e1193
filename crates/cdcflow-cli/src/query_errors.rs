//! What `cdcflow query` says when a query cannot be planned, in the pipeline's terms.
//! DataFusion says `table 'datafusion.public.users_raw' not found`, naming its own
//! default catalog and schema, whether the table is misspelt, not created by a run yet,
//! a view (views are not stored) or unreadable; and it starts its messages with the
//! kind of its error (`Error during planning: `, `Schema error: `). The tables are
//! looked at only once planning has failed, so a query that plans is never held up.

use std::path::Path;

use cdcflow_plan::Pipeline;
use cdcflow_runtime::RunError;
use cdcflow_runtime::catalog::Unreadable;
use cdcflow_sql::ast::DatasetKind;
use datafusion::common::TableReference;
use datafusion::prelude::SessionContext;

/// The error to show instead of DataFusion's when `sql` names a table that is not in
/// `ctx`; `None` when every table it names is there (the error is about something
/// else). `dir` is the pipeline folder as the user gave it, for the command to run.
pub fn explain(
    ctx: &SessionContext,
    pipeline: &Pipeline,
    dir: &Path,
    sql: &str,
    unreadable: Vec<Unreadable>,
) -> Option<RunError> {
    let state = ctx.state();
    let statement = crate::read_only::parse(ctx, sql).ok()?;
    let references = state.resolve_table_references(&statement).ok()?;
    let missing = references.into_iter().find(|r| {
        !state.table_functions().contains_key(r.table())
            && !ctx.table_exist(r.clone()).unwrap_or(false)
    })?;
    Some(why_missing(ctx, pipeline, dir, &missing, unreadable))
}

fn why_missing(
    ctx: &SessionContext,
    pipeline: &Pipeline,
    dir: &Path,
    missing: &TableReference,
    unreadable: Vec<Unreadable>,
) -> RunError {
    // A dataset known by several parts (`silver.orders`) is asked for by them all.
    let whole = missing.to_string();
    let name = match pipeline.dataset(&whole) {
        Some(_) => whole.as_str(),
        None => missing.table(),
    };
    if let Some(u) = unreadable
        .into_iter()
        .find(|u| u.name.eq_ignore_ascii_case(name))
    {
        return u.error;
    }
    let written = missing.to_string();
    let (shown, readable) = readable_names(pipeline);
    let known = format!("tables of this pipeline: {}", shown.join(", "));
    if missing.schema() == Some("information_schema") {
        return RunError::input(format!("`{written}` is not available in `cdcflow query`"))
            .with_help(format!(
                "`cdcflow tables` lists the tables with their kind, rows and version; DESCRIBE <table> shows its columns; {known}"
            ));
    }
    if missing.schema().is_some() && ctx.table_exist(TableReference::bare(name)).unwrap_or(false) {
        return RunError::input(format!("unknown table `{written}`")).with_help(format!(
            "the pipeline's tables are named without a catalog or schema: `{name}`"
        ));
    }
    let run = match dir == Path::new(".") {
        true => "cdcflow run".to_string(),
        false => format!("cdcflow run -p {}", dir.display()),
    };
    if let Some(d) = pipeline.dataset(name) {
        if d.is_published() {
            return RunError::input(format!(
                "table `{}` has not been created yet: no run has written it",
                d.name
            ))
            .with_help(format!("`{run}` creates it from the pipeline's flows"));
        }
        let why = match d.kind {
            DatasetKind::View => "a view: views are not stored".to_string(),
            kind => format!("a PRIVATE {}: it is not published", kind.noun()),
        };
        return RunError::input(format!("`{}` is {why}, so it cannot be queried", d.name))
            .with_help(format!("query the tables it reads; {known}"));
    }
    if let Some(target) = shown
        .iter()
        .find(|t| cdcflow_runtime::quarantine::table_name(t).eq_ignore_ascii_case(name))
    {
        return RunError::input(format!(
            "table `{name}` has not been created yet: no run has set apart a malformed record of `{target}`"
        ))
        .with_help("a run creates it when it finds the first landing record it cannot read");
    }
    if let Some(target) = shown
        .iter()
        .find(|t| cdcflow_runtime::stateful::late::table_name(t).eq_ignore_ascii_case(name))
    {
        return RunError::input(format!(
            "table `{name}` has not been created yet: no run has dropped a late row of `{target}`"
        ))
        .with_help("a run creates it when an aggregation over a watermarked stream drops its first late row");
    }
    if name.eq_ignore_ascii_case(cdcflow_runtime::event_log::TABLE) {
        return RunError::input(format!(
            "table `{name}` has not been created yet: the pipeline has not run"
        ))
        .with_help(format!("`{run}` creates it"));
    }
    let help = match cdcflow_plan::suggest::did_you_mean(name, readable.iter().map(String::as_str))
    {
        Some(near) => format!("{near} {known}"),
        None => known,
    };
    RunError::input(format!("unknown table `{written}`")).with_help(help)
}

/// The names to list (the published tables and the event log), and every name
/// `cdcflow query` can read once runs have written it (those, the quarantine tables and
/// the late-rows tables).
fn readable_names(pipeline: &Pipeline) -> (Vec<String>, Vec<String>) {
    let published = pipeline
        .datasets
        .iter()
        .filter(|d| d.is_published())
        .map(|d| d.name.clone());
    let shown: Vec<String> = published
        .chain([cdcflow_runtime::event_log::TABLE.to_string()])
        .collect();
    let quarantine = pipeline
        .datasets
        .iter()
        .filter(|d| d.is_published())
        .flat_map(|d| {
            [
                cdcflow_runtime::quarantine::table_name(&d.name),
                cdcflow_runtime::stateful::late::table_name(&d.name),
            ]
        });
    let readable = shown.iter().cloned().chain(quarantine).collect();
    (shown, readable)
}

/// A query's error as the user reads it (see `cdcflow_plan::df_message`).
pub fn message(e: &RunError) -> String {
    match e {
        RunError::DataFusion(e) => cdcflow_plan::df_message::user_message(e),
        e => e.to_string(),
    }
}
