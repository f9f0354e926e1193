//! An AUTO CDC flow against its source schema: column checks, conditions, sequencing, the plan node.

use super::*;
use crate::ident_case::Ambiguous;

impl Resolver<'_> {
    /// An unknown column of `clause`, with the columns of `owner` (`the source`, or a
    /// table named in backquotes) and the nearest of them.
    pub(super) fn column_error(
        &mut self,
        file: FileId,
        ident: &Ident,
        clause: &str,
        available: &[String],
        owner: &str,
    ) {
        let mut help = format!("{owner} has: {}", available.join(", "));
        if let Some(near) =
            suggest::did_you_mean(&ident.value, available.iter().map(String::as_str))
        {
            help = format!("{near} {help}");
        }
        self.error(
            file,
            ident.span,
            "cdcflow::unknown_column",
            format!("unknown column `{}` in {clause}", ident.value),
            &format!("not a column of {owner}"),
            Some(help),
        );
    }

    /// Resolves `idents` against `available` (ignoring case); reports the unknown ones.
    pub(super) fn resolve_columns(
        &mut self,
        file: FileId,
        idents: &[Ident],
        clause: &str,
        available: &[String],
    ) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let mut ok = true;
        for i in idents {
            let matching: Vec<&String> = available
                .iter()
                .filter(|a| a.eq_ignore_ascii_case(&i.value))
                .collect();
            match (
                matching.iter().find(|a| ***a == i.value),
                matching.as_slice(),
            ) {
                (Some(exact), _) | (None, [exact]) => out.push((*exact).clone()),
                (None, []) => {
                    self.column_error(file, i, clause, available, "the source");
                    ok = false;
                }
                (None, several) => {
                    let a = Ambiguous {
                        name: i.value.clone(),
                        candidates: several.iter().map(|s| s.to_string()).collect(),
                        span: i.span,
                    };
                    let err = DataFusionError::External(Box::new(a));
                    self.datafusion_error(file, &err, i.span);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// The columns of `over` that `sel` selects (`*` is every one of them); the columns
    /// it names are resolved against the source's, `available`.
    pub(super) fn selection(
        &mut self,
        file: FileId,
        sel: &ColumnSelection,
        clause: &str,
        available: &[String],
        over: &[String],
    ) -> Option<Vec<String>> {
        self.resolve_columns(file, sel.named(), clause, available)?;
        Some(
            sel.select(over.iter().map(String::as_str))
                .into_iter()
                .map(str::to_string)
                .collect(),
        )
    }

    pub(super) fn plan_condition(
        &mut self,
        file: FileId,
        e: &Spanned<SqlExpr>,
        clause: &str,
        schema: &DFSchema,
        available: &[String],
    ) -> Option<datafusion::logical_expr::Expr> {
        if !self.check_identifiers(file, &e.node, clause, available) {
            return None;
        }
        let expr = match self.planner.plan_expr(&e.node, schema) {
            Ok(x) => x,
            Err(err) => {
                self.datafusion_error(file, &err, e.node.span());
                return None;
            }
        };
        match expr.get_type(schema) {
            Ok(DataType::Boolean) | Ok(DataType::Null) => Some(expr),
            Ok(t) => {
                let span = e.node.span();
                self.error(
                    file,
                    if span == Span::empty() { e.span } else { span },
                    "cdcflow::not_boolean",
                    format!("the {clause} condition is {t}, not BOOLEAN"),
                    "not a boolean",
                    Some("write a condition, e.g. operation = 'DELETE'".into()),
                );
                None
            }
            Err(err) => {
                self.datafusion_error(file, &err, e.span);
                None
            }
        }
    }

    /// Reports plain column names in `expr` that the source lacks.
    pub(super) fn check_identifiers(
        &mut self,
        file: FileId,
        expr: &SqlExpr,
        clause: &str,
        available: &[String],
    ) -> bool {
        let mut unknown = Vec::new();
        let _ = cdcflow_sql::sqlparser::ast::visit_expressions(expr, |e| {
            if let SqlExpr::Identifier(i) = e
                && !available.iter().any(|a| a.eq_ignore_ascii_case(&i.value))
                && !matches!(i.value.to_ascii_lowercase().as_str(), "true" | "false")
            {
                unknown.push(i.clone());
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        for i in &unknown {
            self.column_error(file, i, clause, available, "the source");
        }
        unknown.is_empty()
    }

    pub(super) fn sequence_fields(
        &mut self,
        file: FileId,
        seq: &Spanned<SqlExpr>,
        schema: &DFSchema,
        available: &[String],
    ) -> Option<Vec<SequenceField>> {
        if !self.check_identifiers(file, &seq.node, "SEQUENCE BY", available) {
            return None;
        }
        let items: Vec<SqlExpr> = match &seq.node {
            SqlExpr::Tuple(items) => items.clone(),
            SqlExpr::Struct { values, .. } => values.clone(),
            SqlExpr::Function(f)
                if f.name.to_string().eq_ignore_ascii_case("struct")
                    || f.name.to_string().eq_ignore_ascii_case("named_struct") =>
            {
                match &f.args {
                    cdcflow_sql::sqlparser::ast::FunctionArguments::List(l) => l
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            cdcflow_sql::sqlparser::ast::FunctionArg::Unnamed(
                                cdcflow_sql::sqlparser::ast::FunctionArgExpr::Expr(e),
                            ) => Some(e.clone()),
                            _ => None,
                        })
                        .collect(),
                    _ => vec![seq.node.clone()],
                }
            }
            SqlExpr::Nested(inner) => vec![(**inner).clone()],
            other => vec![other.clone()],
        };
        let mut fields = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let (item, alias) = match item {
                SqlExpr::Named { expr, name } => ((**expr).clone(), Some(name.value.clone())),
                other => (other.clone(), None),
            };
            let expr = match self.planner.plan_expr(&item, schema) {
                Ok(e) => e,
                Err(err) => {
                    self.datafusion_error(file, &err, item.span());
                    return None;
                }
            };
            let data_type = match expr.get_type(schema) {
                Ok(t) => t,
                Err(err) => {
                    self.datafusion_error(file, &err, item.span());
                    return None;
                }
            };
            if !orderable(&data_type) {
                self.error(
                    file,
                    item.span(),
                    "cdcflow::sequence_type",
                    format!("SEQUENCE BY values of type {data_type} cannot be ordered"),
                    "not orderable",
                    Some(
                        "sequence by a number, timestamp, date, string or a STRUCT of those".into(),
                    ),
                );
                return None;
            }
            let name = alias.unwrap_or_else(|| match &item {
                SqlExpr::Identifier(id) => available
                    .iter()
                    .find(|a| a.eq_ignore_ascii_case(&id.value))
                    .cloned()
                    .unwrap_or(id.value.clone()),
                _ => format!("seq{i}"),
            });
            fields.push(SequenceField {
                name,
                expr,
                data_type,
            });
        }
        Some(fields)
    }

    pub(super) fn plan_cdc(&mut self, f: usize) -> Option<LogicalPlan> {
        let cdc = self
            .pending_cdc
            .iter()
            .find(|(i, _)| *i == f)
            .map(|(_, c)| c.clone())?;
        let FlowKind::AutoCdc(spec) = &self.flows[f].kind else {
            return None;
        };
        let mut spec = (**spec).clone();
        let file = self.flows[f].file;
        let source_input = self.flows[f].inputs.first()?.clone();
        let source_schema = self.input_schema(&source_input).ok()?;
        let available: Vec<String> = source_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        if let Some(views) = self.snapshot_of(&self.flows[f].name).cloned() {
            return self.plan_snapshot_cdc(f, &cdc, &views, spec, &source_schema);
        }
        let df_schema =
            DFSchema::try_from_qualified_schema(bare(&spec.source), &source_schema).ok()?;
        let errors_before = self.diags.iter().filter(|d| d.is_error()).count();

        for field in source_schema.fields() {
            if field.name().starts_with(RESERVED_PREFIX) {
                self.error(
                    file,
                    cdc.source.span(),
                    "cdcflow::reserved_column",
                    format!(
                        "the source has column `{}`; the prefix {RESERVED_PREFIX} is reserved",
                        field.name()
                    ),
                    "source",
                    Some("rename the column in a view".into()),
                );
            }
        }
        let keys = self.resolve_columns(file, &cdc.keys.node, "KEYS", &available);
        let columns = match &cdc.columns {
            Some(c) => self.selection(file, &c.node, "COLUMNS", &available, &available),
            None => Some(available.clone()),
        };
        if let (Some(keys), Some(columns)) = (&keys, &columns) {
            for (k, ident) in keys.iter().zip(&cdc.keys.node) {
                if !columns.contains(k) {
                    self.error(
                        file,
                        ident.span,
                        "cdcflow::key_not_selected",
                        format!("key `{k}` is not among the COLUMNS written to the target"),
                        "key",
                        Some("the target is keyed by KEYS; keep the key columns in COLUMNS".into()),
                    );
                }
            }
            let reserved: Vec<&String> = columns
                .iter()
                .filter(|c| c.eq_ignore_ascii_case(START_AT) || c.eq_ignore_ascii_case(END_AT))
                .collect();
            if !reserved.is_empty() {
                let names: Vec<&str> = reserved.iter().map(|s| s.as_str()).collect();
                self.error(file, cdc.source.span(), "cdcflow::reserved_column", format!("the source carries the reserved column(s) {}", names.join(", ")), "source", Some("__START_AT and __END_AT are written by SCD TYPE 2; exclude them with COLUMNS * EXCEPT (__START_AT, __END_AT) or rename them in a view".into()));
            }
        }
        let sequence = self.sequence_fields(file, &cdc.sequence_by, &df_schema, &available);
        let delete_when = cdc.apply_as_delete.as_ref().and_then(|e| {
            self.plan_condition(file, e, "APPLY AS DELETE WHEN", &df_schema, &available)
        });
        let truncate_when = cdc.apply_as_truncate.as_ref().and_then(|e| {
            self.plan_condition(file, e, "APPLY AS TRUNCATE WHEN", &df_schema, &available)
        });
        let filter = cdc
            .filter
            .as_ref()
            .and_then(|e| self.plan_condition(file, e, "WHERE", &df_schema, &available));
        let out_columns = columns.clone().unwrap_or_default();
        let track_history = match &cdc.track_history {
            Some(t) => self.selection(file, &t.node, "TRACK HISTORY", &available, &out_columns),
            None => Some(out_columns.clone()),
        };
        let ignore_null_updates = match &cdc.ignore_null_updates {
            Some(Spanned {
                node: Some(sel), ..
            }) => self.selection(file, sel, "IGNORE NULL UPDATES", &available, &out_columns),
            Some(Spanned { node: None, .. }) => Some(out_columns.clone()),
            None => Some(vec![]),
        };
        if self.diags.iter().filter(|d| d.is_error()).count() > errors_before {
            return None;
        }
        let keys = keys?;
        spec.track_history = track_history?
            .into_iter()
            .filter(|c| !keys.contains(c))
            .collect();
        spec.ignore_null_updates = ignore_null_updates?
            .into_iter()
            .filter(|c| !keys.contains(c))
            .collect();
        spec.keys = keys;
        spec.columns = out_columns;
        spec.sequence = sequence?;
        spec.delete_when = delete_when;
        spec.truncate_when = truncate_when;
        spec.filter = filter;
        let spec = Arc::new(spec);
        self.flows[f].kind = FlowKind::AutoCdc(Arc::clone(&spec));

        let source = datafusion::datasource::provider_as_source(Arc::new(
            datafusion::datasource::empty::EmptyTable::new(Arc::clone(&source_schema)),
        ));
        match AutoCdcNode::plan(spec, source) {
            Ok(plan) => Some(plan),
            Err(e) => {
                self.datafusion_error(file, &e, self.flows[f].span);
                None
            }
        }
    }
}

pub(super) fn orderable(t: &DataType) -> bool {
    t.is_numeric()
        || t.is_temporal()
        || matches!(
            t,
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Boolean
                | DataType::Decimal128(..)
                | DataType::Decimal256(..)
        )
        || matches!(t, DataType::Struct(fields) if fields.iter().all(|f| orderable(f.data_type())))
}

/// A dataset's name as one table reference: `silver.orders` is one name, not a schema
/// and a table (`crate::namespace`).
fn bare(name: &str) -> datafusion::common::TableReference {
    datafusion::common::TableReference::bare(name)
}
