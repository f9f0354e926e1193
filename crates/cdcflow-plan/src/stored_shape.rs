//! What an AUTO CDC target's stored state was built with: its keys, its sequencing and
//! its SCD type, recorded beside the flow's checkpoint (`shape.json`) by each batch. A
//! flow whose definition changes any of them cannot go on applying into that state.
//! `cdcflow validate` says so at the flow (a warning: the pipeline is right, its
//! storage is out of date), and a run refuses the flow unless its target is fully
//! refreshed.

use std::path::{Path, PathBuf};

use crate::autocdc::AutoCdcSpec;
use crate::names::folder_name;

/// The file in a flow's checkpoint folder that records its target's shape.
pub const FILE: &str = "shape.json";

/// What a target's state depends on: a change to any of it needs a full refresh.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub keys: Vec<String>,
    pub sequence: Vec<String>,
    pub scd_type: u8,
}

impl Shape {
    pub fn of(spec: &AutoCdcSpec) -> Self {
        Self {
            keys: spec.keys.iter().map(|k| k.to_lowercase()).collect(),
            sequence: spec
                .sequence
                .iter()
                .map(|f| format!("{} {}", f.name.to_lowercase(), f.data_type))
                .collect(),
            scd_type: spec.scd_type,
        }
    }

    /// The shape recorded at `path`; `None` when there is none, or none that can be
    /// read (a version before the record wrote none: nothing to compare with).
    pub fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// How this shape differs from `built`, one clause each (`KEYS (a) -> (b)`); empty
    /// when it does not.
    pub fn changes_from(&self, built: &Shape) -> Vec<String> {
        let mut changes = Vec::new();
        if built.keys != self.keys {
            changes.push(format!(
                "KEYS ({}) -> ({})",
                built.keys.join(", "),
                self.keys.join(", ")
            ));
        }
        if built.sequence != self.sequence {
            changes.push(format!(
                "SEQUENCE BY ({}) -> ({})",
                built.sequence.join(", "),
                self.sequence.join(", ")
            ));
        }
        if built.scd_type != self.scd_type {
            changes.push(format!("SCD TYPE {} -> {}", built.scd_type, self.scd_type));
        }
        changes
    }
}

/// What is wrong when `target`'s state was built with other `changes`.
pub fn message(target: &str, changes: &[String]) -> String {
    format!(
        "`{target}` was built with other {}; its state cannot follow the change",
        changes.join(", ")
    )
}

/// What to do about it.
pub fn help(target: &str) -> String {
    format!("run `cdcflow run --full-refresh {target}` to rebuild it from its sources")
}

/// Where the shape of `flow`'s target is recorded under `storage`: in the flow's
/// checkpoint folder (`cdcflow_runtime::layout::checkpoint_dir`, which a test holds to
/// the same folder).
pub fn path(storage: &Path, flow: &str) -> PathBuf {
    storage
        .join("checkpoints")
        .join(folder_name(flow))
        .join(FILE)
}
