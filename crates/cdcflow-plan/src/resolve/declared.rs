//! A table's declared columns (`CREATE STREAMING TABLE t (id BIGINT NOT NULL, …)`) are
//! what it stores. A query flow's columns are matched to them by name (any case) and
//! cast at write (`crates/cdcflow-runtime/src/declared.rs`), so here each must be
//! declared, of a type that converts, and a NOT NULL column must be given. An AUTO CDC
//! target's rows are made by the flow itself, so its declared columns must be exactly
//! the flow's, of the same types (SCD type 2's `__START_AT`/`__END_AT` of the SEQUENCE
//! BY type, as dbdemos declares them).

use datafusion::arrow::compute::can_cast_types;

use super::*;

impl Resolver<'_> {
    pub(super) fn check_declared_columns(&mut self) {
        for d in 0..self.datasets.len() {
            if self.datasets[d].def.columns.is_empty() {
                continue;
            }
            let Some(declared) = self.datasets[d].schema.clone() else {
                continue;
            };
            let name = self.datasets[d].name.clone();
            let writers = self.flows_into(&name);
            for f in writers {
                let Some(given) = self.flows[f].rows_schema().map(|s| Arc::clone(s.inner())) else {
                    continue;
                };
                let exact = self.flows[f].auto_cdc().is_some();
                self.check_flow_columns(d, f, &declared, &given, exact);
            }
        }
    }

    fn check_flow_columns(
        &mut self,
        d: usize,
        f: usize,
        declared: &SchemaRef,
        given: &SchemaRef,
        exact: bool,
    ) {
        let (file, span, flow) = (
            self.flows[f].file,
            self.flows[f].span,
            self.flows[f].name.clone(),
        );
        let table = self.datasets[d].name.clone();
        let declared_names: Vec<&str> = declared
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        for field in given.fields() {
            let Some(target) = declared
                .fields()
                .iter()
                .find(|t| t.name().eq_ignore_ascii_case(field.name()))
            else {
                self.error(
                    file,
                    span,
                    "cdcflow::undeclared_column",
                    format!("flow `{flow}` gives column `{}`, which `{table}` does not declare", field.name()),
                    "this flow",
                    Some(format!("`{table}` declares {}: declare the column too, or leave it out of the query", declared_names.join(", "))),
                );
                continue;
            };
            let fits = match exact {
                true => target.data_type() == field.data_type(),
                false => can_cast_types(field.data_type(), target.data_type()),
            };
            if !fits {
                let help = match exact {
                    true => format!(
                        "an AUTO CDC target stores what its flow makes: declare `{}` as {}",
                        target.name(),
                        field.data_type()
                    ),
                    false => format!(
                        "declare `{}` as a type {} converts to, or cast it in the query",
                        target.name(),
                        field.data_type()
                    ),
                };
                self.error(
                    file,
                    span,
                    "cdcflow::declared_type",
                    format!(
                        "flow `{flow}` gives column `{}` as {}, but `{table}` declares it {}",
                        field.name(),
                        field.data_type(),
                        target.data_type()
                    ),
                    "this flow",
                    Some(help),
                );
            }
        }
        let columns = self.datasets[d].def.columns.clone();
        for column in &columns {
            let made_on_write = column.identity.is_some() || column.generated.is_some();
            let given_here = given
                .fields()
                .iter()
                .any(|g| g.name().eq_ignore_ascii_case(&column.name.value));
            if given_here || made_on_write || (!exact && !column.not_null) {
                continue;
            }
            self.error(
                file,
                column.name.span,
                "cdcflow::missing_column",
                format!("`{table}` declares column `{}`, which flow `{flow}` does not give", column.name.value),
                "declared here",
                Some(match exact {
                    true => "an AUTO CDC target's columns are its flow's: remove the column, or make the flow carry it".into(),
                    false => "a NOT NULL column needs a value in every row: give it in the query, or drop NOT NULL".into(),
                }),
            );
        }
    }
}
