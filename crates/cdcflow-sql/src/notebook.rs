//! Databricks notebook exports (`-- Databricks notebook source`): cells separated by
//! `-- COMMAND ----------`, and `-- MAGIC` lines. Markdown, Python and other magic cells
//! are comments already; a `%sql` magic cell holds SQL behind `-- MAGIC ` prefixes,
//! which are blanked here. Blanking (not deleting) keeps every line and column where it
//! was, so diagnostics point into the file as written.

const HEADER: &str = "-- Databricks notebook source";
const MAGIC: &str = "-- MAGIC";

/// The text to parse for `text`, when it is a notebook export with `%sql` magic cells;
/// `None` when nothing changes.
pub fn sql_of_notebook(text: &str) -> Option<String> {
    if !text.trim_start().starts_with(HEADER) || !text.contains("%sql") {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut in_sql_cell = false;
    for line in text.split_inclusive('\n') {
        let Some(rest) = line.strip_prefix(MAGIC) else {
            if line.starts_with("-- COMMAND ----------") {
                in_sql_cell = false;
            }
            out.push_str(line);
            continue;
        };
        let body = rest.strip_prefix(' ').unwrap_or(rest);
        let prefix = line.len() - body.len();
        if let Some(magic) = body.trim_start().strip_prefix('%') {
            in_sql_cell = magic.starts_with("sql");
            out.push_str(line);
        } else if in_sql_cell {
            out.push_str(&" ".repeat(prefix));
            out.push_str(body);
        } else {
            out.push_str(line);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_magic_cells_become_sql_in_place() {
        let text = "-- Databricks notebook source\n-- MAGIC %md\n-- MAGIC # Title\n\n-- COMMAND ----------\n\n-- MAGIC %sql\n-- MAGIC CREATE VIEW v AS SELECT 1;\n\n-- COMMAND ----------\n\n-- MAGIC %python\n-- MAGIC x = 1\n";
        let sql = sql_of_notebook(text).expect("a notebook with a %sql cell");
        let lines: Vec<&str> = sql.lines().collect();
        assert_eq!(lines[7], "         CREATE VIEW v AS SELECT 1;");
        assert_eq!(lines[2], "-- MAGIC # Title");
        assert_eq!(lines[12], "-- MAGIC x = 1");
        assert_eq!(sql.len(), text.len());
        assert_eq!(sql_of_notebook("SELECT 1"), None);
    }
}
