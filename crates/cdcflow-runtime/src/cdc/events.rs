//! Source rows → change events: the flow's expressions (WHERE, COLUMNS, SEQUENCE BY,
//! APPLY AS DELETE/TRUNCATE WHEN) evaluated by DataFusion, then checked for the rows
//! the apply cannot take (null keys, null sequence values).

use std::collections::BTreeMap;
use std::sync::Arc;

use cdcflow_plan::autocdc::AutoCdcSpec;
use cdcflow_plan::planner::session_config;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int8Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Int8Type, Schema, SchemaRef};
use datafusion::common::{Column, TableReference};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, lit, when};
use datafusion::prelude::SessionContext;

use super::kernel::{Op, Rules};
use crate::RunError;

/// The column that carries where a source row came from, for error messages.
const ORIGIN: &str = "__cdcflow_origin";

/// Source rows, each batch with the name of what it was read from.
pub type Sourced = Vec<(String, RecordBatch)>;

/// Evaluates the flow over `rows` (of `source` schema) into events of
/// [`Rules::event_schema`], recorded at `now_micros`.
pub async fn to_events(
    spec: &AutoCdcSpec,
    rules: &Rules,
    source: &SchemaRef,
    rows: Sourced,
    now_micros: i64,
) -> Result<RecordBatch, RunError> {
    let event_schema = rules.event_schema();
    if rows.iter().all(|(_, b)| b.num_rows() == 0) {
        return Ok(RecordBatch::new_empty(event_schema));
    }
    let mut fields: Vec<Field> = source.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(ORIGIN, DataType::Utf8, false));
    let with_origin: SchemaRef = Arc::new(Schema::new(fields));
    let batches = rows
        .into_iter()
        .map(|(origin, b)| {
            let mut columns = b.columns().to_vec();
            columns.push(Arc::new(StringArray::from(vec![origin; b.num_rows()])));
            RecordBatch::try_new(Arc::clone(&with_origin), columns)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ctx = SessionContext::new_with_config(session_config());
    let table = TableReference::bare(spec.source.as_str());
    ctx.register_table(
        table.clone(),
        Arc::new(MemTable::try_new(with_origin, vec![batches])?),
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
    let out = df.select(exprs)?.collect().await?;

    let mut problems = NullRows::default();
    let mut events = Vec::with_capacity(out.len());
    for batch in &out {
        events.push(to_state_row(
            spec,
            rules,
            &event_schema,
            batch,
            now_micros,
            &mut problems,
        )?);
    }
    problems.check(spec)?;
    Ok(datafusion::arrow::compute::concat_batches(
        &event_schema,
        &events,
    )?)
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
            return Err(RunError::input(format!(
                "{n} row(s) of `{}` with a null key ({}): {places}; nothing was applied",
                spec.source,
                spec.keys.join(", ")
            ))
            .with_help("KEYS columns must not be null; filter such rows out before the flow or fix the source"));
        }
        if !self.sequence.is_empty() {
            let (n, places) = describe(&self.sequence);
            let seq: Vec<String> = spec.sequence.iter().map(|f| f.name.clone()).collect();
            return Err(RunError::input(format!(
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
    let origins = batch.column(n_cols + n_seq + 1).as_string::<i32>();
    for row in 0..rows {
        let truncate = ops.value(row) == Op::Truncate as i8;
        if !truncate && rules.keys.iter().any(|&k| columns[k].is_null(row)) {
            *problems
                .keys
                .entry(origins.value(row).to_string())
                .or_default() += 1;
        } else if seq_arrays.iter().any(|a| a.is_null(row)) {
            *problems
                .sequence
                .entry(origins.value(row).to_string())
                .or_default() += 1;
        }
    }
    columns.push(seq);
    columns.push(Arc::new(Int8Array::from(ops.values().to_vec())));
    columns.push(Arc::new(Int64Array::from(vec![now_micros; rows])));
    Ok(RecordBatch::try_new(Arc::clone(event_schema), columns)?)
}
