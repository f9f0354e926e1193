//! An AUTO CDC flow whose SEQUENCE BY changes after its target was built: `validate` warns at
//! the flow (file:line:col), the run refuses it naming the change and the fix, nothing is
//! applied, and `--full-refresh` rebuilds the target with the new keys.

use std::fs;

use crate::{cdcflow, example_copy, stderr, stdout};

#[test]
fn a_changed_sequence_is_warned_by_validate_refused_by_the_run_and_rebuilt_by_a_full_refresh() {
    let dir = example_copy("orders");
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}", stderr(&out));

    let silver = dir.path().join("sql/02_silver.sql");
    let text = fs::read_to_string(&silver).expect("silver");
    let changed = text.replace(
        "SEQUENCE BY (commit_ts, log_position)",
        "SEQUENCE BY (log_position, commit_ts)",
    );
    assert_ne!(text, changed);
    fs::write(&silver, changed).expect("edit");

    let out = cdcflow(&["validate", "-p", p]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "a warning only: {said}");
    assert!(said.contains("cdcflow::stored_shape_changed"), "{said}");
    assert!(
        said.contains("`silver_orders_history` was built with other SEQUENCE BY (commit_ts ")
            && said.contains(") -> (log_position Int64, commit_ts ")
            && said.contains("; its state cannot follow the change"),
        "{said}"
    );
    assert!(said.contains("02_silver.sql:6:13"), "{said}");

    let out = cdcflow(&["run", "-p", p]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("-> (log_position Int64, commit_ts ")
            && err.contains("its state cannot follow the change; nothing was applied"),
        "{err}"
    );
    assert!(
        err.contains("cdcflow run --full-refresh silver_orders_history"),
        "{err}"
    );

    let out = cdcflow(&["run", "-p", p, "--full-refresh", "silver_orders_history"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cdcflow(&["validate", "-p", p]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!said.contains("stored_shape_changed"), "{said}");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}", stderr(&out));
}
