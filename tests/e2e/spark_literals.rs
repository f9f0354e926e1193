//! Spark's forms of values at the edges of the SQL: `cdcflow query --format json`
//! writes NaN and the infinities as Spark's JSON does (the strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"`), and a backslash escapes a quote in a string literal,
//! in a query and in a pipeline's SQL file alike.

use crate::{cdcflow, query_csv, stderr, stdout};

const ONE: &str = "CREATE OR REFRESH MATERIALIZED VIEW one AS SELECT 1 AS n;\n";

/// A pipeline of one view, `flows` its SQL.
fn pipeline(flows: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pipeline.yaml"), "name: spark_literals\n").expect("yaml");
    std::fs::write(dir.path().join("flows.sql"), flows).expect("flows.sql");
    dir
}

#[test]
fn query_json_writes_nan_and_infinities_as_spark_does() {
    let dir = pipeline(ONE);
    let out = cdcflow(&[
        "query",
        "-p",
        dir.path().to_str().expect("utf-8"),
        "SELECT CAST('NaN' AS DOUBLE) AS n, CAST('Infinity' AS DOUBLE) AS p, CAST('-Infinity' AS DOUBLE) AS m, \
         CAST(1.5 AS DOUBLE) AS x, CAST('NaN' AS FLOAT) AS f, named_struct('d', CAST('-Infinity' AS DOUBLE)) AS s, \
         array(CAST('NaN' AS DOUBLE), 2.0) AS a, CAST(NULL AS DOUBLE) AS z",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        r#"{"n":"NaN","p":"Infinity","m":"-Infinity","x":1.5,"f":"NaN","s":{"d":"-Infinity"},"a":["NaN",2.0],"z":null}"#
    );
}

#[test]
fn a_backslash_escapes_a_quote_in_a_query_and_in_a_pipeline_file() {
    let plain = pipeline(ONE);
    let out = query_csv(plain.path(), r"SELECT 'x\'y' AS s, 'a\\b' AS t");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "s,t\nx'y,a\\b\n");
    // A view holding strings written with backslash escapes.
    let dir = pipeline(
        r"CREATE OR REFRESH MATERIALIZED VIEW quoted AS SELECT 'it\'s' AS s, 'a\\b' AS t, 'tab\there' AS u;",
    );
    let run = cdcflow(&["run", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(run.status.success(), "{}{}", stdout(&run), stderr(&run));
    let out = query_csv(
        dir.path(),
        "SELECT s, t, u = concat('tab', chr(9), 'here') AS tabbed FROM quoted",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "s,t,tabbed\nit's,a\\b,true\n");
}
