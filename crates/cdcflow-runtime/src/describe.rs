//! The statements `cdcflow query` answers about tables rather than from them, as
//! Databricks does: `DESCRIBE HISTORY t [LIMIT n]`, `DESCRIBE DETAIL t` and
//! `SHOW TABLES`. DataFusion knows none of them; each is answered from the pipeline's
//! catalog and the tables' Delta logs as one result, printed like any query's.

use std::sync::Arc;

use cdcflow_plan::Pipeline;
use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, ListBuilder, MapBuilder, RecordBatch, StringArray, StringBuilder,
    TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use crate::catalog::{self, Located};
use crate::delta::Table;
use crate::{RunError, history};

/// One of the statements this module answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Describe {
    History { table: String, limit: Option<usize> },
    Detail { table: String },
    ShowTables,
}

/// The statement `sql` is, when it is one of these; other SQL is `Ok(None)`.
pub fn parse(sql: &str) -> Result<Option<Describe>, RunError> {
    let words: Vec<&str> = sql
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .collect();
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    let upper: Vec<&str> = upper.iter().map(String::as_str).collect();
    let name = |w: &str| w.trim_matches(|c| c == '`' || c == '"').to_string();
    Ok(Some(match upper.as_slice() {
        ["SHOW", "TABLES"] => Describe::ShowTables,
        ["DESCRIBE" | "DESC", "DETAIL", _] => Describe::Detail {
            table: name(words[2]),
        },
        ["DESCRIBE" | "DESC", "HISTORY", _] => Describe::History {
            table: name(words[2]),
            limit: None,
        },
        ["DESCRIBE" | "DESC", "HISTORY", _, "LIMIT", n] => Describe::History {
            table: name(words[2]),
            limit: Some(n.parse().map_err(|_| {
                RunError::input(format!(
                    "DESCRIBE HISTORY … LIMIT {n}: not a number of versions"
                ))
            })?),
        },
        ["DESCRIBE" | "DESC", "HISTORY" | "DETAIL", _, ..] => {
            return Err(RunError::input(format!("cannot read `{}`", sql.trim()))
                .with_help("write DESCRIBE HISTORY <table> [LIMIT n] or DESCRIBE DETAIL <table>"));
        }
        _ => return Ok(None),
    }))
}

/// The answer to `statement`.
pub async fn answer(pipeline: &Pipeline, statement: &Describe) -> Result<RecordBatch, RunError> {
    match statement {
        Describe::History { table, limit } => {
            let located = catalog::locate(pipeline, table).await?;
            let t = Table::open(&located.dir).await?;
            history::to_batch(&history::entries(&t, *limit).await?)
        }
        Describe::Detail { table } => {
            let located = catalog::locate(pipeline, table).await?;
            // Clustering is the definition's: the Delta log keeps no trace of it.
            let clustering = pipeline
                .datasets
                .iter()
                .find(|d| d.name.eq_ignore_ascii_case(&located.name))
                .map(|d| d.cluster_columns.clone())
                .unwrap_or_default();
            detail(&located, &clustering).await
        }
        Describe::ShowTables => show_tables(pipeline).await,
    }
}

/// `SHOW TABLES`: each table a query can name now, with its kind.
async fn show_tables(pipeline: &Pipeline) -> Result<RecordBatch, RunError> {
    let mut tables: Vec<Located> = Vec::new();
    for l in catalog::all(pipeline)? {
        if catalog::exists(&l.dir).await? {
            tables.push(l);
        }
    }
    let schema = Schema::new(vec![
        Field::new("tableName", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
    ]);
    Ok(RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from_iter_values(
                tables.iter().map(|l| l.name.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(tables.iter().map(|l| l.kind))),
        ],
    )?)
}

/// `DESCRIBE DETAIL`: one row, Databricks' columns, and the table's version and kind.
async fn detail(located: &Located, clustering: &[String]) -> Result<RecordBatch, RunError> {
    let table = Table::open(&located.dir).await?;
    let Some(t) = &table.table else {
        return Err(RunError::input(format!(
            "table `{}` has not been created yet",
            located.name
        )));
    };
    let snapshot = t
        .snapshot()
        .map_err(|e| RunError::delta(located.dir.shown(), e))?;
    // The kernel keeps its accessors to itself; the log's JSON form is the protocol's.
    let metadata = serde_json::to_value(snapshot.metadata()).unwrap_or_default();
    let protocol = serde_json::to_value(snapshot.protocol()).unwrap_or_default();
    let text = |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
    let int = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_i64);
    let strings = |v: &serde_json::Value, k: &str| -> Vec<String> {
        v.get(k)
            .and_then(|x| x.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let files = table.adds()?;
    let bytes: i64 = snapshot
        .snapshot()
        .log_data()
        .iter()
        .map(|f| f.size())
        .sum();
    let last_modified = history::entries(&table, Some(1))
        .await?
        .first()
        .and_then(|e| e.timestamp);

    let mut partitions = ListBuilder::new(StringBuilder::new());
    for c in strings(&metadata, "partitionColumns") {
        partitions.values().append_value(c);
    }
    partitions.append(true);
    let mut clustering_columns = ListBuilder::new(StringBuilder::new());
    for c in clustering {
        clustering_columns.values().append_value(c);
    }
    clustering_columns.append(true);
    let clustering = clustering_columns.finish();
    let mut features = ListBuilder::new(StringBuilder::new());
    let mut all_features = strings(&protocol, "readerFeatures");
    all_features.extend(strings(&protocol, "writerFeatures"));
    all_features.sort();
    all_features.dedup();
    for f in all_features {
        features.values().append_value(f);
    }
    features.append(true);
    let mut properties = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    if let Some(config) = metadata.get("configuration").and_then(|c| c.as_object()) {
        let mut pairs: Vec<_> = config.iter().collect();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in pairs {
            properties.keys().append_value(k);
            properties
                .values()
                .append_value(v.as_str().map_or_else(|| v.to_string(), String::from));
        }
    }
    properties.append(true)?;
    let (partitions, features, properties) =
        (partitions.finish(), features.finish(), properties.finish());

    let ts = || DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let one_text = |v: Option<String>| -> ArrayRef { Arc::new(StringArray::from(vec![v])) };
    let one_int = |v: Option<i64>| -> ArrayRef { Arc::new(Int64Array::from(vec![v])) };
    let one_ts = |v: Option<i64>| -> ArrayRef {
        Arc::new(TimestampMillisecondArray::from(vec![v]).with_timezone("UTC"))
    };
    let s = |n: &str| Field::new(n, DataType::Utf8, true);
    let i = |n: &str| Field::new(n, DataType::Int64, true);
    let fields = vec![
        s("format"),
        s("id"),
        s("name"),
        s("description"),
        s("location"),
        Field::new("createdAt", ts(), true),
        Field::new("lastModified", ts(), true),
        Field::new("partitionColumns", partitions.data_type().clone(), true),
        Field::new("clusteringColumns", clustering.data_type().clone(), true),
        i("numFiles"),
        i("sizeInBytes"),
        Field::new("properties", properties.data_type().clone(), true),
        i("minReaderVersion"),
        i("minWriterVersion"),
        Field::new("tableFeatures", features.data_type().clone(), true),
        i("version"),
        s("kind"),
    ];
    let columns: Vec<ArrayRef> = vec![
        one_text(Some("delta".into())),
        one_text(text(&metadata, "id")),
        one_text(Some(located.name.clone())),
        one_text(text(&metadata, "description")),
        one_text(Some(located.dir.to_string())),
        one_ts(int(&metadata, "createdTime")),
        one_ts(last_modified),
        Arc::new(partitions),
        Arc::new(clustering),
        one_int(Some(files.len() as i64)),
        one_int(Some(bytes)),
        Arc::new(properties),
        one_int(int(&protocol, "minReaderVersion")),
        one_int(int(&protocol, "minWriterVersion")),
        Arc::new(features),
        one_int(table.version()),
        one_text(Some(located.kind.to_string())),
    ];
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_statements_and_leaves_other_sql() {
        assert_eq!(
            parse("describe history `users` limit 2;").unwrap(),
            Some(Describe::History {
                table: "users".into(),
                limit: Some(2)
            })
        );
        assert_eq!(
            parse("DESC DETAIL users").unwrap(),
            Some(Describe::Detail {
                table: "users".into()
            })
        );
        assert_eq!(parse(" SHOW TABLES ").unwrap(), Some(Describe::ShowTables));
        assert_eq!(parse("DESCRIBE history").unwrap(), None);
        assert_eq!(parse("SELECT 1").unwrap(), None);
        assert!(parse("DESCRIBE HISTORY users LIMIT x").is_err());
    }
}
