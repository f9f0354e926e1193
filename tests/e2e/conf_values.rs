//! A `--conf` value substituted into a query (a credential, say) is neither stored nor
//! logged, even at debug level: a materialized view's checkpoint keeps its query's hash,
//! and DataFusion's plan logs are left out unless asked for by name.

use std::process::Command;

use crate::stderr;

const SECRET: &str = "s3cr3t-token-4711";

#[test]
fn a_conf_value_is_in_no_stored_file_and_no_debug_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pipeline.yaml"), "name: conf\n").expect("write");
    std::fs::write(
        dir.path().join("flows.sql"),
        "CREATE MATERIALIZED VIEW gate AS SELECT 1 AS ok WHERE '${api.token}' <> '';\n",
    )
    .expect("write");
    let p = dir.path().to_str().expect("utf-8");
    let out = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", p, "--conf", &format!("api.token={SECRET}")])
        .env("RUST_LOG", "debug")
        .output()
        .expect("run");
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.lines().count() > 10, "debug logs were written: {log}");
    assert!(!log.contains(SECRET), "{log}");
    let mut stack = vec![dir.path().join("_storage")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(SECRET),
                    "{} holds the value",
                    path.display()
                );
            }
        }
    }
}
