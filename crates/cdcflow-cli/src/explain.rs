//! `cdcflow explain`: the DataFusion plan of each flow.

use std::process::ExitCode;

use crate::PipelineArgs;
use crate::validate::print_text;

pub fn run(args: &PipelineArgs, only: Option<&str>) -> ExitCode {
    let loaded = cdcflow_plan::load(&args.dir, &args.overrides());
    if loaded.has_errors() {
        print_text(&loaded.diagnostics);
        return ExitCode::from(1);
    }
    let Some(pipeline) = &loaded.pipeline else {
        return ExitCode::from(1);
    };
    if let Some(name) = only
        && pipeline.flow(name).is_none()
    {
        let known: Vec<&str> = pipeline.flows.iter().map(|f| f.name.as_str()).collect();
        errln!(
            "error: no flow `{name}`; the pipeline has: {}",
            known.join(", ")
        );
        return ExitCode::from(2);
    }
    for &i in &pipeline.order {
        let flow = &pipeline.flows[i];
        if only.is_some_and(|n| !flow.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        let file = &pipeline.files[flow.file];
        let kind = match &flow.kind {
            cdcflow_plan::FlowKind::AutoCdc(_) => "auto cdc",
            cdcflow_plan::FlowKind::Query { append: true, .. } => "append",
            cdcflow_plan::FlowKind::Query { append: false, .. } => "query",
        };
        outln!(
            "flow {} ({kind}) -> {}  [{}:{}]",
            flow.name,
            flow.target,
            file.path,
            file.pre.original(flow.span.start).line
        );
        match &flow.plan {
            Some(plan) => outln!("{}", plan.display_indent()),
            None => outln!("  (not planned: input schema unknown until landing files exist)"),
        }
        outln!();
    }
    ExitCode::SUCCESS
}
