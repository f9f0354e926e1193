//! `cdcflow graph`: the pipeline's graph (`cdcflow_plan::lineage`) as text, for docs
//! and reviews: a Mermaid flowchart (GitHub renders it in Markdown), Graphviz DOT, or
//! JSON for tools. Left to right, as data goes.

use std::process::ExitCode;

use cdcflow_plan::lineage::{Lineage, NodeKind};

use crate::{GraphFormat, PipelineArgs};

pub fn run(args: &PipelineArgs, format: GraphFormat) -> ExitCode {
    let Some(pipeline) = crate::query::load(args) else {
        return ExitCode::from(1);
    };
    let lineage = Lineage::of(&pipeline);
    let text = match format {
        GraphFormat::Mermaid => mermaid(&lineage),
        GraphFormat::Dot => dot(&pipeline.config.name, &lineage),
        GraphFormat::Json => json(&pipeline.config.name, &lineage),
    };
    outln!("{}", text.trim_end());
    ExitCode::SUCCESS
}

/// Mermaid ids must be plain words: node `i` is `n{i}`.
fn mermaid(lineage: &Lineage) -> String {
    let index = |id: &str| lineage.nodes.iter().position(|n| n.id == id);
    let mut out = String::from("flowchart LR\n");
    for (i, node) in lineage.nodes.iter().enumerate() {
        let label = format!(
            "{}<br/><i>{}</i>",
            mermaid_text(&node.label),
            mermaid_text(&node.detail)
        );
        let (open, close) = match node.kind {
            NodeKind::Source => ("[(\"", "\")]"),
            NodeKind::StreamingTable => ("[\"", "\"]"),
            NodeKind::MaterializedView => ("[[\"", "\"]]"),
            NodeKind::View => ("([\"", "\"])"),
            NodeKind::Flow => ("{{\"", "\"}}"),
        };
        out.push_str(&format!("  n{i}{open}{label}{close}\n"));
    }
    for (from, to) in &lineage.edges {
        if let (Some(from), Some(to)) = (index(from), index(to)) {
            out.push_str(&format!("  n{from} --> n{to}\n"));
        }
    }
    for kind in [
        NodeKind::Source,
        NodeKind::StreamingTable,
        NodeKind::MaterializedView,
        NodeKind::View,
        NodeKind::Flow,
    ] {
        let members: Vec<String> = (0..lineage.nodes.len())
            .filter(|&i| lineage.nodes[i].kind == kind)
            .map(|i| format!("n{i}"))
            .collect();
        if !members.is_empty() {
            out.push_str(&format!("  class {} {}\n", members.join(","), kind.name()));
        }
    }
    out.push_str(
        "  classDef source fill:#f4f4f4,stroke:#888\n  classDef streaming_table fill:#e3f0ff,stroke:#3b73b9\n  classDef materialized_view fill:#e6f6e6,stroke:#3c8d3c\n  classDef view fill:#fff,stroke:#888,stroke-dasharray:4\n  classDef flow fill:#fff4e0,stroke:#c98a1b\n",
    );
    out
}

/// Mermaid's quoted label text: its own entity for a quote; `<`, `>` and `&` as HTML.
fn mermaid_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "#quot;")
}

fn dot(name: &str, lineage: &Lineage) -> String {
    let mut out = format!(
        "digraph {} {{\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=11];\n",
        dot_text(name)
    );
    for node in &lineage.nodes {
        let shape = match node.kind {
            NodeKind::Source => "cylinder",
            NodeKind::StreamingTable => "box",
            NodeKind::MaterializedView => "box3d",
            NodeKind::View => "box, style=dashed",
            NodeKind::Flow => "hexagon",
        };
        out.push_str(&format!(
            "  {} [label={}, shape={shape}];\n",
            dot_text(&node.id),
            dot_text(&format!("{}\n{}", node.label, node.detail))
        ));
    }
    for (from, to) in &lineage.edges {
        out.push_str(&format!("  {} -> {};\n", dot_text(from), dot_text(to)));
    }
    out.push_str("}\n");
    out
}

/// A DOT quoted string.
fn dot_text(text: &str) -> String {
    format!(
        "\"{}\"",
        text.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    )
}

fn json(name: &str, lineage: &Lineage) -> String {
    serde_json::to_string_pretty(&lineage.to_json(name)).unwrap_or_default()
}
