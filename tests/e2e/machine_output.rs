//! One way to ask for machine output (`--format json`, `--json` its alias), help text on
//! every `--format`, exit status 2 for every usage error, a warning for a `--conf` key
//! nothing uses, diagnostics naming files from the current folder, and what `tables`
//! says about AUTO CDC targets and quarantine tables.

use serde_json::Value;

use crate::{cdcflow, cdcflow_in, repo, stderr, stdout};

fn json_lines(out: &std::process::Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn orders() -> tempfile::TempDir {
    crate::example_copy("orders")
}

#[test]
fn every_machine_form_takes_format_json_and_json() {
    let dir = orders();
    let p = dir.path().to_str().expect("utf-8");
    let run = cdcflow(&["run", "-p", p, "--format", "json"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(json_lines(&run).len(), 3);
    let again = cdcflow(&["run", "-p", p, "--json"]);
    assert_eq!(json_lines(&again)[0]["outcome"]["status"], "up_to_date");
    let sql = "SELECT count(*) AS n FROM silver_orders_history";
    let commands: [&[&str]; 4] = [
        &["status", "-p", p],
        &["tables", "-p", p],
        &["validate", "-p", p, "--conf", "nothing.uses=this"],
        &["query", "-p", p, sql],
    ];
    for args in commands {
        let format = cdcflow(&[args, &["--format", "json"]].concat());
        let alias = cdcflow(&[args, &["--json"]].concat());
        assert!(format.status.success(), "{args:?}: {}", stderr(&format));
        assert!(alias.status.success(), "{args:?}: {}", stderr(&alias));
        let lines = json_lines(&format);
        assert!(!lines.is_empty(), "{args:?}");
        assert_eq!(lines, json_lines(&alias), "{args:?}");
    }
}

#[test]
fn every_format_option_has_help_text() {
    let commands = [
        "validate", "run", "query", "tables", "status", "vacuum", "optimize",
    ];
    for command in commands {
        let help = stdout(&cdcflow(&[command, "--help"]));
        let lines: Vec<&str> = help.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with("--format <FORMAT>"))
            .unwrap_or_else(|| panic!("{command} has no --format: {help}"));
        let text = lines[at + 1].trim();
        assert!(
            !text.is_empty() && !text.starts_with("Possible values") && !text.starts_with('['),
            "{command} --format has no help text: {help}"
        );
        assert!(help.contains("--json"), "{command}: {help}");
    }
}

#[test]
fn usage_errors_exit_2_with_the_nearest_name() {
    let dir = orders();
    let p = dir.path().to_str().expect("utf-8");
    let cases: [(&[&str], &str); 7] = [
        (
            &["run", "-p", p, "--flow", "orders_change"],
            "did you mean `orders_changes`?",
        ),
        (
            &["explain", "-p", p, "--flow", "orders_change"],
            "did you mean `orders_changes`?",
        ),
        (
            &["run", "-p", p, "--full-refresh", "silver_order_history"],
            "did you mean `silver_orders_history`?",
        ),
        (
            &["vacuum", "-p", p, "gold_order_by_status"],
            "did you mean `gold_orders_by_status`?",
        ),
        (&["optimize", "-p", p, "nosuch"], "tables of this pipeline:"),
        (&["status", "-p", p, "--bogus"], "unexpected argument"),
        (&["tables", "-p", p, "--format", "xml"], "invalid value"),
    ];
    for (args, said) in cases {
        let out = cdcflow(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{args:?}: {}", stderr(&out));
    }
    // Nothing ran.
    assert!(!dir.path().join("_storage/tables").exists());
}

#[test]
fn a_conf_key_nothing_uses_is_a_warning() {
    let p = repo().join("pipelines/orders");
    let out = cdcflow(&[
        "validate",
        "-p",
        p.to_str().expect("utf-8"),
        "--conf",
        "landing.pth=x",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--conf `landing.pth` is not used"), "{err}");
    assert!(err.contains("cdcflow::unused_conf"), "{err}");
}

#[test]
fn diagnostics_name_files_from_the_current_folder() {
    let case = "tests/validate/unknown_dataset";
    let text = cdcflow_in(&repo(), &["validate", "-p", case]);
    assert!(
        stderr(&text).contains("tests/validate/unknown_dataset/flows.sql:4:48: error"),
        "{}",
        stderr(&text)
    );
    let json = cdcflow_in(&repo(), &["validate", "-p", case, "--format", "json"]);
    assert_eq!(
        json_lines(&json)[0]["file"],
        "tests/validate/unknown_dataset/flows.sql"
    );
    // An absolute folder below the current one is shown relative to it too.
    let absolute = repo().join(case);
    let out = cdcflow_in(
        &repo(),
        &[
            "validate",
            "-p",
            absolute.to_str().expect("utf-8"),
            "--json",
        ],
    );
    assert_eq!(
        json_lines(&out)[0]["file"],
        "tests/validate/unknown_dataset/flows.sql"
    );
}

#[test]
fn tables_show_the_scd_type_and_the_quarantine_table() {
    let dir = orders();
    let p = dir.path().to_str().expect("utf-8");
    assert!(cdcflow(&["run", "-p", p]).status.success());
    let out = cdcflow(&["tables", "-p", p]);
    let text = stdout(&out);
    let row = |name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name}: {text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        text.lines()
            .next()
            .map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["name", "kind", "scd", "rows", "version"]),
        "{text}"
    );
    assert_eq!(
        row("silver_orders_history"),
        ["silver_orders_history", "streaming", "table", "2", "6", "0"]
    );
    assert_eq!(
        row("bronze_order_changes__quarantine"),
        [
            "bronze_order_changes__quarantine",
            "quarantine",
            "-",
            "-",
            "-"
        ]
    );
    let json = json_lines(&cdcflow(&["tables", "-p", p, "--json"]));
    let bronze = json
        .iter()
        .find(|t| t["name"] == "bronze_order_changes")
        .expect("bronze");
    assert_eq!(bronze["quarantine"], "bronze_order_changes__quarantine");
    assert_eq!(bronze["scd_type"], Value::Null);
    let silver = json
        .iter()
        .find(|t| t["name"] == "silver_orders_history")
        .expect("silver");
    assert_eq!(silver["scd_type"], 2);
}
