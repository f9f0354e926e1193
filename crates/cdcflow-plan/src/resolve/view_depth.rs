//! How deep views may nest. A view is not stored: a flow that reads it plans the view's
//! query inline, and so the views that query reads, down to stored tables. DataFusion
//! walks such a plan recursively, so a long enough chain of views exhausts the stack of a
//! run; the chain is refused here, at the view that goes past the limit, instead.

use super::*;

/// The deepest chain of views a flow may read through: 100, Spark's default for
/// `spark.sql.view.maxNestedViewDepth`.
const MAX_VIEW_DEPTH: usize = 100;

impl Resolver<'_> {
    /// Reports each view that reads through more than [`MAX_VIEW_DEPTH`] views (itself
    /// included). `order` lists datasets with their inputs first; a longer chain is
    /// reported once, at the view where it passes the limit.
    pub(super) fn check_view_depth(&mut self, order: &[usize]) {
        let mut depth = vec![0usize; self.datasets.len()];
        for &d in order {
            if self.datasets[d].kind != DatasetKind::View {
                continue;
            }
            let name = &self.datasets[d].name;
            let deepest_input = self
                .flows
                .iter()
                .filter(|f| f.target.eq_ignore_ascii_case(name))
                .flat_map(|f| &f.inputs)
                .filter_map(|i| match i {
                    Input::Dataset { name, .. } => self.dataset_index(name),
                    Input::Files(_)
                    | Input::Delta(_)
                    | Input::Postgres(_)
                    | Input::Mysql(_)
                    | Input::Query(_)
                    | Input::Kafka(_) => None,
                })
                .map(|i| depth[i])
                .max()
                .unwrap_or(0);
            depth[d] = deepest_input + 1;
            if depth[d] == MAX_VIEW_DEPTH + 1 {
                let (file, span) = (self.datasets[d].file, self.datasets[d].def.name.span);
                let message = format!(
                    "view `{name}` ends a chain of {} views reading each other; at most {MAX_VIEW_DEPTH} may",
                    depth[d]
                );
                self.error(
                    file,
                    span,
                    "cdcflow::view_depth",
                    message,
                    "one view too deep",
                    Some(format!(
                        "a flow plans the views it reads inline, {MAX_VIEW_DEPTH} deep at most; store an intermediate step as a MATERIALIZED VIEW to start a new chain"
                    )),
                );
            }
        }
    }
}
