//! The schema of a Delta table, read from its log for `validate`: the newest JSON commit
//! that holds the table's `metaData`. The plan stage has no Delta reader (the runtime
//! has); the schema string is Delta's JSON schema, turned into the DDL of
//! `schema =>` strings so that types map to Arrow exactly as declared columns do.

use std::path::Path;

use datafusion::arrow::datatypes::Schema;
use serde_json::Value;

use crate::types::ddl_schema;

/// Whether the folder `dir` holds a Delta table: its log holds a commit or a
/// checkpoint. A log folder holding neither is the trace of a first commit that never
/// finished (a process killed after its staging file was written, before the file was
/// put in place under its version's name): there is no table yet, and the next write
/// creates it.
pub fn has_commits(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir.join("_delta_log")) else {
        return false;
    };
    entries.filter_map(|e| e.ok()).any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let version = name.split('.').next().unwrap_or_default();
        let numbered = !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit());
        (numbered && (name.ends_with(".json") || name.ends_with(".parquet")))
            || name == "_last_checkpoint"
    })
}

/// The schema of the Delta table in `dir`, or why it cannot be known.
pub fn read(dir: &Path) -> Result<Schema, String> {
    let log = dir.join("_delta_log");
    let entries = std::fs::read_dir(&log)
        .map_err(|_| format!("no Delta table at {} (it has no _delta_log)", dir.display()))?;
    let mut commits: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    commits.sort();
    for commit in commits.iter().rev() {
        let text = std::fs::read_to_string(commit)
            .map_err(|e| format!("cannot read {}: {e}", commit.display()))?;
        for line in text.lines() {
            let Ok(action) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if let Some(schema) = action["metaData"]["schemaString"].as_str() {
                return from_schema_string(schema);
            }
        }
    }
    Err(format!(
        "the log of {} holds its schema only in a checkpoint; declare `schema:` for it",
        dir.display()
    ))
}

/// Delta's JSON schema string as an Arrow schema.
pub fn from_schema_string(schema: &str) -> Result<Schema, String> {
    let value: Value =
        serde_json::from_str(schema).map_err(|e| format!("unreadable Delta schema: {e}"))?;
    let fields = value["fields"]
        .as_array()
        .ok_or("a Delta schema without fields")?;
    let mut columns = Vec::new();
    for field in fields {
        let not_null = field["nullable"] == Value::Bool(false);
        columns.push(format!(
            "{} {}{}",
            quoted(field["name"].as_str().unwrap_or_default()),
            ddl_type(&field["type"])?,
            if not_null { " NOT NULL" } else { "" }
        ));
    }
    ddl_schema(&columns.join(", ")).map_err(|e| e.to_string())
}

fn quoted(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn ddl_type(t: &Value) -> Result<String, String> {
    if let Some(name) = t.as_str() {
        let ddl = match name {
            "string" => "STRING",
            "long" => "BIGINT",
            "integer" => "INT",
            "short" => "SMALLINT",
            "byte" => "TINYINT",
            "float" => "FLOAT",
            "double" => "DOUBLE",
            "boolean" => "BOOLEAN",
            "binary" => "BINARY",
            "date" => "DATE",
            "timestamp" => "TIMESTAMP",
            "timestamp_ntz" => "TIMESTAMP_NTZ",
            decimal if decimal.starts_with("decimal") => return Ok(decimal.to_uppercase()),
            other => return Err(format!("the Delta type `{other}` is not supported")),
        };
        return Ok(ddl.to_string());
    }
    match t["type"].as_str() {
        Some("struct") => {
            let fields = t["fields"].as_array().ok_or("a struct without fields")?;
            let inner = fields
                .iter()
                .map(|f| {
                    Ok(format!(
                        "{}: {}",
                        quoted(f["name"].as_str().unwrap_or_default()),
                        ddl_type(&f["type"])?
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(format!("STRUCT<{}>", inner.join(", ")))
        }
        Some("array") => Ok(format!("ARRAY<{}>", ddl_type(&t["elementType"])?)),
        Some("map") => Ok(format!(
            "MAP<{}, {}>",
            ddl_type(&t["keyType"])?,
            ddl_type(&t["valueType"])?
        )),
        _ => Err(format!("unreadable Delta type {t}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_types_become_the_arrow_types_declared_columns_have() {
        let schema = r#"{"type":"struct","fields":[
            {"name":"id","type":"long","nullable":false,"metadata":{}},
            {"name":"amount","type":"decimal(10,2)","nullable":true,"metadata":{}},
            {"name":"tags","type":{"type":"array","elementType":"string","containsNull":true},"nullable":true,"metadata":{}},
            {"name":"addr","type":{"type":"struct","fields":[{"name":"city","type":"string","nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}},
            {"name":"attrs","type":{"type":"map","keyType":"string","valueType":"integer","valueContainsNull":true},"nullable":true,"metadata":{}},
            {"name":"at","type":"timestamp","nullable":true,"metadata":{}}]}"#;
        let got = from_schema_string(schema).expect("schema");
        let want = ddl_schema(
            "id BIGINT NOT NULL, amount DECIMAL(10,2), tags ARRAY<STRING>, addr STRUCT<city: STRING>, attrs MAP<STRING, INT>, at TIMESTAMP",
        )
        .expect("ddl");
        assert_eq!(got, want);
    }
}
