//! A case's input rows reach the flows through their own reading code: each
//! `read_files` call of the pipeline reads a folder of the case's scratch space instead
//! of its landing folder ([`cdcflow_plan::Discovered::landing`]), and a run's rows for
//! it land there as one file, in the format the call reads. So checkpoints, quarantine,
//! `_metadata` and the declared or inferred columns behave as in a real run.

use cdcflow_plan::read_files::{FileFormat, ReadFiles};
use cdcflow_plan::{Input, Pipeline};
use datafusion::arrow::array::RecordBatch;

use super::CaseError;
use super::case::{CaseRun, InputFile, InputFormat};
use super::fixtures::{self, Fixtures};

/// Creates the folder each `read_files` call of `pipeline` reads: empty, so that a
/// source a case gives no rows reads nothing.
fn create_landing_folders(pipeline: &Pipeline) -> Result<(), CaseError> {
    for rf in pipeline.flows.iter().flat_map(|f| files_inputs(&f.inputs)) {
        std::fs::create_dir_all(&rf.path).map_err(|e| CaseError::at(&rf.path, e.to_string()))?;
    }
    Ok(())
}

/// Whether a landing folder of `pipeline` takes its columns from its files: a load
/// after its rows landed infers them.
pub fn infers_columns(pipeline: &Pipeline) -> bool {
    pipeline
        .flows
        .iter()
        .flat_map(|f| files_inputs(&f.inputs))
        .any(|rf| rf.declared_schema.is_none())
}

/// The landing folders `inputs` read.
fn files_inputs(inputs: &[Input]) -> impl Iterator<Item = &ReadFiles> {
    inputs.iter().filter_map(|i| match i {
        Input::Files(rf) if rf.landing => Some(rf),
        _ => None,
    })
}

/// The tables a case may give rows for: those a flow fills from a source.
pub fn fed_tables(pipeline: &Pipeline) -> Vec<String> {
    let mut out: Vec<String> = pipeline
        .flows
        .iter()
        .filter(|f| f.inputs.iter().any(is_source))
        .map(|f| f.target.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether a case gives `input` its rows: a landing folder or a server; an external
/// table is read from its path.
fn is_source(input: &Input) -> bool {
    matches!(input, Input::Files(rf) if rf.landing) || fixtures::kind(input).is_some()
}

/// The one source the rows of `input` are for: that of the flows filling its table.
pub fn source_of<'p>(pipeline: &'p Pipeline, input: &'p InputFile) -> Result<&'p Input, CaseError> {
    let sources: Vec<&Input> = pipeline
        .flows_into(&input.table)
        .flat_map(|f| f.inputs.iter().filter(|i| is_source(i)))
        .collect();
    match sources.as_slice() {
        [one] => Ok(*one),
        [] => {
            let known = fed_tables(pipeline);
            let what = match pipeline.dataset(&input.table) {
                Some(_) => format!("no flow fills `{}` from a source", input.table),
                None => format!("the pipeline has no table `{}`", input.table),
            };
            Err(CaseError::at(&input.path, what).help(format!(
                "an input file is named by the table its source feeds; tables fed by a source: {}",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )))
        }
        _ => Err(CaseError::at(
            &input.path,
            format!(
                "`{}` reads {} sources: a case cannot tell which one these rows are for",
                input.table,
                sources.len()
            ),
        )),
    }
}

/// Lands the inputs of `run` (numbered from 1): the rows for a `read_files` call as a
/// file in the folder it reads (`pipeline` loaded with
/// [`cdcflow_plan::Discovered::landing`] set), those for a source on a server given to
/// `fixtures`.
pub fn land(pipeline: &Pipeline, run: &CaseRun, fixtures: &Fixtures) -> Result<(), CaseError> {
    create_landing_folders(pipeline)?;
    fixtures.start_run(run.number as u64);
    for input in &run.inputs {
        let call = match source_of(pipeline, input)? {
            Input::Files(call) => call,
            server => {
                let table = match server {
                    Input::Postgres(r) => &r.table,
                    Input::Mysql(r) => &r.table,
                    Input::Query(r) => &r.table,
                    Input::Kafka(r) => &r.table,
                    _ => continue,
                };
                let first = fixtures.next_position(table);
                fixtures.give(table, fixtures::rows_for(server, input, first)?);
                continue;
            }
        };
        let to = call
            .path
            .join(format!("run-{:04}.{}", run.number, extension(call.format)));
        let bytes = converted(input, call)?;
        if bytes.is_empty() {
            continue;
        }
        std::fs::write(&to, bytes).map_err(|e| CaseError::at(&to, e.to_string()))?;
    }
    Ok(())
}

fn extension(format: FileFormat) -> &'static str {
    match format {
        FileFormat::Json => "json",
        FileFormat::Csv => "csv",
        FileFormat::Parquet => "parquet",
        FileFormat::Text => "txt",
    }
}

/// The input's rows as a file in the format `call` reads.
fn converted(input: &InputFile, call: &ReadFiles) -> Result<Vec<u8>, CaseError> {
    let fail = |e: String| CaseError::at(&input.path, e);
    let raw = input.bytes()?;
    match (call.format, input.format) {
        (FileFormat::Json, InputFormat::Json) => Ok(with_final_newline(raw)),
        (FileFormat::Json, InputFormat::Yaml) => Ok(with_final_newline(
            fixtures::json_lines(&raw, true, false).map_err(fail)?,
        )),
        // Copied only as the call reads it: a header line, commas.
        (FileFormat::Csv, InputFormat::Csv)
            if call.csv_header() && call.csv_delimiter() == b',' =>
        {
            Ok(with_final_newline(raw))
        }
        (FileFormat::Text, InputFormat::Text) => Ok(with_final_newline(raw)),
        (FileFormat::Parquet, InputFormat::Parquet) => Ok(raw),
        (FileFormat::Text, _) | (_, InputFormat::Text) => Err(fail(format!(
            "a `format => 'text'` source takes its rows as a .txt file, one line per row; this source reads {}",
            extension(call.format)
        ))),
        (to, _) => {
            let batches = read_rows(input, call)?;
            write_rows(to, &batches, call).map_err(fail)
        }
    }
}

fn with_final_newline(mut bytes: Vec<u8>) -> Vec<u8> {
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        bytes.push(b'\n');
    }
    bytes
}

/// The input's rows as Arrow batches: its columns by name, in the columns the call
/// declares (each cast to its type; one the call does not declare is an error, one the
/// input leaves out NULL), or as the input's own format gives them when the call
/// declares none.
fn read_rows(input: &InputFile, call: &ReadFiles) -> Result<Vec<RecordBatch>, CaseError> {
    let given = fixtures::read(input, false)?;
    let Some(declared) = &call.declared_schema else {
        return Ok(vec![given]);
    };
    let rows = fixtures::conform(&given, declared, |field, n| {
        datafusion::arrow::array::new_null_array(field.data_type(), n)
    })
    .map_err(|e| CaseError::at(&input.path, e))?;
    Ok(vec![rows])
}

fn write_rows(
    format: FileFormat,
    batches: &[RecordBatch],
    call: &ReadFiles,
) -> Result<Vec<u8>, String> {
    use datafusion::arrow::{csv, json};
    let mut out = Vec::new();
    match format {
        FileFormat::Json => {
            let mut w = json::LineDelimitedWriter::new(&mut out);
            for b in batches {
                w.write(b).map_err(|e| e.to_string())?;
            }
            w.finish().map_err(|e| e.to_string())?;
        }
        FileFormat::Csv => {
            let mut w = csv::WriterBuilder::new()
                .with_header(call.csv_header())
                .with_delimiter(call.csv_delimiter())
                .build(&mut out);
            for b in batches {
                w.write(b).map_err(|e| e.to_string())?;
            }
        }
        FileFormat::Parquet => {
            let Some(first) = batches.first() else {
                return Ok(out);
            };
            let mut w =
                datafusion::parquet::arrow::ArrowWriter::try_new(&mut out, first.schema(), None)
                    .map_err(|e| e.to_string())?;
            for b in batches {
                w.write(b).map_err(|e| e.to_string())?;
            }
            w.close().map_err(|e| e.to_string())?;
        }
        FileFormat::Text => return Err("a text source takes its rows as a .txt file".into()),
    }
    Ok(out)
}
