//! `cdcflow validate` against a server that refuses the login: it says so, naming the
//! connection and the server's reason, as a warning at the source's call (the files
//! are sound, the check on the server was not made), and `--format json` carries it.

use std::path::Path;

use super::Db;
use super::read_query::Maria;
use crate::{cdcflow, stderr, stdout};

fn validate(dir: &Path, json: bool) -> (bool, String) {
    let p = dir.to_str().expect("utf-8");
    let out = match json {
        true => cdcflow(&["validate", "-p", p, "--format", "json"]),
        false => cdcflow(&["validate", "-p", p]),
    };
    (
        out.status.success(),
        format!("{}{}", stdout(&out), stderr(&out)),
    )
}

#[test]
fn a_postgres_login_refused_is_a_warning_naming_the_connection_and_the_reason() {
    let db = Db::create("validate_login");
    db.exec("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text NOT NULL)");
    let dir = tempfile::tempdir().expect("tempdir");
    super::pipeline(dir.path(), &db, false);
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(
        &yaml,
        text.replace(
            &format!("user: {}", db.admin.user),
            "user: cdcflow_no_such_role",
        ),
    )
    .expect("yaml");
    let (ok, said) = validate(dir.path(), false);
    assert!(ok, "the files are sound: {said}");
    assert!(
        said.contains("flows.sql:2:")
            && said.contains("PostgreSQL connection `src` could not be used")
            && said.contains("cdcflow_no_such_role")
            && said.contains("was not checked on the server"),
        "{said}"
    );
    let (ok, json) = validate(dir.path(), true);
    assert!(ok, "{json}");
    assert!(
        json.contains("\"cdcflow::server_unchecked\"") && json.contains("\"warning\""),
        "{json}"
    );
}

#[test]
fn a_mysql_login_refused_is_a_warning_naming_the_connection_and_the_reason() {
    let db = Maria::create("validate_login");
    db.exec(
        Some(&db.name),
        "CREATE TABLE customers (id INT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL) ENGINE=InnoDB",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("pipeline.yaml"),
        format!(
            "name: login\nconnections:\n  shop:\n    kind: mysql\n    host: {}\n    port: {}\n    database: {}\n    user: cdcflow_no_such_user\n",
            db.host, db.port, db.name
        ),
    )
    .expect("pipeline.yaml");
    std::fs::write(
        dir.path().join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE customers_changes AS
SELECT * FROM STREAM read_mysql(connection => 'shop', table => 'customers', schema => 'id INT NOT NULL, name STRING, city STRING');
",
    )
    .expect("flows.sql");
    let (ok, said) = validate(dir.path(), false);
    assert!(ok, "the files are sound: {said}");
    assert!(
        said.contains("flows.sql:2:")
            && said.contains("MySQL connection `shop` could not be used")
            && said.contains("cdcflow_no_such_user")
            && said.contains("was not checked on the server"),
        "{said}"
    );
}
