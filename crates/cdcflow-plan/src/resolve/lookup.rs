//! Finding the dataset a name written in a file means (`crate::namespace`): datasets
//! are named by catalog, schema and name, a reference takes the defaults in effect
//! where it is written, and each dataset is then known by its short name.

use super::*;
use crate::namespace::short_names;

/// The datasets a reference may mean.
#[derive(Debug)]
pub(super) enum Found {
    None,
    One(usize),
    /// Several, none named exactly so: the reference must say which.
    Many(Vec<usize>),
}

impl Found {
    pub(super) fn one(&self) -> Option<usize> {
        match self {
            Found::One(i) => Some(*i),
            _ => None,
        }
    }
}

impl Resolver<'_> {
    /// The dataset `parts` (as written, `LIVE` included) names where `namespace` holds.
    /// Of several a reference matches, the one it names exactly (every part the same
    /// or unknown on both sides) is the one meant.
    pub(super) fn find_dataset(&self, parts: &[&str], namespace: &Namespace) -> Found {
        let wanted = namespace.identity(parts);
        let matching: Vec<usize> = (0..self.datasets.len())
            .filter(|&d| self.datasets[d].source_of.is_none())
            .filter(|&d| wanted.matches(&self.datasets[d].identity))
            .collect();
        match matching.as_slice() {
            [] => Found::None,
            [one] => Found::One(*one),
            _ => match matching
                .iter()
                .filter(|&&d| wanted.same(&self.datasets[d].identity))
                .collect::<Vec<_>>()
                .as_slice()
            {
                [exact] => Found::One(**exact),
                _ => Found::Many(matching),
            },
        }
    }

    pub(super) fn ambiguous_dataset(
        &mut self,
        file: FileId,
        span: Span,
        written: &str,
        found: &Found,
    ) {
        let Found::Many(candidates) = found else {
            return;
        };
        let names: Vec<String> = candidates
            .iter()
            .map(|&d| format!("`{}`", self.datasets[d].identity))
            .collect();
        self.error(
            file,
            span,
            "cdcflow::ambiguous_dataset",
            format!("`{written}` may name {}", names.join(" or ")),
            "ambiguous",
            Some("qualify the name (schema.name or catalog.schema.name), or set the default catalog and schema with `catalog:` and `schema:` in pipeline.yaml or USE CATALOG / USE SCHEMA".into()),
        );
    }

    /// Names each dataset by its short name and indexes them so.
    pub(super) fn assign_names(&mut self) {
        let identities: Vec<_> = self.datasets.iter().map(|d| d.identity.clone()).collect();
        self.by_name.clear();
        for (d, name) in short_names(&identities).into_iter().enumerate() {
            // Each part was checked; together they must still fit one folder name.
            if name != self.datasets[d].identity.name
                && let Some(problem @ crate::names::NameProblem::TooLong(_)) =
                    crate::names::problem(&name)
            {
                let (file, span) = (self.datasets[d].file, self.datasets[d].def.name.span);
                self.error(
                    file,
                    span,
                    "cdcflow::invalid_name",
                    format!("dataset name `{name}` {problem}"),
                    "not usable as a folder name",
                    Some("the dataset is stored in a folder named by the parts that tell it apart from the pipeline's other datasets; shorten them".into()),
                );
            }
            self.by_name.insert(name.to_ascii_lowercase(), d);
            self.datasets[d].name = name;
        }
    }

    /// Names the flows named after a dataset: a defining query is the dataset's flow, and
    /// `APPLY CHANGES` is named after its target (`_2`, `_3`, … after the first).
    pub(super) fn name_flows(&self, pending: &mut [PendingFlow]) {
        for p in 0..pending.len() {
            if !pending[p].name.is_empty() {
                continue;
            }
            if let Some(d) = pending[p].implicit {
                pending[p].name = self.datasets[d].name.clone();
                continue;
            }
            let target = &pending[p].target;
            let base = match self
                .find_dataset(&ident_list(&target.parts), &pending[p].namespace)
                .one()
            {
                Some(d) => self.datasets[d].name.clone(),
                None => target.name().to_string(),
            };
            let mut name = base.clone();
            let mut n = 1;
            while pending[..p]
                .iter()
                .any(|q| q.name.eq_ignore_ascii_case(&name))
            {
                n += 1;
                name = format!("{base}_{n}");
            }
            pending[p].name = name;
        }
    }

    /// A dataset known by more parts than its last (`silver.orders`, since another's name
    /// ends in `orders` too) is stored in a folder of that name; a table left in the
    /// folder of its last part, which no dataset now uses, is likely its own from before
    /// the other was added: said, so that it is moved rather than silently rebuilt.
    pub(super) fn check_moved_folders(&mut self, storage: &Path) {
        for d in 0..self.datasets.len() {
            let dataset = &self.datasets[d];
            let last = &dataset.identity.name;
            if dataset.kind == DatasetKind::View
                || dataset.source_of.is_some()
                || dataset.name.eq_ignore_ascii_case(last)
                || self.dataset_index(last).is_some()
            {
                continue;
            }
            let area = if dataset.def.private {
                "private"
            } else {
                "tables"
            };
            let old = storage.join(area).join(last);
            if !crate::delta_schema::has_commits(&old) {
                continue;
            }
            let (file, span, name) = (dataset.file, dataset.def.name.span, dataset.name.clone());
            let located = self.locate(file, span, "stored under a new name");
            self.diags.push(
                Diagnostic::warning(
                    "cdcflow::moved_storage",
                    format!("`{name}` is stored in {area}/{name}, and {area}/{last} holds a table no dataset uses now"),
                )
                .at(located)
                .help(format!("another dataset's name ends in `{last}` too, so this one is known by more of its name; if {area}/{last} is its table from before, move it (and state/{last}, if there is one) to {area}/{name} and state/{name} while no run is going, or the next run builds it afresh")),
            );
        }
    }
}
