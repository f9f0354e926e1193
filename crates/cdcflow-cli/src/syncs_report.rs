//! What `cdcflow validate` says of each sync: the tables it expanded to, with their
//! keys and the pipeline tables each becomes, and the tables it leaves out and why.

use cdcflow_plan::Pipeline;
use cdcflow_plan::syncs::SyncedTable;

/// Lines for a terminal, one block per sync.
pub fn lines(pipeline: &Pipeline) -> Vec<String> {
    let mut out = vec![];
    for sync in &pipeline.syncs {
        let head = format!(
            "sync `{}` ({} connection `{}`)",
            sync.name,
            sync.kind.as_str(),
            sync.connection
        );
        let Some(tables) = &sync.tables else {
            out.push(format!(
                "{head}: its tables are known once the server is asked"
            ));
            continue;
        };
        out.push(format!("{head}: {} table(s)", tables.len()));
        let width = tables
            .iter()
            .map(|t| t.source.to_string().chars().count())
            .max()
            .unwrap_or(0);
        for t in tables {
            out.push(format!(
                "  {:width$}  keys ({})  → {}",
                t.source.to_string(),
                t.keys.join(", "),
                becomes(t)
            ));
        }
        for (table, why) in &sync.skipped {
            out.push(format!("  {:width$}  not synced: {why}", table.to_string()));
        }
    }
    out
}

/// `orders_changes → orders (SCD 1), orders_history (SCD 2)`.
fn becomes(t: &SyncedTable) -> String {
    let targets: Vec<String> = [(&t.current, 1), (&t.history, 2)]
        .into_iter()
        .filter_map(|(name, scd)| name.as_ref().map(|n| format!("{n} (SCD {scd})")))
        .collect();
    format!("{} → {}", t.bronze, targets.join(", "))
}
