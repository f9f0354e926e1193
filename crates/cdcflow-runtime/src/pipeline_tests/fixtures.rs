//! Sources on servers (`read_postgres`, `read_mysql`, `read_query`, `read_kafka`) read
//! a case's rows instead of their server: a [`SourceFactory`] whose every source gives,
//! in each run, the rows the case has for it in that run, with the columns the real
//! reader gives (the table's, then its change columns). Change columns a case leaves
//! out count up in the file's order (`_change_seq`, `_commit_lsn`, a Kafka record's
//! `offset`) or take a fixed value (`_change_type` is `insert`, a record's `topic` the
//! first one subscribed); any other column left out is NULL.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cdcflow_plan::{Input, Pipeline};
use datafusion::arrow::array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, new_null_array,
};
use datafusion::arrow::compute::{CastOptions, cast_with_options, concat_batches};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use futures::future::BoxFuture;
use serde_json::Value;

use super::CaseError;
use super::case::{InputFile, InputFormat};
use crate::RunError;
use crate::sources::{ExternalSource, SourceFactory, SourceRead, SourceStatus};

/// The rows every fixture source gives in the current run.
#[derive(Default)]
struct Current {
    run: u64,
    /// By the name that stands for the source in its flow's query.
    rows: BTreeMap<String, RecordBatch>,
    /// The next position a row left without one takes, per source: they count on from
    /// run to run, as a server's log does.
    next: BTreeMap<String, u64>,
}

/// The fixture sources of one case.
#[derive(Clone, Default)]
pub struct Fixtures(Arc<Mutex<Current>>);

impl Fixtures {
    /// Starts run `run`: no source has rows until [`Fixtures::give`].
    pub fn start_run(&self, run: u64) {
        let mut current = self.0.lock().unwrap_or_else(|e| e.into_inner());
        current.run = run;
        current.rows.clear();
    }

    /// The position the next row of the source standing as `table` takes when the
    /// case gives it none (from 1).
    pub fn next_position(&self, table: &str) -> u64 {
        let current = self.0.lock().unwrap_or_else(|e| e.into_inner());
        current.next.get(table).copied().unwrap_or(1)
    }

    /// The rows the source standing as `table` gives in this run.
    pub fn give(&self, table: &str, rows: RecordBatch) {
        let mut current = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Past the rows given, and past any position the case wrote itself: a later
        // run's changes come later.
        let next = (current.next.get(table).copied().unwrap_or(1) + rows.num_rows() as u64)
            .max(highest_position(&rows).map_or(0, |p| p + 1));
        current.next.insert(table.to_string(), next);
        current.rows.insert(table.to_string(), rows);
    }
}

/// The highest position among `rows`: a change's log position or sequence, a record's
/// offset + 1 (positions count from 1, offsets from 0).
fn highest_position(rows: &RecordBatch) -> Option<u64> {
    [
        ("_commit_lsn", 0),
        ("_binlog_position", 0),
        ("_change_seq", 0),
        ("offset", 1),
    ]
    .iter()
    .filter_map(|(name, plus)| {
        let column = rows.column_by_name(name)?;
        let values = column.as_any().downcast_ref::<Int64Array>()?;
        let highest = datafusion::arrow::compute::max(values)?;
        u64::try_from(highest + plus).ok()
    })
    .max()
}

/// The input's kind, as a case names it.
pub fn kind(input: &Input) -> Option<&'static str> {
    Some(match input {
        Input::Postgres(_) => "read_postgres",
        Input::Mysql(_) => "read_mysql",
        Input::Query(_) => "read_query",
        Input::Kafka(_) => "read_kafka",
        _ => return None,
    })
}

/// The name standing for a server input in its flow, and its checkpoint key.
fn names(input: &Input) -> Option<(String, String)> {
    Some(match input {
        Input::Postgres(r) => (r.table.clone(), r.key()),
        Input::Mysql(r) => (r.table.clone(), r.key()),
        Input::Query(r) => (r.table.clone(), r.key()),
        Input::Kafka(r) => (r.table.clone(), r.key()),
        _ => return None,
    })
}

/// The rows a source reading `input` gives, when its columns are known.
fn row_schema(input: &Input) -> Option<SchemaRef> {
    match input {
        Input::Postgres(r) => r.schema(),
        Input::Mysql(r) => r.schema(),
        Input::Query(r) => r.schema(),
        Input::Kafka(r) => Some(r.schema()),
        _ => None,
    }
}

/// The change columns a reader adds after the table's own (none for `read_query`,
/// whose rows are its query's; a Kafka record's are all its columns).
fn change_columns(input: &Input) -> Vec<Field> {
    match input {
        Input::Postgres(_) => cdcflow_plan::read_postgres::metadata_fields(),
        Input::Mysql(_) => cdcflow_plan::read_mysql::metadata_fields(),
        _ => vec![],
    }
}

/// The columns of the table behind `input` as the case's rows give them: what a run
/// asks the server for when the pipeline declares none. `None` for a Kafka topic, whose
/// columns are fixed.
pub fn discovered_columns(
    input: &Input,
    file: &InputFile,
) -> Result<Option<(String, SchemaRef)>, CaseError> {
    let key = match input {
        Input::Postgres(r) if r.declared_columns.is_none() => r.key(),
        Input::Mysql(r) if r.declared_columns.is_none() => r.key(),
        Input::Query(r) if r.declared_columns.is_none() => r.key(),
        _ => return Ok(None),
    };
    let rows = read(file, matches!(input, Input::Kafka(_)))?;
    let change: Vec<String> = change_columns(input)
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let fields: Vec<Field> = rows
        .schema()
        .fields()
        .iter()
        .filter(|f| !change.iter().any(|c| c.eq_ignore_ascii_case(f.name())))
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    Ok(Some((key, Arc::new(Schema::new(fields)))))
}

/// The case's rows for `input` in the columns its reader gives (`input` planned, so
/// its columns are known).
pub fn rows_for(input: &Input, file: &InputFile, first_row: u64) -> Result<RecordBatch, CaseError> {
    let Some(schema) = row_schema(input) else {
        return Err(CaseError::at(
            &file.path,
            "the source's columns are not known: declare them with schema => '…'".into(),
        ));
    };
    let given = read(file, matches!(input, Input::Kafka(_)))?;
    conform(&given, &schema, |field, rows| {
        default_column(field, input, rows, first_row)
    })
    .map_err(|e| CaseError::at(&file.path, e))
}

/// The file's rows with the columns and types its format gives (JSON and YAML values
/// as JSON infers them; CSV cells as CSV inference types them).
/// For a Kafka record (`kafka`), a `key` or `value` given as JSON is its text.
pub(super) fn read(file: &InputFile, kafka: bool) -> Result<RecordBatch, CaseError> {
    use datafusion::arrow::{csv, json};
    let fail = |e: String| CaseError::at(&file.path, e);
    let raw = file.bytes()?;
    let batches: Vec<RecordBatch> = match file.format {
        InputFormat::Json | InputFormat::Yaml => {
            let lines = json_lines(&raw, file.format == InputFormat::Yaml, kafka).map_err(fail)?;
            if lines.is_empty() {
                return Ok(RecordBatch::new_empty(Arc::new(Schema::empty())));
            }
            let (schema, _) = json::reader::infer_json_schema(std::io::Cursor::new(&lines), None)
                .map_err(|e| fail(e.to_string()))?;
            json::ReaderBuilder::new(Arc::new(schema))
                .build(std::io::Cursor::new(&lines))
                .map_err(|e| fail(e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| fail(e.to_string()))?
        }
        InputFormat::Csv => {
            let format = csv::reader::Format::default().with_header(true);
            let (schema, _) = format
                .infer_schema(std::io::Cursor::new(&raw), None)
                .map_err(|e| fail(e.to_string()))?;
            csv::ReaderBuilder::new(Arc::new(schema))
                .with_format(format)
                .build(std::io::Cursor::new(&raw))
                .map_err(|e| fail(e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| fail(e.to_string()))?
        }
        InputFormat::Parquet => {
            datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                bytes::Bytes::from(raw),
            )
            .map_err(|e| fail(e.to_string()))?
            .build()
            .map_err(|e| fail(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| fail(e.to_string()))?
        }
        InputFormat::Text => {
            return Err(fail(
                "a source on a server takes its rows as .json, .csv, .yaml or .parquet".into(),
            ));
        }
    };
    let Some(first) = batches.first() else {
        return Ok(RecordBatch::new_empty(Arc::new(Schema::empty())));
    };
    concat_batches(&first.schema(), &batches).map_err(|e| fail(e.to_string()))
}

/// JSON lines of a JSON-lines or YAML file; for a Kafka record, a `key` or `value`
/// given as an object or list becomes its JSON text (the record's bytes).
pub(super) fn json_lines(raw: &[u8], yaml: bool, kafka: bool) -> Result<Vec<u8>, String> {
    let rows: Vec<serde_json::Map<String, Value>> = if yaml {
        serde_yaml::from_slice(raw).map_err(|e| format!("not a YAML list of mappings: {e}"))?
    } else {
        let mut rows = Vec::new();
        for (i, line) in raw.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            rows.push(
                serde_json::from_slice(line)
                    .map_err(|e| format!("line {}: not a JSON object: {e}", i + 1))?,
            );
        }
        rows
    };
    let mut out = Vec::new();
    for mut row in rows {
        if kafka {
            for field in ["key", "value"] {
                if let Some(v) = row.get_mut(field)
                    && (v.is_object() || v.is_array())
                {
                    *v = Value::String(v.to_string());
                }
            }
        }
        serde_json::to_writer(&mut out, &row).map_err(|e| e.to_string())?;
        out.push(b'\n');
    }
    Ok(out)
}

/// `given` in `schema`: each column found by name (any case) and cast to its type; a
/// column left out takes `default`'s values; a column `schema` does not have is an
/// error (a misspelt column is never silently NULL).
pub(super) fn conform(
    given: &RecordBatch,
    schema: &SchemaRef,
    default: impl Fn(&Field, usize) -> ArrayRef,
) -> Result<RecordBatch, String> {
    let find = |name: &str| {
        given
            .schema()
            .fields()
            .iter()
            .position(|f| f.name().eq_ignore_ascii_case(name))
    };
    if let Some(extra) = given.schema().fields().iter().find(|g| {
        !schema
            .fields()
            .iter()
            .any(|f| f.name().eq_ignore_ascii_case(g.name()))
    }) {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        return Err(format!(
            "the source has no column `{}`; its rows have: {}",
            extra.name(),
            names.join(", ")
        ));
    }
    let rows = given.num_rows();
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let mut columns: Vec<ArrayRef> = Vec::new();
    for field in schema.fields() {
        let column = match find(field.name()) {
            Some(i) => cast_with_options(given.column(i), field.data_type(), &strict)
                .map_err(|e| format!("column `{}` as {}: {e}", field.name(), field.data_type()))?,
            None => default(field, rows),
        };
        columns.push(column);
    }
    RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| e.to_string())
}

/// The values of a column a case leaves out.
fn default_column(field: &Field, input: &Input, rows: usize, first_row: u64) -> ArrayRef {
    let counting = || {
        Arc::new(Int64Array::from_iter_values(
            (0..rows as i64).map(|i| first_row as i64 + i),
        )) as ArrayRef
    };
    let name = field.name().as_str();
    match (input, name) {
        (Input::Postgres(_) | Input::Mysql(_), "_change_type") => {
            Arc::new(StringArray::from(vec!["insert"; rows]))
        }
        (Input::Postgres(_), "_commit_lsn" | "_change_seq") => counting(),
        (Input::Mysql(_), "_binlog_position" | "_change_seq") => counting(),
        (Input::Mysql(_), "_binlog_file") => {
            Arc::new(StringArray::from(vec!["mysql-bin.000001"; rows]))
        }
        // Kafka's offsets start at 0.
        (Input::Kafka(_), "offset") => Arc::new(Int64Array::from_iter_values(
            (0..rows as i64).map(|i| first_row as i64 - 1 + i),
        )),
        (Input::Kafka(_), "partition") => Arc::new(Int32Array::from(vec![0; rows])),
        (Input::Kafka(k), "topic") => {
            let topic = match &k.subscription {
                cdcflow_plan::read_kafka::Subscription::Topics(t) => {
                    t.first().cloned().unwrap_or_default()
                }
                cdcflow_plan::read_kafka::Subscription::Pattern(p) => p.clone(),
            };
            Arc::new(StringArray::from(vec![topic; rows]))
        }
        _ => new_null_array(field.data_type(), rows),
    }
}

/// The factory a case's runs read their server sources from.
impl SourceFactory for Fixtures {
    fn open(
        &self,
        _pipeline: &Pipeline,
        input: &Input,
    ) -> Option<Result<Box<dyn ExternalSource>, RunError>> {
        let (table, key) = names(input)?;
        let schema = row_schema(input);
        Some(Ok(Box::new(FixtureSource {
            table,
            key,
            schema,
            fixtures: self.clone(),
        })))
    }
}

struct FixtureSource {
    table: String,
    key: String,
    schema: Option<SchemaRef>,
    fixtures: Fixtures,
}

impl ExternalSource for FixtureSource {
    fn checkpoint_key(&self) -> String {
        self.key.clone()
    }

    fn columns(&self) -> BoxFuture<'_, Result<SchemaRef, RunError>> {
        Box::pin(async move {
            self.schema.clone().ok_or_else(|| {
                RunError::input(format!("the case gives no rows for `{}`, so its columns are not known", self.key))
                    .with_help("declare the columns with schema => '…', or give the source rows in the case's first run")
            })
        })
    }

    fn read<'a>(&'a self, after: Option<&'a Value>) -> BoxFuture<'a, Result<SourceRead, RunError>> {
        Box::pin(async move {
            let (run, rows) = {
                let current = self.fixtures.0.lock().unwrap_or_else(|e| e.into_inner());
                (current.run, current.rows.get(&self.table).cloned())
            };
            let schema = match (&rows, &self.schema) {
                (Some(r), _) => r.schema(),
                (None, Some(s)) => Arc::clone(s),
                (None, None) => Arc::new(Schema::empty()),
            };
            let read_before = after.and_then(Value::as_u64).is_some_and(|r| r >= run);
            let rows = match read_before {
                true => vec![],
                false => rows.into_iter().collect(),
            };
            Ok(SourceRead {
                schema,
                rows,
                position: Value::from(run),
                must_commit: after.is_none(),
                more: false,
                oldest_change_micros: None,
                tombstones: 0,
                lag: vec![],
                acknowledge: None,
                carried: None,
                rejected: vec![],
                warnings: vec![],
                defaults: vec![],
            })
        })
    }

    fn status<'a>(
        &'a self,
        _after: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<SourceStatus, RunError>> {
        Box::pin(async move {
            Ok(SourceStatus {
                source: self.key.clone(),
                ..SourceStatus::default()
            })
        })
    }
}
