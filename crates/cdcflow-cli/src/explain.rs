//! `cdcflow explain`: the DataFusion plan of each flow; with `--physical`, the physical
//! plan it runs for its next batch, and with `--analyze` that plan's metrics after
//! running it (nothing is committed).

use std::process::ExitCode;

use crate::PipelineArgs;
use crate::validate::print_text;

pub fn run(
    args: &PipelineArgs,
    only: Option<&str>,
    physical: bool,
    analyze: bool,
    workers: Option<&str>,
) -> ExitCode {
    let cluster = match workers.map(cdcflow_runtime::cluster::Cluster::parse) {
        None => None,
        Some(Ok(cluster)) => Some(cluster),
        Some(Err(e)) => {
            errln!("error: --workers: {e}");
            return ExitCode::from(crate::usage::EXIT);
        }
    };
    // A pipeline with syncs is explained as the next run would plan it, with what
    // the servers say; without them, as the last run found its tables.
    let loaded = crate::validate::load_recorded(args);
    let has_syncs = loaded
        .pipeline
        .as_ref()
        .is_some_and(|p| !p.syncs.is_empty());
    let loaded = match has_syncs {
        true => crate::runtime()
            .block_on(crate::run::load_discovering(args))
            .map(|(l, _)| l)
            .unwrap_or(loaded),
        false => loaded,
    };
    if loaded.has_errors() {
        print_text(&loaded.diagnostics);
        return ExitCode::from(1);
    }
    let Some(pipeline) = &loaded.pipeline else {
        return ExitCode::from(1);
    };
    let only_flow: Vec<String> = only.iter().map(|n| n.to_string()).collect();
    if !crate::usage::flows_exist(pipeline, &only_flow) {
        return ExitCode::from(crate::usage::EXIT);
    }
    let cwd = std::env::current_dir().ok();
    let mut failed = false;
    for &i in &pipeline.order {
        let flow = &pipeline.flows[i];
        if only.is_some_and(|n| !flow.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        let file = &pipeline.files[flow.file];
        let source_of = pipeline
            .dataset(&flow.target)
            .and_then(|d| d.source_of.as_deref());
        let kind = match (&flow.kind, source_of) {
            (cdcflow_plan::FlowKind::AutoCdc(_), _) => "auto cdc".to_string(),
            (_, Some(cdc)) => format!("the FROM query of {cdc}"),
            (cdcflow_plan::FlowKind::Query { append: true, .. }, _) => "append".to_string(),
            (cdcflow_plan::FlowKind::Query { append: false, .. }, _) => "query".to_string(),
        };
        outln!(
            "flow {} ({kind}) -> {}  [{}:{}]",
            flow.name,
            flow.target,
            crate::validate::shown_path(&args.dir, &file.path, cwd.as_deref()),
            file.pre.original(flow.span.start).line
        );
        match &flow.plan {
            Some(plan) => outln!("{}", plan.display_indent()),
            None => outln!("  (not planned: input schema unknown until landing files exist)"),
        }
        if physical && flow.plan.is_some() {
            let shown = crate::runtime().block_on(cdcflow_runtime::explain::physical_plan(
                pipeline,
                flow,
                analyze,
                cluster.clone(),
            ));
            match shown {
                Ok(text) => {
                    outln!(
                        "physical plan{}:",
                        if analyze {
                            ", run over the next batch's input"
                        } else {
                            ""
                        }
                    );
                    outln!("{}", text.trim_end());
                }
                Err(e) => {
                    crate::run_error::print(&e);
                    failed = true;
                }
            }
        }
        outln!();
    }
    if failed {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
