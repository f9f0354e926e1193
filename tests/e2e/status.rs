//! `cdcflow status` shows the flow's last run as it was: a failed batch's own rows (and
//! none written), a last error only until a later run of the flow succeeds, and the
//! late events of an AUTO CDC batch as applied or dropped, as `run --json` does.

use std::path::Path;

use crate::{cdcflow, stderr, stdout};

const FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE raw
AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE target;
CREATE FLOW apply_raw AS AUTO CDC INTO target FROM STREAM(raw) KEYS (id) SEQUENCE BY seq
STORED AS SCD TYPE 2;
";

/// Lands `lines` as `landing/<name>`, settled (written an hour ago).
fn land(dir: &Path, name: &str, lines: &str) {
    let path = dir.join("landing").join(name);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, lines).expect("write");
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| {
            f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        })
        .expect("set mtime");
}

fn pipeline() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pipeline.yaml"), "name: status_case\n").expect("yaml");
    std::fs::write(dir.path().join("flows.sql"), FLOWS).expect("sql");
    dir
}

fn run(dir: &Path, more: &[&str]) -> std::process::Output {
    let mut args = vec!["run", "-p", dir.to_str().expect("utf-8")];
    args.extend(more);
    cdcflow(&args)
}

/// `status --json`'s object for the flow `apply_raw`.
fn status_of_apply(dir: &Path) -> serde_json::Value {
    let out = cdcflow(&["status", "-p", dir.to_str().expect("utf-8"), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    apply_line(&stdout(&out))
}

/// The JSON line of the flow `apply_raw` in `text` (one object per flow).
fn apply_line(text: &str) -> serde_json::Value {
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json line"))
        .find(|f| f["flow"] == "apply_raw")
        .expect("apply_raw in the output")
}

#[test]
fn a_failed_batch_shows_its_own_rows_and_its_error_until_a_run_succeeds() {
    let dir = pipeline();
    let d = dir.path();
    land(d, "1.json", "{\"id\": 1, \"v\": \"a\", \"seq\": 1}\n");
    assert!(run(d, &[]).status.success());
    let s = status_of_apply(d);
    assert_eq!(
        (s["rows_read"].clone(), s["rows_written"].clone()),
        (1.into(), 1.into())
    );

    // Three rows, two with a null key: the batch fails and writes nothing.
    land(
        d,
        "2.json",
        "{\"id\": null, \"v\": \"b\", \"seq\": 2}\n{\"id\": null, \"v\": \"c\", \"seq\": 3}\n{\"id\": 3, \"v\": \"e\", \"seq\": 4}\n",
    );
    assert_eq!(run(d, &[]).status.code(), Some(1));
    let s = status_of_apply(d);
    assert_eq!(s["last_event"], "flow_failed");
    assert_eq!(
        (s["rows_read"].clone(), s["rows_written"].clone()),
        (3.into(), 0.into()),
        "{s}"
    );
    assert!(
        s["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("with a null key (id)")),
        "{s}"
    );
    let text = cdcflow(&["status", "-p", d.to_str().expect("utf-8")]);
    assert!(
        stdout(&text).contains("last error: 2 row(s) of `raw` with a null key"),
        "{}",
        stdout(&text)
    );

    // The bad file taken back and the tables rebuilt: the flow succeeds, the error is over.
    std::fs::remove_file(d.join("landing/2.json")).expect("remove");
    let out = run(d, &["--full-refresh", "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = status_of_apply(d);
    assert_eq!(s["last_event"], "flow_completed");
    assert_eq!(s["last_error"], serde_json::Value::Null, "{s}");
    let text = cdcflow(&["status", "-p", d.to_str().expect("utf-8")]);
    assert!(!stdout(&text).contains("last error"), "{}", stdout(&text));
    // A later run with nothing new keeps it so.
    assert!(run(d, &[]).status.success());
    assert_eq!(status_of_apply(d)["last_error"], serde_json::Value::Null);
}

#[test]
fn late_events_are_reported_applied_or_dropped() {
    let dir = pipeline();
    let d = dir.path();
    land(d, "1.json", "{\"id\": 1, \"v\": \"a\", \"seq\": 5}\n");
    assert!(run(d, &[]).status.success());
    // seq 3 is older than the stored seq 5: SCD2 inserts it into history.
    land(d, "2.json", "{\"id\": 1, \"v\": \"b\", \"seq\": 3}\n");
    let out = run(d, &["--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = apply_line(&stdout(&out));
    let cdc = &report["cdc"];
    assert_eq!(
        (
            cdc["late"].clone(),
            cdc["late_applied"].clone(),
            cdc["late_dropped"].clone()
        ),
        (1.into(), 1.into(), 0.into()),
        "{report}"
    );
    let s = status_of_apply(d);
    assert_eq!(
        (s["late_applied"].clone(), s["late_dropped"].clone()),
        (1.into(), 0.into())
    );
    let text = stdout(&cdcflow(&["status", "-p", d.to_str().expect("utf-8")]));
    assert!(text.contains("last batch: late 1 (applied)"), "{text}");
}

#[test]
fn a_failed_flow_reports_its_error_code_in_the_run_json_and_the_event_log() {
    let dir = pipeline();
    let d = dir.path();
    land(d, "1.json", "{\"id\": null, \"v\": \"a\", \"seq\": 1}\n");
    let out = run(d, &["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let failed = apply_line(&stdout(&out));
    assert_eq!(failed["code"], "cdcflow::run::null_key", "{failed}");
    let s = status_of_apply(d);
    assert!(
        s["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("nothing was applied [cdcflow::run::null_key]")),
        "{s}"
    );
}
