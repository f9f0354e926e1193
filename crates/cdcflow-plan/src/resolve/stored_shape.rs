//! An AUTO CDC flow whose keys, sequencing or SCD type differ from those its target's
//! stored state was built with (`crate::stored_shape`): the next run refuses it unless
//! the target is fully refreshed, so it is said here first, at the flow. Without a
//! storage folder (validation in CI) there is nothing to compare with.

use super::*;
use crate::stored_shape::{self, Shape};

impl Resolver<'_> {
    pub(super) fn check_stored_shapes(&mut self, storage: &Path) {
        if !storage.is_dir() {
            return;
        }
        for f in 0..self.flows.len() {
            let flow = &self.flows[f];
            // Without its plan, a flow's sequence types are not known.
            let (Some(spec), Some(_)) = (flow.auto_cdc(), &flow.plan) else {
                continue;
            };
            let Some(built) = Shape::read(&stored_shape::path(storage, &flow.name)) else {
                continue;
            };
            let changes = Shape::of(spec).changes_from(&built);
            if changes.is_empty() {
                continue;
            }
            let target = spec.target.clone();
            let located = self.locate(
                flow.file,
                flow.span,
                "its target's state was built otherwise",
            );
            self.diags.push(
                Diagnostic::warning(
                    "cdcflow::stored_shape_changed",
                    stored_shape::message(&target, &changes),
                )
                .at(located)
                .help(format!(
                    "the next run refuses this flow; {}",
                    stored_shape::help(&target)
                )),
            );
        }
    }
}
