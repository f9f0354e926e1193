//! `cdcflow query`'s errors speak of the pipeline's tables: a table not created yet, a
//! misspelt one, a column that is not there; never DataFusion's internal catalog names
//! (`datafusion.public.x`) or error kinds (`Error during planning:`).

use crate::{cdcflow, copy_dir, repo, stderr};

fn query_error(p: &str, sql: &str) -> String {
    let out = cdcflow(&["query", "-p", p, sql]);
    assert_eq!(out.status.code(), Some(1), "{sql}: {}", stderr(&out));
    let err = stderr(&out);
    for internal in [
        "datafusion",
        "Error during planning",
        "Schema error",
        "public.",
    ] {
        assert!(!err.contains(internal), "{sql}: `{internal}` in {err}");
    }
    err
}

#[test]
fn query_errors_name_the_pipeline_s_tables_and_say_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let p = dir.path().to_str().expect("utf-8");

    let err = query_error(p, "SELECT * FROM silver_orders_history");
    assert!(
        err.contains("table `silver_orders_history` has not been created yet"),
        "{err}"
    );
    assert!(
        err.contains(&format!("`cdcflow run -p {p}` creates it")),
        "{err}"
    );

    let err = query_error(p, "SELECT * FROM silver_order_history");
    assert!(
        err.contains("unknown table `silver_order_history`"),
        "{err}"
    );
    assert!(
        err.contains("did you mean `silver_orders_history`?"),
        "{err}"
    );

    assert!(cdcflow(&["run", "-p", p]).status.success());
    let err = query_error(p, "SELECT count(*) FROM bronze_order_changes__quarantine");
    assert!(
        err.contains("no run has set apart a malformed record"),
        "{err}"
    );
    let err = query_error(p, "SELECT statsu FROM gold_orders_by_status");
    assert!(err.contains("No field named statsu"), "{err}");
    let err = query_error(p, "SELEC 1");
    assert!(err.starts_with("error: syntax error: "), "{err}");
}

#[test]
fn a_commands_error_is_printed_as_a_diagnostic_with_its_code_and_help() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let p = dir.path().to_str().expect("utf-8");
    let err = query_error(p, "SELECT * FROM silver_order_history");
    let mut lines = err.lines();
    assert_eq!(
        lines.next(),
        Some("error: unknown table `silver_order_history`"),
        "{err}"
    );
    // Then miette's report, as `cdcflow validate` prints: the stable code, the
    // message, the help.
    assert!(err.contains("cdcflow::run::input"), "{err}");
    assert!(
        err.contains("× unknown table `silver_order_history`"),
        "{err}"
    );
    assert!(
        err.contains("help: did you mean `silver_orders_history`?"),
        "{err}"
    );
}

#[test]
fn list_files_in_a_query_lists_a_folder_of_the_pipeline_and_says_what_is_wrong_with_a_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let p = dir.path().to_str().expect("utf-8");
    let url = |rel: &str| format!("file://{}/{rel}", dir.path().display());
    let out = cdcflow(&[
        "query",
        "-p",
        p,
        "SELECT path, size > 0 AS written FROM list_files('landing') ORDER BY path",
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        crate::stdout(&out),
        format!(
            "path,written\n{},true\n{},true\n",
            url("landing/orders/0001.json"),
            url("landing/orders/0002.json")
        )
    );
    let out = cdcflow(&[
        "query",
        "-p",
        p,
        "SELECT path, size FROM list_files('landing', recursive => false)",
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        crate::stdout(&out),
        format!("path,size\n{},0\n", url("landing/orders/"))
    );
    let err = query_error(p, "SELECT * FROM list_files('landing', recursive => 'yes')");
    assert!(
        err.contains("list_files: recursive => yes is not a boolean"),
        "{err}"
    );
    let err = query_error(p, "SELECT * FROM list_files('landing', depth => 2)");
    assert!(err.contains("list_files has no option `depth`"), "{err}");
}
