//! A table's physical layout: `PARTITIONED BY` (Delta partition columns) and
//! `CLUSTER BY` (the columns rows are sorted by within a write's files). Each named
//! column must be one of the table's, once; partition columns must be of a type a
//! Delta partition value can hold, and leave at least one column in the files. The two
//! clauses exclude each other, as on Databricks. Names are resolved to the schema's
//! spelling, which is what the runtime writes.

use super::*;

/// Databricks takes at most this many clustering columns.
const MAX_CLUSTER_COLUMNS: usize = 4;

impl Resolver<'_> {
    pub(super) fn check_layouts(&mut self) {
        for d in 0..self.datasets.len() {
            let def = self.datasets[d].def.clone();
            let file = self.datasets[d].file;
            if def.partitioned_by.is_empty() && def.cluster_by.is_empty() {
                continue;
            }
            if self.datasets[d].kind == DatasetKind::View {
                let first = def.partitioned_by.first().or(def.cluster_by.first());
                let span = first.map_or(def.name.span, |i| i.span);
                self.error(
                    file,
                    span,
                    "cdcflow::layout_on_view",
                    format!(
                        "view `{}` cannot be partitioned or clustered",
                        def.name.name()
                    ),
                    "a view stores no rows",
                    Some(
                        "partition or cluster the tables it reads, or make it a MATERIALIZED VIEW"
                            .into(),
                    ),
                );
                continue;
            }
            if let (Some(_), Some(cluster)) = (def.partitioned_by.first(), def.cluster_by.first()) {
                self.error(
                    file,
                    cluster.span,
                    "cdcflow::partition_and_cluster",
                    format!(
                        "`{}` has both PARTITIONED BY and CLUSTER BY",
                        def.name.name()
                    ),
                    "CLUSTER BY here",
                    Some("a table is partitioned or clustered, not both (as on Databricks): keep one of the clauses".into()),
                );
            }
            if let Some(extra) = def.cluster_by.get(MAX_CLUSTER_COLUMNS) {
                self.error(
                    file,
                    extra.span,
                    "cdcflow::cluster_columns",
                    format!(
                        "CLUSTER BY names {} columns; at most {MAX_CLUSTER_COLUMNS} may be given",
                        def.cluster_by.len()
                    ),
                    "one too many",
                    Some("cluster by the columns queries filter on most".into()),
                );
            }
            let schema = self.datasets[d].schema.clone();
            if let Some(cols) =
                self.layout_columns(d, &def.partitioned_by, "PARTITIONED BY", schema.as_ref())
            {
                self.check_partition_columns(d, &def.partitioned_by, &cols, schema.as_ref());
                self.datasets[d].partition_columns = cols;
            }
            if let Some(cols) =
                self.layout_columns(d, &def.cluster_by, "CLUSTER BY", schema.as_ref())
            {
                self.datasets[d].cluster_columns = cols;
            }
        }
    }

    /// The columns `idents` name, spelt as the schema spells them; `None` (reported)
    /// when one is unknown or named twice. Without a schema they are taken as written.
    fn layout_columns(
        &mut self,
        d: usize,
        idents: &[Ident],
        clause: &str,
        schema: Option<&SchemaRef>,
    ) -> Option<Vec<String>> {
        let (file, table) = (self.datasets[d].file, self.datasets[d].name.clone());
        let mut out: Vec<String> = Vec::new();
        let mut ok = true;
        for ident in idents {
            let name = match schema {
                None => ident.value.clone(),
                Some(s) => match s
                    .fields()
                    .iter()
                    .find(|f| f.name().eq_ignore_ascii_case(&ident.value))
                {
                    Some(f) => f.name().clone(),
                    None => {
                        let names: Vec<String> =
                            s.fields().iter().map(|f| f.name().clone()).collect();
                        self.column_error(file, ident, clause, &names, &format!("`{table}`"));
                        ok = false;
                        continue;
                    }
                },
            };
            if out.iter().any(|o| o.eq_ignore_ascii_case(&name)) {
                self.error(
                    file,
                    ident.span,
                    "cdcflow::duplicate_column",
                    format!("`{}` is named twice in {clause}", ident.value),
                    "again here",
                    None,
                );
                ok = false;
                continue;
            }
            out.push(name);
        }
        ok.then_some(out)
    }

    /// Partition columns hold one value per file, kept as text in the Delta log: a
    /// nested value cannot be one, and a file must keep at least one column.
    fn check_partition_columns(
        &mut self,
        d: usize,
        idents: &[Ident],
        cols: &[String],
        schema: Option<&SchemaRef>,
    ) {
        let Some(schema) = schema else {
            return;
        };
        let file = self.datasets[d].file;
        for (ident, col) in idents.iter().zip(cols) {
            let Ok(field) = schema.field_with_name(col) else {
                continue;
            };
            if !partition_type(field.data_type()) {
                self.error(
                    file,
                    ident.span,
                    "cdcflow::partition_type",
                    format!(
                        "`{col}` is of type {} and cannot be a partition column",
                        field.data_type()
                    ),
                    "not a scalar column",
                    Some("partition by a column of a scalar type (a string, number, date, timestamp or boolean)".into()),
                );
            }
        }
        if !cols.is_empty() && cols.len() >= schema.fields().len() {
            let last = idents.last().map_or(Span::empty(), |i| i.span);
            self.error(
                file,
                last,
                "cdcflow::partition_all_columns",
                format!("`{}` would be partitioned by every one of its columns", self.datasets[d].name),
                "the last column of the table",
                Some("a Delta data file keeps the columns that are not partition columns: leave at least one out".into()),
            );
        }
    }
}

/// Whether a Delta partition value (text in the log) can hold a value of `t`.
fn partition_type(t: &DataType) -> bool {
    !t.is_nested()
        && !matches!(
            t,
            DataType::Null
                | DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::FixedSizeBinary(_)
        )
}
