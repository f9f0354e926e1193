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

/// `names` with each glob (`orders_*`, `*_cdc`, `stage?`: `*` any run of characters, `?`
/// one) replaced by the flows of `pipeline` it matches, in the pipeline's order; a glob
/// that matches none is reported (the flows listed) and gives `None`. Names without a
/// glob character are kept for [`flows_exist`] to check.
pub fn expand_flow_globs(pipeline: &Pipeline, names: Vec<String>) -> Option<Vec<String>> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        if !name.contains(['*', '?']) {
            out.push(name);
            continue;
        }
        let matched: Vec<&str> = pipeline
            .flows
            .iter()
            .map(|f| f.name.as_str())
            .filter(|f| glob_matches(&name.to_ascii_lowercase(), &f.to_ascii_lowercase()))
            .collect();
        if matched.is_empty() {
            let known: Vec<&str> = pipeline.flows.iter().map(|f| f.name.as_str()).collect();
            errln!("error: no flow matches `{name}`");
            errln!("  help: flows of this pipeline: {}", known.join(", "));
            return None;
        }
        for flow in matched {
            if !out.iter().any(|o| o.eq_ignore_ascii_case(flow)) {
                out.push(flow.to_string());
            }
        }
    }
    Some(out)
}

/// Whether `text` matches `pattern`, where `*` is any run of characters and `?` one.
pub(crate) fn glob_matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // The place after the last `*` and the text place it was tried from.
    let (mut pi, mut ti, mut star) = (0, 0, None);
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
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

#[cfg(test)]
mod tests {
    use super::glob_matches;

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(glob_matches("orders_*", "orders_cdc"));
        assert!(glob_matches("*_cdc", "orders_cdc"));
        assert!(glob_matches("o*s*c", "orders_cdc"));
        assert!(glob_matches("stage?", "stage1"));
        assert!(glob_matches("*", ""));
        assert!(!glob_matches("stage?", "stage12"));
        assert!(!glob_matches("orders_*", "customers_cdc"));
        assert!(!glob_matches("*_cdc", "orders_cdc_x"));
    }
}
