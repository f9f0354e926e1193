//! Inferring the schema of a landing folder from its files, as Auto Loader does: each
//! file's columns, all nullable, merged into one schema.
//!
//! Inference only decides the columns: it never rejects data. A JSON line that does not
//! parse is left out here (the run quarantines it with its line), and a column a
//! Parquet writer declared required is nullable all the same, since the next file may
//! lack it or hold nulls in it.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema};
use datafusion::arrow::json::reader::infer_json_schema_from_iterator;
use serde_json::Value;

/// Records of a text file looked at to infer its columns.
pub(super) const SAMPLED_RECORDS: usize = 1000;

/// The columns of a newline-delimited JSON file, from its first [`SAMPLED_RECORDS`]
/// records that parse as objects. A file none of whose lines does is an error naming
/// the first bad line (1-based, as the run's quarantine names it).
pub(super) fn json_schema(path: &Path) -> Result<Schema, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(file);
    let mut records: Vec<Value> = Vec::new();
    let mut first_bad: Option<String> = None;
    let mut line = Vec::new();
    let mut line_no = 0u64;
    while records.len() < SAMPLED_RECORDS {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| e.to_string())?;
        // A last line without its line end is still being written: the run leaves the
        // file for later, so it decides nothing here either.
        if read == 0 || !line.ends_with(b"\n") {
            break;
        }
        line_no += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match objects(&line) {
            Ok(values) => records.extend(values),
            Err(e) => {
                first_bad.get_or_insert_with(|| format!("line {line_no}: {e}"));
            }
        }
    }
    if records.is_empty()
        && let Some(bad) = first_bad
    {
        return Err(format!("no line is a JSON record ({bad})"));
    }
    infer_json(&records)
}

/// The JSON values of one line (the run's reader takes several on a line), each an
/// object.
fn objects(line: &[u8]) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for value in serde_json::Deserializer::from_slice(line).into_iter::<Value>() {
        let value = value.map_err(|e| {
            // serde counts lines within this one line: say only the column.
            let text = e.to_string();
            let what = text.split(" at line ").next().unwrap_or(&text);
            format!("not valid JSON at column {}: {what}", e.column())
        })?;
        if !value.is_object() {
            return Err(format!("not a JSON object: {value}"));
        }
        out.push(value);
    }
    Ok(out)
}

/// Arrow's inference over `records`; when they disagree on a nested shape (an object
/// here, a number there), the records that agree with those before them.
fn infer_json(records: &[Value]) -> Result<Schema, String> {
    if let Ok(schema) = infer_json_schema_from_iterator(records.iter().map(Ok)) {
        return Ok(schema);
    }
    let mut agreeing: Vec<&Value> = Vec::new();
    for r in records {
        agreeing.push(r);
        if infer_json_schema_from_iterator(agreeing.iter().map(|v| Ok(*v))).is_err() {
            agreeing.pop();
        }
    }
    infer_json_schema_from_iterator(agreeing.into_iter().map(Ok)).map_err(|e| e.to_string())
}

/// `schema` with every column nullable, at every depth a reader may meet a null
/// (struct fields, list items, map values).
pub(super) fn nullable(schema: &Schema) -> Schema {
    Schema::new(nullable_fields(schema.fields()))
}

fn nullable_field(f: &FieldRef) -> FieldRef {
    let data_type = match f.data_type() {
        DataType::Struct(children) => DataType::Struct(nullable_fields(children)),
        DataType::List(item) => DataType::List(nullable_field(item)),
        DataType::LargeList(item) => DataType::LargeList(nullable_field(item)),
        DataType::FixedSizeList(item, n) => DataType::FixedSizeList(nullable_field(item), *n),
        DataType::Map(entries, sorted) => {
            // Keys stay required: Arrow maps have no null keys.
            let value_nullable = match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => DataType::Struct(Fields::from(vec![
                    Arc::clone(&kv[0]),
                    nullable_field(&kv[1]),
                ])),
                other => other.clone(),
            };
            DataType::Map(
                Arc::new(entries.as_ref().clone().with_data_type(value_nullable)),
                *sorted,
            )
        }
        other => other.clone(),
    };
    Arc::new(
        f.as_ref()
            .clone()
            .with_data_type(data_type)
            .with_nullable(true),
    )
}

fn nullable_fields(fields: &Fields) -> Fields {
    fields.iter().map(nullable_field).collect()
}

/// The schemas of several files as one: new columns are added, a column of only nulls
/// takes the type others give it, integers widen to floating point; any other type
/// change is an error naming the file, the column and both types.
pub(super) fn merge_schemas(schemas: &[(Schema, &PathBuf)]) -> Result<Schema, String> {
    let mut fields: Vec<(Field, &PathBuf)> = Vec::new();
    for (schema, file) in schemas {
        for f in schema.fields() {
            let Some((known, first)) = fields.iter_mut().find(|(k, _)| k.name() == f.name()) else {
                fields.push((f.as_ref().clone(), file));
                continue;
            };
            let (old, new) = (known.data_type().clone(), f.data_type().clone());
            let merged = match (&old, &new) {
                _ if old == new => continue,
                (DataType::Null, _) => new,
                (_, DataType::Null) => continue,
                (DataType::Int64, DataType::Float64) | (DataType::Float64, DataType::Int64) => {
                    DataType::Float64
                }
                _ => {
                    return Err(format!(
                        "{}: column `{}` is {new} here but {old} in {} (a type change; landing files must agree)",
                        file.display(),
                        f.name(),
                        first.display()
                    ));
                }
            };
            *known = known.clone().with_data_type(merged).with_nullable(true);
        }
    }
    Ok(Schema::new(
        fields.into_iter().map(|(f, _)| f).collect::<Vec<_>>(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.json");
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    fn names(schema: &Schema) -> Vec<String> {
        let mut out: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        out.sort();
        out
    }

    #[test]
    fn a_bad_json_line_is_left_out_of_inference() {
        let (_dir, path) = json_file(
            "{\"id\": 1, \"name\": \"a\"}\n{\"id\": 2, \"name\": broken}\n[1, 2]\n{\"id\": 3, \"seq\": 7}\n",
        );
        let schema = json_schema(&path).expect("schema");
        assert_eq!(names(&schema), ["id", "name", "seq"]);
        assert_eq!(
            schema.field_with_name("id").expect("id").data_type(),
            &DataType::Int64
        );
    }

    #[test]
    fn a_json_file_of_only_bad_lines_names_the_first_by_its_line() {
        let (_dir, path) = json_file("\n{\"id\": oops}\n{\"id\":\n");
        let err = json_schema(&path).expect_err("no record");
        assert!(
            err.contains("line 2: not valid JSON at column 8: expected value"),
            "{err}"
        );
    }

    #[test]
    fn records_that_disagree_on_a_nested_shape_keep_the_first_shape() {
        let (_dir, path) = json_file("{\"a\": {\"x\": 1}}\n{\"a\": 5}\n{\"a\": {\"y\": 2}}\n");
        let schema = json_schema(&path).expect("schema");
        let DataType::Struct(children) = schema.field(0).data_type() else {
            panic!("not a struct: {schema:?}");
        };
        assert_eq!(children.len(), 2);
    }

    #[test]
    fn an_unfinished_last_line_decides_nothing() {
        let (_dir, path) = json_file("{\"id\": 1}\n{\"id\": 2, \"ext");
        assert_eq!(names(&json_schema(&path).expect("schema")), ["id"]);
    }

    #[test]
    fn every_inferred_column_is_nullable_at_every_depth() {
        let point = DataType::Struct(Fields::from(vec![Field::new("x", DataType::Int64, false)]));
        let tags = DataType::List(Arc::new(Field::new("item", DataType::Utf8, false)));
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("point", point, false),
            Field::new("tags", tags, false),
        ]);
        let got = nullable(&schema);
        assert!(got.fields().iter().all(|f| f.is_nullable()));
        let DataType::Struct(children) = got.field(1).data_type() else {
            panic!("struct");
        };
        assert!(children[0].is_nullable());
        let DataType::List(item) = got.field(2).data_type() else {
            panic!("list");
        };
        assert!(item.is_nullable());
    }
}
