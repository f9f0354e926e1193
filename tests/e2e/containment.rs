//! A pipeline stays inside its storage folder: a flow named `../../../victim`, a table
//! named by an absolute path and a table name substituted from `--conf` are reported by
//! `validate`, and neither `run` nor `run --full-refresh` creates, changes or deletes
//! anything beside the pipeline folder.

use crate::escape_attempt::{CONF, EscapeAttempt};
use crate::{cdcflow, cdcflow_in, stderr, stdout};

#[test]
fn names_that_climb_out_of_the_storage_folder_are_reported_and_touch_nothing_outside() {
    let attempt = EscapeAttempt::new();
    let before = attempt.tree_outside();
    let p = attempt.pipe.to_str().expect("utf-8");
    let conf_value = format!("{}={}", CONF.0, CONF.1);
    let conf = ["--conf", conf_value.as_str()];

    let run = cdcflow(&[&["run", "-p", p][..], &conf].concat());
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert!(stderr(&run).contains("invalid_name"), "{}", stderr(&run));
    assert_eq!(attempt.tree_outside(), before, "run wrote outside");
    attempt.land(2);
    let refresh = cdcflow(&[&["run", "-p", p, "--full-refresh", "--force"][..], &conf].concat());
    assert_eq!(refresh.status.code(), Some(1), "{}", stderr(&refresh));
    assert_eq!(
        attempt.tree_outside(),
        before,
        "a full refresh changed what is outside"
    );
    attempt.assert_victim_intact();

    // From the pipeline folder, so that files are named relative to it.
    let out = cdcflow_in(
        &attempt.pipe,
        &[&["validate", "--format", "json"][..], &conf].concat(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let reported: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|v| v["code"] == "cdcflow::invalid_name")
        .map(|v| {
            format!(
                "{}:{}:{}",
                v["file"].as_str().unwrap_or("?"),
                v["line"],
                v["column"]
            )
        })
        .collect();
    assert_eq!(
        reported,
        ["flows.sql:2:35", "flows.sql:3:13", "flows.sql:4:35"],
        "{text}"
    );
    assert!(
        text.contains("flow name `../../../victim` contains `/`"),
        "{text}"
    );
    assert!(
        text.contains(&format!("dataset name `{}` contains `/`", attempt.abs)),
        "{text}"
    );
    assert!(
        text.contains("dataset name `../../../x` contains `/`"),
        "{text}"
    );
}
