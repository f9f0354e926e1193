//! What a diagnostic underlines and suggests: the identifier or call an error inside a
//! SELECT is about (not the whole query), and the nearest known name for an unknown one.

use serde_json::Value;

use crate::{cdcflow_in, repo, stdout};

/// (line, column, end column, help) of each diagnostic of `tests/validate/<case>`.
fn diagnostics(case: &str) -> Vec<(u64, u64, u64, String)> {
    let dir = repo().join("tests/validate").join(case);
    let out = cdcflow_in(&dir, &["validate", "--format", "json"]);
    stdout(&out)
        .lines()
        .map(|l| {
            let d: Value = serde_json::from_str(l).expect("json");
            let n = |k: &str| d[k].as_u64().unwrap_or(0);
            let help = d["help"].as_str().unwrap_or("").to_string();
            (n("line"), n("column"), n("end_column"), help)
        })
        .collect()
}

#[test]
fn errors_in_a_select_underline_the_identifier_and_suggest_the_nearest_name() {
    let found = diagnostics("select_errors");
    let expect = |line: u64, word: &str, help: &str| {
        let sql = std::fs::read_to_string(repo().join("tests/validate/select_errors/flows.sql"))
            .expect("flows.sql");
        let text = sql.lines().nth(line as usize - 1).expect("line");
        let column = text.rfind(word).expect("word on the line") as u64 + 1;
        let end = column + word.chars().count() as u64;
        let d = found
            .iter()
            .find(|d| d.0 == line)
            .unwrap_or_else(|| panic!("no diagnostic on line {line}: {found:?}"));
        assert_eq!(
            (d.1, d.2),
            (column, end),
            "line {line} should underline `{word}`: {d:?}"
        );
        assert!(
            d.3.starts_with(help),
            "line {line}: help {:?}, want {help:?}",
            d.3
        );
    };
    expect(6, "nmae", "did you mean `name`?");
    expect(7, "b.nmae", "did you mean `name`?");
    expect(8, "citty", "did you mean `city`?");
    expect(9, "cty", "did you mean `city`?");
    expect(10, "nme", "did you mean `name`?");
    expect(11, "b.idd", "did you mean `id`?");
    expect(12, "idd", "did you mean `id`?");
    expect(13, "sum", "Candidate functions: sum(Decimal)");
    expect(14, "uper", "Possible function 'upper'");
    expect(15, "cdc_data.user", "did you mean `users`?");
}

#[test]
fn a_read_files_source_is_never_named_by_its_internal_table() {
    let dir = repo().join("tests/validate/select_errors");
    let out = stdout(&cdcflow_in(&dir, &["validate", "--format", "json"]));
    let d: Value = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .find(|d: &Value| d["line"] == 16)
        .unwrap_or_else(|| panic!("no diagnostic on line 16: {out}"));
    assert_eq!(
        d["message"],
        "'city' must appear in GROUP BY clause because it's not an aggregate expression"
    );
    assert!(
        d["help"]
            .as_str()
            .is_some_and(|h| h.starts_with("Either add 'city'")),
        "{d}"
    );
    assert!(!out.contains("__files"), "{out}");
}

#[test]
fn an_unknown_column_of_an_auto_cdc_clause_gets_the_nearest_column() {
    let found = diagnostics("unknown_columns");
    let keys = found
        .iter()
        .find(|d| d.0 == 5)
        .expect("KEYS (idd) on line 5");
    assert!(
        keys.3.starts_with("did you mean `id`? the source has:"),
        "{keys:?}"
    );
}

#[test]
fn a_secret_written_where_its_variable_s_name_belongs_is_never_shown() {
    let dir = repo().join("tests/validate/config_password_env");
    for format in ["text", "json"] {
        let out = cdcflow_in(&dir, &["validate", "--format", format]);
        let said = format!("{}{}", stdout(&out), crate::stderr(&out));
        assert!(!out.status.success(), "{said}");
        assert!(said.contains("password_env"), "{said}");
        assert!(!said.contains("s3cret"), "{format}: {said}");
    }
}
