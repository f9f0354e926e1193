//! The JSON the page of `cdcflow ui` asks for. Each answer is made afresh from the
//! pipeline folder and its storage, as `validate`, `status`, `tables` and `query` make
//! theirs; an answer that cannot be made is `{"error": "…"}` (the page shows it).

use cdcflow_plan::Pipeline;
use cdcflow_plan::lineage::Lineage;
use datafusion::arrow::array::RecordBatch;
use datafusion::logical_expr::{col, lit};
use datafusion::prelude::SessionContext;
use serde_json::{Value, json};

use super::UiSource;
use crate::RunError;

/// Runs of a flow the page charts at most.
const RUNS_SHOWN: usize = 200;
/// Rows of a table the page previews.
const PREVIEW_ROWS: usize = 50;
/// Versions of a table's history the page lists.
const HISTORY_SHOWN: usize = 20;

/// The graph, and every diagnostic of `validate` with the node it is about.
pub async fn pipeline(source: &UiSource) -> Value {
    let loaded = cdcflow_plan::load(&source.root, &source.overrides);
    let Some(pipeline) = loaded.pipeline else {
        return json!({
            "pipeline": Value::Null,
            "nodes": [],
            "edges": [],
            "diagnostics": loaded.diagnostics.iter().map(|d| diagnostic(d, &Lineage::default())).collect::<Vec<_>>(),
        });
    };
    let lineage = Lineage::of(&pipeline);
    let mut out = lineage.to_json(&pipeline.config.name);
    out["diagnostics"] = loaded
        .diagnostics
        .iter()
        .map(|d| diagnostic(d, &lineage))
        .collect();
    out
}

/// A diagnostic, and the node defined nearest above its line in its file.
fn diagnostic(d: &cdcflow_plan::Diagnostic, lineage: &Lineage) -> Value {
    let at = d.at.as_ref();
    let (file, line, column) = match at {
        Some(a) => (
            Some(a.path.clone()),
            Some(a.span.start.line),
            Some(a.span.start.column),
        ),
        None => (None, None, None),
    };
    let node = at.and_then(|a| {
        lineage
            .nodes
            .iter()
            .filter(|n| n.kind != cdcflow_plan::lineage::NodeKind::Source)
            .filter_map(|n| {
                let (f, l) = n.defined_at.as_ref()?.rsplit_once(':')?;
                let l: u64 = l.parse().ok()?;
                (f == a.path && l <= a.span.start.line).then_some((l, &n.id))
            })
            .max_by_key(|(l, _)| *l)
            .map(|(_, id)| id.clone())
    });
    // The line the diagnostic points at, as `validate` shows it under the message.
    let source = at.and_then(|a| {
        let line = usize::try_from(a.span.start.line).ok()?.checked_sub(1)?;
        a.text.lines().nth(line).map(|l| redacted(l.trim_end()))
    });
    json!({
        "severity": d.severity.as_str(),
        "code": d.code,
        "message": redacted(&d.message),
        "help": d.help.as_deref().map(redacted),
        "source": source,
        "label": at.map(|a| a.label.clone()),
        "file": file,
        "line": line,
        "column": column,
        "node": node,
    })
}

fn loaded(source: &UiSource) -> Result<Pipeline, Value> {
    let loaded = cdcflow_plan::load(&source.root, &source.overrides);
    loaded.pipeline.ok_or_else(|| {
        json!({ "error": loaded.diagnostics.first().map(|d| redacted(&d.message)).unwrap_or_else(|| "the pipeline cannot be loaded".into()) })
    })
}

fn error(e: &RunError) -> Value {
    json!({ "error": redacted(&e.with_help_inline()) })
}

/// `text` without the query of any URL in it: a signed URL's query is its credential
/// (an Azure SAS `sig=`, an S3 presigned `X-Amz-Signature=`).
pub(super) fn redacted(text: &str) -> String {
    text.split(' ')
        .map(|word| match (word.find("://"), word.find('?')) {
            (Some(scheme), Some(query)) if query > scheme => format!("{}?…", &word[..query]),
            _ => word.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each flow's last run (`cdcflow status`, without asking servers) and each table's
/// rows and version (`cdcflow tables`).
pub async fn status(source: &UiSource) -> Value {
    let pipeline = match loaded(source) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let flows = match crate::status::status(&pipeline).await {
        Ok(f) => f.into_iter().map(without_urls).collect::<Vec<_>>(),
        Err(e) => return error(&e),
    };
    let tables = match crate::catalog::tables(&pipeline).await {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    json!({ "pipeline": pipeline.config.name, "flows": flows, "tables": tables })
}

/// A flow's runs from the event log, newest first.
pub async fn flow(source: &UiSource, name: &str) -> Value {
    let pipeline = match loaded(source) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let Some(flow) = pipeline.flow(name) else {
        return json!({ "error": format!("the pipeline has no flow `{name}`") });
    };
    let runs = match runs(&pipeline, &flow.name).await {
        Ok(r) => r,
        Err(e) => return error(&e),
    };
    let status = crate::status::status(&pipeline).await.ok().and_then(|all| {
        all.into_iter()
            .find(|s| s.flow.eq_ignore_ascii_case(&flow.name))
            .map(without_urls)
    });
    json!({
        "flow": flow.name,
        "target": flow.target,
        "status": status,
        "runs": runs,
    })
}

async fn runs(pipeline: &Pipeline, flow: &str) -> Result<Value, RunError> {
    let ctx = crate::catalog::session(pipeline).await?;
    if !ctx.table_exist(crate::event_log::TABLE).unwrap_or(false) {
        return Ok(json!([]));
    }
    let events = ["flow_completed", "flow_failed", "flow_up_to_date"];
    let batches = ctx
        .table(crate::event_log::TABLE)
        .await?
        .filter(
            col("flow")
                .eq(lit(flow))
                .and(col("event").in_list(events.iter().map(|e| lit(*e)).collect(), false)),
        )?
        .sort(vec![col("timestamp").sort(false, true)])?
        .limit(0, Some(RUNS_SHOWN))?
        .collect()
        .await?;
    let mut runs = rows_json(&batches)?;
    for run in runs.as_array_mut().into_iter().flatten() {
        if let Some(message) = run.get("message").and_then(Value::as_str) {
            run["message"] = Value::from(redacted(message));
        }
    }
    Ok(runs)
}

/// A flow's status with the URLs' queries left out of its messages ([`redacted`]).
fn without_urls(mut status: crate::status::FlowStatus) -> crate::status::FlowStatus {
    status.last_error = status.last_error.as_deref().map(redacted);
    status.unreadable = status.unreadable.as_deref().map(redacted);
    status
}

/// A table: what `tables` says of it, its columns, its recent history and its first rows.
pub async fn table(source: &UiSource, name: &str) -> Value {
    let pipeline = match loaded(source) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let tables = match crate::catalog::tables(&pipeline).await {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    let Some(info) = tables
        .into_iter()
        .find(|t| t.name.eq_ignore_ascii_case(name))
    else {
        return json!({ "error": format!("the pipeline stores no table `{name}`") });
    };
    if let Some(e) = &info.error {
        return json!({ "table": info, "created": true, "error": redacted(e) });
    }
    if info.rows.is_none() {
        return json!({ "table": info, "created": false });
    }
    match table_detail(&pipeline, &info.name).await {
        Ok((columns, history, preview)) => json!({
            "table": info,
            "created": true,
            "columns": columns,
            "history": history,
            "preview": preview,
        }),
        Err(e) => {
            json!({ "table": info, "created": true, "error": redacted(&e.with_help_inline()) })
        }
    }
}

async fn table_detail(pipeline: &Pipeline, name: &str) -> Result<(Value, Value, Value), RunError> {
    let ctx: SessionContext = crate::catalog::session(pipeline).await?;
    let df = ctx.table(crate::catalog::reference(name)).await?;
    let columns: Vec<Value> = df
        .schema()
        .fields()
        .iter()
        .map(|f| json!({ "name": f.name(), "type": cdcflow_plan::types::sql_type(f.data_type()), "nullable": f.is_nullable() }))
        .collect();
    let preview = rows_json(&df.limit(0, Some(PREVIEW_ROWS))?.collect().await?)?;
    let history = crate::describe::answer(
        pipeline,
        &crate::describe::Describe::History {
            table: name.to_string(),
            limit: Some(HISTORY_SHOWN),
        },
    )
    .await?;
    Ok((json!(columns), rows_json(&[history])?, preview))
}

/// Rows as JSON objects (NULL as null; timestamps as ISO 8601 text).
fn rows_json(batches: &[RecordBatch]) -> Result<Value, RunError> {
    let mut out = Vec::new();
    {
        let mut writer = datafusion::arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, datafusion::arrow::json::writer::JsonArray>(&mut out);
        for b in batches {
            writer
                .write(b)
                .map_err(|e| RunError::input(format!("cannot show rows as JSON: {e}")))?;
        }
        writer
            .finish()
            .map_err(|e| RunError::input(format!("cannot show rows as JSON: {e}")))?;
    }
    if out.is_empty() {
        return Ok(json!([]));
    }
    serde_json::from_slice(&out)
        .map_err(|e| RunError::input(format!("cannot show rows as JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_query_is_left_out() {
        assert_eq!(
            redacted("cannot read `az://c/p?sv=1&sig=SECRET` now"),
            "cannot read `az://c/p?… now"
        );
        assert_eq!(redacted("why? no url"), "why? no url");
    }
}
