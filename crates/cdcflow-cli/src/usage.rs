//! Names given on the command line (`--flow`, `--full-refresh TABLE`, the tables of
//! `vacuum` and `optimize`) are checked against the pipeline before anything runs: a
//! name that names nothing is a usage error, exit status 2 as for an unknown option,
//! with the nearest name and the list.

use cdcflow_plan::Pipeline;
use cdcflow_sql::ast::DatasetKind;

/// Exit status of a usage error.
pub const EXIT: u8 = 2;

/// Reports the first of `names` that is not a flow of `pipeline`; false when there is one.
pub fn flows_exist(pipeline: &Pipeline, names: &[String]) -> bool {
    let known: Vec<&str> = pipeline.flows.iter().map(|f| f.name.as_str()).collect();
    all_known(names, |n| pipeline.flow(n).map(|_| true), "flow", &known)
}

/// Reports the first of `names` that is not a stored table of `pipeline` (a streaming
/// table or materialized view: views store nothing); false when there is one.
pub fn tables_exist(pipeline: &Pipeline, names: &[String]) -> bool {
    let stored = |n: &str| pipeline.dataset(n).map(|d| d.kind != DatasetKind::View);
    let known: Vec<&str> = pipeline
        .datasets
        .iter()
        .filter(|d| d.kind != DatasetKind::View)
        .map(|d| d.name.as_str())
        .collect();
    all_known(names, stored, "table", &known)
}

/// `exists` says whether a name is of the kind wanted: `None` when it names nothing,
/// `Some(false)` when it names a view.
fn all_known(
    names: &[String],
    exists: impl Fn(&str) -> Option<bool>,
    what: &str,
    known: &[&str],
) -> bool {
    let Some((unknown, found)) = names
        .iter()
        .map(|n| (n, exists(n)))
        .find(|(_, found)| *found != Some(true))
    else {
        return true;
    };
    let list = format!("{what}s of this pipeline: {}", known.join(", "));
    if found.is_some() {
        errln!("error: `{unknown}` is a view, which stores no {what}");
        errln!("  help: {list}");
        return false;
    }
    errln!("error: no {what} named `{unknown}`");
    match cdcflow_plan::suggest::did_you_mean(unknown, known.iter().copied()) {
        Some(near) => errln!("  help: {near} {list}"),
        None => errln!("  help: {list}"),
    }
    false
}
