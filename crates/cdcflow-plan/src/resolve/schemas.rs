//! Schemas in dependency order, and the DataFusion plan of each flow.

use super::*;

impl Resolver<'_> {
    // ---- schemas and plans ---------------------------------------------------------

    pub(super) fn derive_schemas(&mut self, order: &[usize]) {
        for &d in order {
            let declared = self.declared_schema(d);
            let name = self.datasets[d].name.clone();
            let flows = self.flows_into(&name);
            let mut derived: Option<(usize, SchemaRef)> = None;
            for f in flows {
                let Some(schema) = self.plan_flow(f) else {
                    continue;
                };
                match &derived {
                    None => derived = Some((f, schema)),
                    Some((first, first_schema)) => {
                        let (first, first_schema) = (*first, Arc::clone(first_schema));
                        self.check_cdc_flows_agree(first, &first_schema, f, &schema);
                    }
                }
            }
            let schema = declared.or(derived.map(|(_, s)| s));
            if let Some(s) = &schema {
                self.planner.register_schema(&name, Arc::clone(s));
            }
            self.datasets[d].schema = schema;
        }
    }

    /// AUTO CDC flows into one target share its state, so they must agree on the
    /// target's columns, keys and SCD type.
    fn check_cdc_flows_agree(&mut self, first: usize, a: &SchemaRef, second: usize, b: &SchemaRef) {
        let (Some(x), Some(y)) = (self.flows[first].auto_cdc(), self.flows[second].auto_cdc())
        else {
            return;
        };
        // A snapshot flow shares its target with no flow (`check_snapshot_targets`).
        if x.snapshot.is_some() || y.snapshot.is_some() {
            return;
        }
        let shape = |s: &SchemaRef| -> Vec<(String, DataType)> {
            s.fields()
                .iter()
                .map(|f| (f.name().to_lowercase(), f.data_type().clone()))
                .collect()
        };
        let keys = |k: &[String]| -> Vec<String> { k.iter().map(|s| s.to_lowercase()).collect() };
        let mut differences = Vec::new();
        if keys(&x.keys) != keys(&y.keys) {
            differences.push(format!(
                "KEYS ({}) vs ({})",
                x.keys.join(", "),
                y.keys.join(", ")
            ));
        }
        if x.scd_type != y.scd_type {
            differences.push(format!("SCD TYPE {} vs {}", x.scd_type, y.scd_type));
        }
        if shape(a) != shape(b) {
            let cols = |s: &SchemaRef| -> String {
                s.fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            differences.push(format!("columns ({}) vs ({})", cols(a), cols(b)));
        }
        if differences.is_empty() {
            return;
        }
        let (file, span) = (self.flows[second].file, self.flows[second].span);
        let message = format!(
            "AUTO CDC flows `{}` and `{}` into `{}` disagree: {}",
            self.flows[first].name,
            self.flows[second].name,
            self.flows[second].target,
            differences.join("; ")
        );
        self.error(file, span, "cdcflow::cdc_flows_disagree", message, "this flow", Some("flows into one target share its state: give them the same KEYS, STORED AS and COLUMNS (select or cast in a view when the sources differ)".into()));
    }

    pub(super) fn declared_schema(&mut self, d: usize) -> Option<SchemaRef> {
        let def = &self.datasets[d].def;
        if def.columns.is_empty() {
            return None;
        }
        let file = self.datasets[d].file;
        let mut fields = Vec::new();
        let mut errors = Vec::new();
        for c in &def.columns {
            match arrow_type(&c.data_type) {
                Ok(t) => fields.push(Field::new(&c.name.value, t, !c.not_null)),
                Err(e) => errors.push((c.span, e)),
            }
        }
        for (span, e) in errors {
            self.error(file, span, "cdcflow::type", e, "type", Some("supported: STRING, BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, BOOLEAN, DATE, TIMESTAMP, TIMESTAMP_NTZ, DECIMAL(p,s), BINARY, ARRAY<…>, STRUCT<…>, MAP<…>".into()));
        }
        Some(Arc::new(Schema::new(fields)))
    }

    pub(super) fn input_schema(&mut self, input: &Input) -> Result<SchemaRef, String> {
        match input {
            Input::Dataset { name, .. } => {
                let d = self.dataset_index(name).ok_or_else(|| name.clone())?;
                self.datasets[d]
                    .schema
                    .clone()
                    .ok_or_else(|| format!("the schema of `{name}` is not known"))
            }
            Input::Delta(d) => Ok(Arc::clone(&d.schema)),
            Input::Files(rf) => {
                if let Some(s) = self.file_schemas.get(&rf.table) {
                    return s
                        .clone()
                        .ok_or_else(|| format!("no schema for {}", rf.path_text));
                }
                let s = match rf.schema() {
                    Ok(s) => s,
                    Err(e) => {
                        return Err(format!("cannot infer the schema of {}: {e}", rf.path_text));
                    }
                };
                self.file_schemas.insert(rf.table.clone(), s.clone());
                if let Some(s) = &s {
                    let read = match rf.metadata {
                        true => crate::file_metadata::with_column(s),
                        false => Arc::clone(s),
                    };
                    self.planner.register_schema(&rf.table, read);
                }
                s.ok_or_else(|| {
                    format!(
                        "`{}` has no schema => and no landing files yet",
                        rf.path_text
                    )
                })
            }
            Input::Postgres(rp) => {
                let s = rp.schema().ok_or_else(|| {
                    format!(
                        "the columns of PostgreSQL table `{}` are known only at run time (declare them with schema => '…' to have them checked now)",
                        rp.source
                    )
                })?;
                self.planner.register_schema(&rp.table, Arc::clone(&s));
                Ok(s)
            }
            Input::Mysql(rm) => {
                let s = rm.schema().ok_or_else(|| {
                    format!(
                        "the columns of MySQL table `{}` are known only at run time (declare them with schema => '…' to have them checked now)",
                        rm.source
                    )
                })?;
                self.planner.register_schema(&rm.table, Arc::clone(&s));
                Ok(s)
            }
            Input::Query(rq) => {
                let s = rq.schema().ok_or_else(|| {
                    "the columns of a read_query are known only at run time (declare them with schema => '…' to have them checked now)".to_string()
                })?;
                self.planner.register_schema(&rq.table, Arc::clone(&s));
                Ok(s)
            }
            Input::Kafka(rk) => {
                let s = rk.schema();
                self.planner.register_schema(&rk.table, Arc::clone(&s));
                Ok(s)
            }
        }
    }

    /// Plans flow `f`; returns its output schema when every input schema is known.
    pub(super) fn plan_flow(&mut self, f: usize) -> Option<SchemaRef> {
        if self.unresolved.contains(&f) {
            return None;
        }
        let inputs = self.flows[f].inputs.clone();
        for i in &inputs {
            if let Err(why) = self.input_schema(i) {
                // A FROM (query) that did not plan said why where it is written.
                if let Input::Dataset { name, .. } = i
                    && self.source_of(name).is_some()
                {
                    return None;
                }
                let (file, span) = (self.flows[f].file, self.flows[f].span);
                let name = match self.source_of(&self.flows[f].target) {
                    Some(cdc) => format!("the FROM query of AUTO CDC flow `{cdc}`"),
                    None => format!("flow `{}`", self.flows[f].name),
                };
                let d = Diagnostic::note("cdcflow::schema_unknown", format!("{name} was not planned: {why}"))
                    .at(self.locate(file, span, "not planned"))
                    .help("checks that need column names are skipped; declare a schema (schema => '…' or a column list) to have them");
                self.diags.push(d);
                return None;
            }
        }
        if self.waits_for_version(f) {
            return None; // its WITH VERSION query did not plan, and said why
        }
        let plan = match &self.flows[f].kind {
            FlowKind::Query { query, .. } => {
                let query = query.clone();
                match self.plan_flow_query(f, &query) {
                    Ok(p) => p,
                    Err(e) => {
                        let file = self.flows[f].file;
                        self.query_error(file, &e, &query);
                        return None;
                    }
                }
            }
            FlowKind::AutoCdc(_) => self.plan_cdc(f)?,
        };
        self.flows[f].plan = Some(plan);
        let schema: SchemaRef = Arc::new(self.flows[f].rows_schema()?.as_arrow().clone());
        self.check_output_names(f, &schema);
        Some(schema)
    }

    /// A Delta table's column names differ, ignoring case: a query that gives two
    /// columns of one name (`SELECT *` over a join) cannot be stored, nor read by name.
    fn check_output_names(&mut self, f: usize, schema: &SchemaRef) {
        let fields = schema.fields();
        for (i, field) in fields.iter().enumerate() {
            let earlier = fields[..i]
                .iter()
                .any(|e| e.name().eq_ignore_ascii_case(field.name()));
            if !earlier {
                continue;
            }
            let (file, span, name) = (
                self.flows[f].file,
                self.flows[f].span,
                self.flows[f].name.clone(),
            );
            self.error(
                file,
                span,
                "cdcflow::duplicate_output_column",
                format!("flow `{name}` gives two columns named `{}`", field.name()),
                "this flow",
                Some("name them apart with AS (a table's column names differ, ignoring case); `SELECT *` over a join gives both sides' columns".into()),
            );
            return;
        }
    }
}
