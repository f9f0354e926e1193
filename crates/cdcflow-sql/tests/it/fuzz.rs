//! The parser never panics, whatever tokens it is given: random streams drawn from the
//! dialect's own vocabulary (so they reach deep into the statement grammar), and
//! random mutations of valid statements.

use cdcflow_sql::parse_statements;
use proptest::prelude::*;

const VOCABULARY: &[&str] = &[
    "CREATE",
    "OR",
    "REFRESH",
    "STREAMING",
    "TABLE",
    "MATERIALIZED",
    "VIEW",
    "FLOW",
    "AS",
    "AUTO",
    "CDC",
    "ONCE",
    "INTO",
    "FROM",
    "STREAM",
    "KEYS",
    "IGNORE",
    "NULL",
    "UPDATES",
    "ON",
    "EXCEPT",
    "APPLY",
    "DELETE",
    "TRUNCATE",
    "WHEN",
    "SEQUENCE",
    "BY",
    "COLUMNS",
    "STORED",
    "SCD",
    "TYPE",
    "TRACK",
    "HISTORY",
    "INSERT",
    "NAME",
    "SELECT",
    "WHERE",
    "CONSTRAINT",
    "EXPECT",
    "VIOLATION",
    "DROP",
    "ROW",
    "FAIL",
    "UPDATE",
    "TBLPROPERTIES",
    "COMMENT",
    "PARTITIONED",
    "CLUSTER",
    "CHANGES",
    "LIVE",
    "TEMPORARY",
    "PRIVATE",
    "STRUCT",
    "read_files",
    "(",
    ")",
    ",",
    ";",
    "*",
    ".",
    "=",
    "=>",
    "'x'",
    "\"y\"",
    "`z`",
    "1",
    "2",
    "a",
    "b",
    "id",
    "--c\n",
    "/*",
    "*/",
    "${k}",
    "\n",
    "BIGINT",
    "STRING",
    "NOT",
];

const VALID: &str = "CREATE OR REFRESH STREAMING TABLE s (id BIGINT NOT NULL, CONSTRAINT c EXPECT (id > 0) ON VIOLATION DROP ROW) COMMENT 'x' TBLPROPERTIES (a.b = true);\n\
CREATE FLOW f AS AUTO CDC INTO s FROM STREAM(b) KEYS (id) IGNORE NULL UPDATES ON * EXCEPT (x) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY STRUCT(ts, pos) COLUMNS * EXCEPT (op) STORED AS SCD TYPE 2 TRACK HISTORY ON (name);\n\
CREATE MATERIALIZED VIEW m AS SELECT * FROM STREAM read_files('p', format => 'json');";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_token_streams_never_panic(words in prop::collection::vec(prop::sample::select(VOCABULARY), 0..60)) {
        let _ = parse_statements(&words.join(" "));
    }

    #[test]
    fn mutated_statements_never_panic(cut in 0..VALID.len(), len in 0usize..40, insert in prop::sample::select(VOCABULARY)) {
        let mut text = VALID.to_string();
        let mut start = cut.min(text.len());
        while !text.is_char_boundary(start) { start -= 1; }
        let mut end = (start + len).min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        text.replace_range(start..end, insert);
        let _ = parse_statements(&text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = parse_statements(&text);
    }
}
