//! Source rows → change events: the flow's expressions (WHERE, COLUMNS, SEQUENCE BY,
//! APPLY AS DELETE/TRUNCATE WHEN) evaluated by DataFusion, then checked for the rows
//! the apply cannot take (null keys, null sequence values).

use std::collections::BTreeMap;
use std::sync::Arc;

use cdcflow_plan::autocdc::AutoCdcSpec;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int8Array, Int64Array, RecordBatch, StructArray, UInt32Array,
    new_empty_array,
};
use datafusion::arrow::compute::{cast, concat};
use datafusion::arrow::datatypes::{DataType, Field, Int8Type, Schema, SchemaRef, UInt32Type};
use datafusion::arrow::error::ArrowError;
use datafusion::common::{Column, TableReference};
use datafusion::dataframe::DataFrame;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, lit, when};
use datafusion::physical_plan::ExecutionPlan;

use super::kernel::{Op, Rules};
use crate::{ErrorCode, RunError};

/// The column that carries where a source row came from, for error messages.
const ORIGIN: &str = "__cdcflow_origin";

/// Source rows, each batch with the name of what it was read from.
pub type Sourced = Vec<(String, RecordBatch)>;

/// Evaluates the flow over `rows` (of `source` schema) into events of
/// [`Rules::event_schema`], recorded at `now_micros`, as one batch.
pub async fn to_events(
    spec: &AutoCdcSpec,
    rules: &Rules,
    source: &SchemaRef,
    rows: Sourced,
    now_micros: i64,
) -> Result<RecordBatch, RunError> {
    let parts = event_parts(spec, rules, source, rows, now_micros).await?;
    Ok(concat_parts(&rules.event_schema(), parts)?)
}

/// [`to_events`] in parts, as the flow's expressions give them. The parts share their
/// buffers with the source rows where a column passes through unchanged, so they cost
/// little more than the source rows, which are let go.
pub async fn event_parts(
    spec: &AutoCdcSpec,
    rules: &Rules,
    source: &SchemaRef,
    rows: Sourced,
    now_micros: i64,
) -> Result<Vec<RecordBatch>, RunError> {
    let event_schema = rules.event_schema();
    if rows.iter().all(|(_, b)| b.num_rows() == 0) {
        return Ok(vec![]);
    }
    let (origins, batches) = with_origin(source, rows)?;
    let out = evaluate(spec, batches).await?;
    let mut problems = NullRows::default();
    let mut events = Vec::with_capacity(out.len());
    for batch in out {
        events.push(to_state_row(
            spec,
            rules,
            &event_schema,
            &batch,
            &origins,
            now_micros,
            &mut problems,
        )?);
    }
    problems.check(spec)?;
    Ok(events)
}

/// The source rows with a column naming, by its index in the returned list, what each
/// row was read from (an index, not the name: four bytes a row).
fn with_origin(
    source: &SchemaRef,
    rows: Sourced,
) -> Result<(Vec<String>, Vec<RecordBatch>), RunError> {
    let schema = origin_schema(source);
    let mut origins: Vec<String> = Vec::new();
    let mut batches = Vec::with_capacity(rows.len());
    for (origin, b) in rows {
        if origins.last() != Some(&origin) {
            origins.push(origin);
        }
        let index = u32::try_from(origins.len() - 1).unwrap_or(u32::MAX);
        let mut columns = b.columns().to_vec();
        columns.push(Arc::new(UInt32Array::from_value(index, b.num_rows())));
        batches.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
    }
    Ok((origins, batches))
}

/// `source` with the column naming where each row came from.
fn origin_schema(source: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = source.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(ORIGIN, DataType::UInt32, false));
    Arc::new(Schema::new(fields))
}

/// The flow's WHERE and its columns, sequence, operation and origin, evaluated by
/// DataFusion over `batches`; the inputs are let go with the session.
async fn evaluate(
    spec: &AutoCdcSpec,
    batches: Vec<RecordBatch>,
) -> Result<Vec<RecordBatch>, RunError> {
    let Some(schema) = batches.first().map(RecordBatch::schema) else {
        return Ok(vec![]);
    };
    Ok(event_frame(spec, schema, batches).await?.collect().await?)
}

/// The physical plan that turns a batch of `source` rows into events ([`to_events`]),
/// as `cdcflow explain --physical` shows it.
pub async fn event_plan(
    spec: &AutoCdcSpec,
    source: &SchemaRef,
) -> Result<Arc<dyn ExecutionPlan>, RunError> {
    let df = event_frame(spec, origin_schema(source), vec![]).await?;
    Ok(df.create_physical_plan().await?)
}

/// The flow's WHERE and its columns, sequence, operation and origin over `batches`.
async fn event_frame(
    spec: &AutoCdcSpec,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<DataFrame, RunError> {
    let ctx = cdcflow_plan::functions::session_context();
    let table = TableReference::bare(spec.source.as_str());
    ctx.register_table(
        table.clone(),
        Arc::new(MemTable::try_new(schema, vec![batches])?),
    )?;
    let mut df = ctx.table(table).await?;
    if let Some(f) = &spec.filter {
        df = df.filter(f.clone())?;
    }
    let column = |name: &str| Expr::Column(Column::new_unqualified(name));
    let mut exprs: Vec<Expr> = spec.columns.iter().map(|c| column(c)).collect();
    exprs.extend(
        spec.sequence
            .iter()
            .enumerate()
            .map(|(i, f)| f.expr.clone().alias(format!("__seq{i}"))),
    );
    exprs.push(op_expr(spec)?.alias("__op"));
    exprs.push(column(ORIGIN));
    Ok(df.select(exprs)?)
}

/// Event `parts` as one batch, put together a column at a time: each column's parts
/// are let go once it is copied.
pub fn concat_parts(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<RecordBatch, ArrowError> {
    let mut columns: Vec<Vec<ArrayRef>> =
        vec![Vec::with_capacity(batches.len()); schema.fields().len()];
    for batch in batches {
        for (c, column) in batch.columns().iter().enumerate() {
            columns[c].push(Arc::clone(column));
        }
    }
    let mut out = Vec::with_capacity(columns.len());
    for (parts, field) in columns.iter_mut().zip(schema.fields()) {
        let column = match parts.len() {
            0 => new_empty_array(field.data_type()),
            1 => parts.remove(0),
            _ => {
                let arrays: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
                concat(&arrays)?
            }
        };
        parts.clear();
        out.push(column);
    }
    RecordBatch::try_new(Arc::clone(schema), out)
}

fn op_expr(spec: &AutoCdcSpec) -> Result<Expr, RunError> {
    let mut cases: Vec<(Expr, i8)> = Vec::new();
    if let Some(t) = &spec.truncate_when {
        cases.push((t.clone(), Op::Truncate as i8));
    }
    if let Some(d) = &spec.delete_when {
        cases.push((d.clone(), Op::Delete as i8));
    }
    let Some(((first, v), rest)) = cases.split_first() else {
        return Ok(lit(Op::Upsert as i8));
    };
    let mut case = when(first.clone(), lit(*v));
    for (cond, v) in rest {
        case = case.when(cond.clone(), lit(*v));
    }
    Ok(case.otherwise(lit(Op::Upsert as i8))?)
}

/// Rows that cannot be applied, counted per origin.
#[derive(Default)]
struct NullRows {
    keys: BTreeMap<String, usize>,
    sequence: BTreeMap<String, usize>,
}

impl NullRows {
    fn check(&self, spec: &AutoCdcSpec) -> Result<(), RunError> {
        let describe = |m: &BTreeMap<String, usize>| {
            let total: usize = m.values().sum();
            let places: Vec<String> = m.iter().map(|(o, n)| format!("{n} in {o}")).collect();
            (total, places.join(", "))
        };
        if !self.keys.is_empty() {
            let (n, places) = describe(&self.keys);
            return Err(RunError::user(ErrorCode::NullKey, format!(
                "{n} row(s) of `{}` with a null key ({}): {places}; nothing was applied",
                spec.source,
                spec.keys.join(", ")
            ))
            .with_help("KEYS columns must not be null; filter such rows out before the flow or fix the source"));
        }
        if !self.sequence.is_empty() {
            let (n, places) = describe(&self.sequence);
            let seq: Vec<String> = spec.sequence.iter().map(|f| f.name.clone()).collect();
            return Err(RunError::user(ErrorCode::NullSequence, format!(
                "{n} row(s) of `{}` with a null SEQUENCE BY value ({}): {places}; nothing was applied",
                spec.source,
                seq.join(", ")
            ))
            .with_help("every change needs a sequence value to be ordered; filter such rows out before the flow or fix the source"));
        }
        Ok(())
    }
}

fn to_state_row(
    spec: &AutoCdcSpec,
    rules: &Rules,
    event_schema: &SchemaRef,
    batch: &RecordBatch,
    origins: &[String],
    now_micros: i64,
    problems: &mut NullRows,
) -> Result<RecordBatch, RunError> {
    let n_cols = spec.columns.len();
    let n_seq = spec.sequence.len();
    let rows = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(n_cols + 3);
    for (i, field) in rules.columns.fields().iter().enumerate() {
        columns.push(cast(batch.column(i), field.data_type())?);
    }
    let seq_arrays: Vec<ArrayRef> = (0..n_seq)
        .map(|i| cast(batch.column(n_cols + i), &spec.sequence[i].data_type))
        .collect::<Result<_, _>>()?;
    let seq: ArrayRef = match &rules.sequence_type {
        DataType::Struct(fields) => Arc::new(StructArray::try_new(
            fields.clone(),
            seq_arrays.clone(),
            None,
        )?),
        _ => Arc::clone(&seq_arrays[0]),
    };
    let ops = batch.column(n_cols + n_seq).as_primitive::<Int8Type>();
    let origin_of = batch
        .column(n_cols + n_seq + 1)
        .as_primitive::<UInt32Type>();
    let origin = |row: usize| {
        origins
            .get(origin_of.value(row) as usize)
            .cloned()
            .unwrap_or_default()
    };
    for row in 0..rows {
        let truncate = ops.value(row) == Op::Truncate as i8;
        if !truncate && rules.keys.iter().any(|&k| columns[k].is_null(row)) {
            *problems.keys.entry(origin(row)).or_default() += 1;
        } else if seq_arrays.iter().any(|a| a.is_null(row)) {
            *problems.sequence.entry(origin(row)).or_default() += 1;
        }
    }
    columns.push(seq);
    columns.push(Arc::new(Int8Array::from(ops.values().to_vec())));
    columns.push(Arc::new(Int64Array::from(vec![now_micros; rows])));
    Ok(RecordBatch::try_new(Arc::clone(event_schema), columns)?)
}
