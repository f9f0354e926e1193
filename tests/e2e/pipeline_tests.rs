//! `cdcflow test` (docs/testing.md): the example pipelines' own cases pass; a case that
//! differs fails with a diff naming the run, the table, the file and the cells; JUnit
//! and JSON reports; `--update` writes expected files; a case written wrong is named;
//! server sources read a case's rows with no server; nothing touches `_storage`.

use std::fs;
use std::path::Path;

use crate::{cdcflow, example_copy, stderr, stdout};

fn test_cmd(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["test", "-p", dir.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    cdcflow(&args)
}

#[test]
fn every_example_pipeline_has_test_cases_that_pass_without_touching_its_storage() {
    let mut tested = Vec::new();
    for entry in fs::read_dir(crate::repo().join("pipelines")).expect("pipelines") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let copy = example_copy(&name);
        assert!(
            copy.path().join("tests").is_dir(),
            "{name} has no test cases"
        );
        let out = test_cmd(copy.path(), &[]);
        assert!(
            out.status.success(),
            "{name}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert!(
            stdout(&out).contains("test result: ok."),
            "{name}: {}",
            stdout(&out)
        );
        assert!(
            !copy.path().join("_storage").exists(),
            "{name}: a test wrote _storage"
        );
        tested.push(name);
    }
    assert!(tested.len() >= 7, "{tested:?}");
}

#[test]
fn a_table_that_differs_fails_with_a_diff_marking_the_changed_cells() {
    let dir = example_copy("orders");
    let case = dir.path().join("tests/an_order_through_its_life");
    let expect = case.join("expect/silver_orders_history.csv");
    let text = fs::read_to_string(&expect).expect("expected file");
    assert!(text.contains("shipped"), "{text}");
    fs::write(&expect, text.replace("shipped", "delivered")).expect("write");
    let out = test_cmd(dir.path(), &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("FAILED an_order_through_its_life"), "{text}");
    assert!(
        text.contains("run 1, table `silver_orders_history` (tests/an_order_through_its_life/expect/silver_orders_history.csv): 1 changed"),
        "{text}"
    );
    let minus = text
        .lines()
        .find(|l| l.trim_start().starts_with("- ") && l.contains("delivered"));
    let plus = text
        .lines()
        .find(|l| l.trim_start().starts_with("+ ") && l.contains("shipped"));
    assert!(minus.is_some() && plus.is_some(), "{text}");
    // The marks stand under the status cell only.
    let header = text
        .lines()
        .find(|l| l.contains("order_id |"))
        .expect("header");
    let marks = text
        .lines()
        .find(|l| l.trim_start().starts_with('^'))
        .expect("marks");
    let at = marks.find('^').expect("a mark");
    assert_eq!(&header[at..at + "status".len()], "status", "{text}");
    assert!(
        text.contains("test result: FAILED. 4 passed, 1 failed"),
        "{text}"
    );
    assert!(!dir.path().join("_storage").exists());

    // JUnit: a testcase per case, the failed one with its diff.
    let out = test_cmd(dir.path(), &["--format", "junit"]);
    assert_eq!(out.status.code(), Some(1));
    let xml = stdout(&out);
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), 5, "{xml}");
    assert!(xml.contains("failures=\"1\""), "{xml}");
    assert!(
        xml.contains("<failure message=\"table `silver_orders_history` differs"),
        "{xml}"
    );
    assert!(xml.contains("delivered"), "{xml}");

    // JSON: one object per case; the changed row names the column that differs.
    let out = test_cmd(dir.path(), &["--format", "json", "--filter", "an_order_*"]);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", stdout(&out));
    assert_eq!(lines[0]["status"], "failed");
    let table = lines[0]["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["table"] == "silver_orders_history")
        .expect("the table");
    assert_eq!(
        table["changed"][0]["differing"],
        serde_json::json!(["status"])
    );
}

#[test]
fn update_writes_the_expected_rows_of_a_new_case_and_then_it_passes() {
    let dir = example_copy("orders");
    let case = dir.path().join("tests/new_case/input");
    fs::create_dir_all(&case).expect("mkdir");
    fs::write(
        case.join("bronze_order_changes.csv"),
        "order_id,customer_id,status,amount,operation,commit_ts,log_position\n9,1,placed,1.50,INSERT,2024-06-01 10:00:00,1\n9,1,paid,1.50,UPDATE,2024-06-01 10:01:00,2\n",
    )
    .expect("write");
    let out = test_cmd(dir.path(), &["--filter", "new_case", "--update"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let expect = dir.path().join("tests/new_case/expect");
    let gold = fs::read_to_string(expect.join("gold_orders_by_status.csv")).expect("gold");
    assert_eq!(gold, "status,orders,total_amount\npaid,1,1.50\n");
    let silver = fs::read_to_string(expect.join("silver_orders_history.csv")).expect("silver");
    assert_eq!(silver.lines().count(), 3, "{silver}");
    assert!(expect.join("bronze_order_changes.csv").is_file());
    let out = test_cmd(dir.path(), &["--filter", "new_case"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("ok     new_case"), "{}", stdout(&out));
}

#[test]
fn a_case_written_wrong_is_named_with_its_file_and_exits_2() {
    let dir = example_copy("orders");
    let case = dir.path().join("tests/wrong");
    fs::create_dir_all(case.join("input")).expect("mkdir");
    fs::write(case.join("input/bronze_orders.json"), "{\"order_id\": 1}\n").expect("write");
    fs::create_dir_all(case.join("expect")).expect("mkdir");
    fs::write(case.join("expect/silver_orders_history.empty"), "").expect("write");
    let out = test_cmd(dir.path(), &["--filter", "wrong"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("ERROR  wrong"), "{text}");
    assert!(
        text.contains(
            "tests/wrong/input/bronze_orders.json: the pipeline has no table `bronze_orders`"
        ),
        "{text}"
    );
    assert!(
        text.contains("tables fed by a source: bronze_order_changes"),
        "{text}"
    );

    fs::remove_file(case.join("input/bronze_orders.json")).expect("remove");
    fs::write(case.join("input/bronze_order_changes.json"), "").expect("write");
    fs::remove_file(case.join("expect/silver_orders_history.empty")).expect("remove");
    fs::write(
        case.join("expect/silver_orders_history.csv"),
        "order_id,colour\n1,red\n",
    )
    .expect("write");
    let out = test_cmd(dir.path(), &["--filter", "wrong"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("`silver_orders_history` has no column `colour`"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn no_cases_is_a_usage_error_naming_the_folder() {
    let dir = example_copy("orders");
    let out = test_cmd(dir.path(), &["--filter", "nothing_*"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no test case matching nothing_*"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_case_that_would_check_nothing_or_leave_files_unread_is_refused() {
    let dir = example_copy("orders");
    let tests = dir.path().join("tests");
    let write = |path: &str, text: &str| {
        let path = tests.join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    };
    let row = "{\"order_id\": 1, \"customer_id\": 1, \"status\": \"placed\", \"amount\": 1.00, \"operation\": \"INSERT\", \"commit_ts\": \"2024-06-01T10:00:00Z\", \"log_position\": 1}\n";
    // A misspelt folder: nothing would be checked.
    write("misspelt/input/bronze_order_changes.json", row);
    write(
        "misspelt/expected/silver_orders_history.csv",
        "order_id\n1\n",
    );
    // runs/ beside input/: input/ would be left unread.
    write("both/input/bronze_order_changes.json", row);
    write("both/runs/1/input/bronze_order_changes.json", row);
    write(
        "both/runs/1/expect/silver_orders_history.csv",
        "order_id\n1\n",
    );
    // Two files of rows for one table in one run.
    write("twice/input/bronze_order_changes.json", row);
    write("twice/input/bronze_order_changes.yaml", "- {order_id: 2}\n");
    write("twice/expect/silver_orders_history.csv", "order_id\n1\n");
    // No expected file at all.
    write("unchecked/input/bronze_order_changes.json", row);
    let out = test_cmd(
        dir.path(),
        &[
            "--filter",
            "misspelt",
            "--filter",
            "both",
            "--filter",
            "twice",
            "--filter",
            "unchecked",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    for want in [
        "tests/misspelt/expected: a case has no folder `expected`",
        "tests/both: the case has both runs/ and input/ or expect/",
        "is given rows twice in one run",
        "tests/unchecked: the case checks nothing: no run has an expected file",
        "0 passed, 0 failed, 4 not runnable",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    // The other cases still run: one case written wrong stops only itself.
    let out = test_cmd(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains("5 passed, 0 failed, 4 not runnable"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn an_empty_string_and_null_are_told_apart_and_written_back_alike() {
    let dir = example_copy("orders");
    let case = dir.path().join("tests/empty_status");
    fs::create_dir_all(case.join("input")).expect("mkdir");
    fs::write(
        case.join("input/bronze_order_changes.json"),
        "{\"order_id\": 1, \"customer_id\": 1, \"status\": \"\", \"amount\": 1.00, \"operation\": \"INSERT\", \"commit_ts\": \"2024-06-01T10:00:00Z\", \"log_position\": 1}\n{\"order_id\": 2, \"customer_id\": 1, \"status\": null, \"amount\": 1.00, \"operation\": \"INSERT\", \"commit_ts\": \"2024-06-01T10:00:00Z\", \"log_position\": 2}\n",
    )
    .expect("write");
    let out = test_cmd(dir.path(), &["--filter", "empty_status", "--update"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let gold = fs::read_to_string(case.join("expect/gold_orders_by_status.csv")).expect("gold");
    assert_eq!(gold, "status,orders,total_amount\n,1,1.00\n\"\",1,1.00\n");
    let out = test_cmd(dir.path(), &["--filter", "empty_status"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // An expected NULL where the table has the empty string fails.
    fs::write(
        case.join("expect/gold_orders_by_status.csv"),
        "status,orders\n,1\n,1\n",
    )
    .expect("write");
    let out = test_cmd(dir.path(), &["--filter", "empty_status"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
}

#[test]
fn a_malformed_record_of_a_case_is_quarantined_and_expected_like_a_table() {
    let dir = example_copy("orders");
    let case = dir.path().join("tests/bad_line");
    fs::create_dir_all(case.join("input")).expect("mkdir");
    fs::write(
        case.join("input/bronze_order_changes.json"),
        "{\"order_id\": 1, \"customer_id\": 7, \"status\": \"placed\", \"amount\": 20.00, \"operation\": \"INSERT\", \"commit_ts\": \"2024-06-01T10:00:00Z\", \"log_position\": 1}\n{\"order_id\": 2, \"customer_id\": oops}\n",
    )
    .expect("write");
    let out = test_cmd(dir.path(), &["--filter", "bad_line", "--update"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let quarantine = case.join("expect/bronze_order_changes__quarantine.csv");
    let text = fs::read_to_string(&quarantine).expect("the quarantine table is expected too");
    // The file as the call names it, not the scratch folder it was read from.
    assert!(text.contains("landing/orders/run-0001.json"), "{text}");
    let out = test_cmd(dir.path(), &["--filter", "bad_line"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // Expecting no quarantined record fails, showing the record.
    fs::write(&quarantine, "flow,batch,file\n").expect("write");
    let out = test_cmd(dir.path(), &["--filter", "bad_line"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("+ bronze_order_changes | 0     | landing/orders/run-0001.json"),
        "{}",
        stdout(&out)
    );
}
