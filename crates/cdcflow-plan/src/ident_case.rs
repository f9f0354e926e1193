//! Identifiers resolve ignoring case, as in Spark, and keep the case they were declared
//! with. DataFusion's own normalization would lower-case every unquoted name (and miss
//! `userId`), so it is off (`planner::session_config`) and, before planning, each column,
//! table and alias reference of a query or expression is rewritten to the one spelling
//! its input declares (`USERID` → `userId`). A name written exactly as declared is kept;
//! one that matches two declared spellings only ignoring case (`ID` over `id` and `Id`)
//! cannot be resolved and is an [`Ambiguous`] error. The planner calls this for every
//! query and expression, so validation and the run resolve alike.

use std::collections::HashMap;
use std::ops::ControlFlow;

use cdcflow_sql::Span;
use cdcflow_sql::sqlparser::ast::{
    ExcludeSelectItem, Expr, Ident, JoinConstraint, JoinOperator, ObjectName, ObjectNamePart,
    OneOrManyWithParens, Query, SelectItem, SetExpr, TableFactor, Visit, VisitMut, Visitor,
    VisitorMut,
};
use datafusion::arrow::datatypes::{DataType, Fields, SchemaRef};
use datafusion::common::DFSchema;

/// A reference that matches more than one declared spelling, ignoring case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguous {
    /// As written.
    pub name: String,
    /// The declared spellings it matches.
    pub candidates: Vec<String>,
    pub span: Span,
}

impl std::fmt::Display for Ambiguous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let quoted: Vec<String> = self.candidates.iter().map(|c| format!("`{c}`")).collect();
        write!(
            f,
            "column reference `{}` is ambiguous: it matches {} (names ignore case)",
            self.name,
            quoted.join(" and ")
        )
    }
}

impl std::error::Error for Ambiguous {}

/// The names a query may refer to, by lower-cased name.
#[derive(Debug, Default)]
struct Names {
    /// Columns of the inputs.
    columns: HashMap<String, Vec<String>>,
    /// Fields of struct columns, at any depth.
    fields: HashMap<String, Vec<String>>,
    /// Names the query introduces: aliases, CTEs, lambda parameters, tables.
    introduced: HashMap<String, Vec<String>>,
    /// Columns of each table or alias (lower-cased), for `t.col`.
    tables: HashMap<String, (String, Names0)>,
}

/// Columns of one table, by lower-cased name.
type Names0 = HashMap<String, Vec<String>>;

fn add(map: &mut HashMap<String, Vec<String>>, name: &str) {
    let spellings = map.entry(name.to_lowercase()).or_default();
    if !spellings.iter().any(|s| s == name) {
        spellings.push(name.to_string());
    }
}

impl Names {
    fn add_schema(&mut self, qualifiers: &[&str], schema: &SchemaRef) {
        let mut own = Names0::new();
        for field in schema.fields() {
            add(&mut self.columns, field.name());
            add(&mut own, field.name());
            self.add_nested(field.data_type(), 0);
        }
        for q in qualifiers {
            add(&mut self.introduced, q);
            self.tables
                .insert(q.to_lowercase(), (q.to_string(), own.clone()));
        }
    }

    fn add_nested(&mut self, data_type: &DataType, depth: usize) {
        // Deeper nesting than this is not worth the walk.
        if depth > 16 {
            return;
        }
        let fields: Option<&Fields> = match data_type {
            DataType::Struct(f) => Some(f),
            DataType::List(f) | DataType::LargeList(f) => {
                return self.add_nested(f.data_type(), depth + 1);
            }
            DataType::Map(f, _) => return self.add_nested(f.data_type(), depth + 1),
            _ => None,
        };
        for f in fields.into_iter().flatten() {
            add(&mut self.fields, f.name());
            self.add_nested(f.data_type(), depth + 1);
        }
    }

    /// The declared spelling of a column (or introduced name) `ident`.
    fn column(&self, ident: &Ident, scope: Option<&Names0>) -> Result<Option<String>, Ambiguous> {
        let key = ident.value.to_lowercase();
        let columns = scope.unwrap_or(&self.columns).get(&key);
        let introduced = self.introduced.get(&key);
        pick(ident, columns, introduced)
    }

    fn field(&self, ident: &Ident) -> Result<Option<String>, Ambiguous> {
        pick(ident, self.fields.get(&ident.value.to_lowercase()), None)
    }
}

/// The spelling for `ident`: as written when declared so, else the one declared column
/// (or introduced name) it matches.
fn pick(
    ident: &Ident,
    columns: Option<&Vec<String>>,
    introduced: Option<&Vec<String>>,
) -> Result<Option<String>, Ambiguous> {
    let all = columns.into_iter().chain(introduced).flatten();
    if all.clone().any(|s| *s == ident.value) {
        return Ok(None);
    }
    let candidates = match columns.filter(|c| !c.is_empty()) {
        Some(c) => c.clone(),
        None => introduced.cloned().unwrap_or_default(),
    };
    match candidates.len() {
        0 => Ok(None),
        1 => Ok(Some(candidates[0].clone())),
        _ => Err(Ambiguous {
            name: ident.value.clone(),
            candidates,
            span: ident.span,
        }),
    }
}

fn respell(ident: &mut Ident, spelling: Option<String>) {
    if let Some(s) = spelling {
        ident.value = s;
    }
}

/// `query` with its references spelled as declared; `table` gives the schema of a table
/// the query reads, by name.
pub fn query(query: &Query, table: &dyn Fn(&str) -> Option<SchemaRef>) -> Result<Query, Ambiguous> {
    let mut names = Names::default();
    let _ = query.visit(&mut Collect {
        names: &mut names,
        table,
    });
    let mut out = query.clone();
    respell_all(&mut out, &names)?;
    Ok(out)
}

/// `expr` with its column references spelled as in `schema`.
pub fn expr(expr: &Expr, schema: &DFSchema) -> Result<Expr, Ambiguous> {
    let mut names = Names::default();
    let mut qualifiers: Vec<&str> = schema
        .iter()
        .filter_map(|(q, _)| q.map(|q| q.table()))
        .collect();
    qualifiers.dedup();
    names.add_schema(&qualifiers, schema.inner());
    let _ = expr.visit(&mut Collect {
        names: &mut names,
        table: &|_| None,
    });
    let mut out = expr.clone();
    respell_all(&mut out, &names)?;
    Ok(out)
}

/// Gathers the names a query may refer to.
struct Collect<'a> {
    names: &'a mut Names,
    table: &'a dyn Fn(&str) -> Option<SchemaRef>,
}

impl Visitor for Collect<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                add(&mut self.names.introduced, &cte.alias.name.value);
                for c in &cte.alias.columns {
                    add(&mut self.names.introduced, &c.name.value);
                }
            }
        }
        aliases(&query.body, self.names);
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        let alias = match factor {
            TableFactor::Table { name, alias, .. } => {
                let written = last(name).map(|i| i.value.clone());
                let schema = written.as_deref().and_then(|n| (self.table)(n));
                let alias_name = alias.as_ref().map(|a| a.name.value.clone());
                let qualifiers: Vec<&str> = written
                    .iter()
                    .chain(&alias_name)
                    .map(String::as_str)
                    .collect();
                match schema {
                    Some(s) => self.names.add_schema(&qualifiers, &s),
                    None => qualifiers
                        .iter()
                        .for_each(|q| add(&mut self.names.introduced, q)),
                }
                None
            }
            TableFactor::Derived { alias, .. }
            | TableFactor::UNNEST { alias, .. }
            | TableFactor::TableFunction { alias, .. }
            | TableFactor::Function { alias, .. } => alias.as_ref(),
            _ => None,
        };
        if let Some(a) = alias {
            add(&mut self.names.introduced, &a.name.value);
            for c in &a.columns {
                add(&mut self.names.introduced, &c.name.value);
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        if let Expr::Lambda(l) = expr {
            let params = match &l.params {
                OneOrManyWithParens::One(p) => std::slice::from_ref(p),
                OneOrManyWithParens::Many(ps) => ps.as_slice(),
            };
            for p in params {
                add(&mut self.names.introduced, &p.name.value);
            }
        }
        ControlFlow::Continue(())
    }
}

/// The SELECT aliases of `body`.
fn aliases(body: &SetExpr, names: &mut Names) {
    match body {
        SetExpr::Select(s) => {
            for item in &s.projection {
                if let SelectItem::ExprWithAlias { alias, .. } = item {
                    add(&mut names.introduced, &alias.value);
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            aliases(left, names);
            aliases(right, names);
        }
        _ => {}
    }
}

fn last(name: &ObjectName) -> Option<&Ident> {
    name.0.last().and_then(ObjectNamePart::as_ident)
}

/// Respells every reference of `node` by `names`.
fn respell_all<V: VisitMut>(node: &mut V, names: &Names) -> Result<(), Ambiguous> {
    match node.visit(&mut Respell { names }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Respell<'a> {
    names: &'a Names,
}

impl Respell<'_> {
    fn ident(&self, ident: &mut Ident) -> Result<(), Ambiguous> {
        respell(ident, self.names.column(ident, None)?);
        Ok(())
    }

    fn compound(&self, parts: &mut [Ident]) -> Result<(), Ambiguous> {
        let Some((first, rest)) = parts.split_first_mut() else {
            return Ok(());
        };
        // `t.col…` when `t` is a table or alias and `col` one of its columns; else
        // `col.field…`.
        let table = self.names.tables.get(&first.value.to_lowercase());
        let fields = match (table, rest.split_first_mut()) {
            (Some((spelling, columns)), Some((column, fields)))
                if columns.contains_key(&column.value.to_lowercase())
                    || !self.names.columns.contains_key(&first.value.to_lowercase()) =>
            {
                first.value = spelling.clone();
                respell(column, self.names.column(column, Some(columns))?);
                fields
            }
            _ => {
                self.ident(first)?;
                rest
            }
        };
        for f in fields {
            respell(f, self.names.field(f)?);
        }
        Ok(())
    }
}

impl VisitorMut for Respell<'_> {
    type Break = Ambiguous;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<Ambiguous> {
        match self.clauses(&mut query.body) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Ambiguous> {
        let done = match expr {
            Expr::Identifier(i) => self.ident(i),
            Expr::CompoundIdentifier(parts) => self.compound(parts),
            _ => Ok(()),
        };
        match done {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

impl Respell<'_> {
    /// Column names outside expressions: `* EXCEPT (…)`, `JOIN … USING (…)`.
    fn clauses(&self, body: &mut SetExpr) -> Result<(), Ambiguous> {
        match body {
            SetExpr::Select(s) => {
                for item in &mut s.projection {
                    let options = match item {
                        SelectItem::Wildcard(o) | SelectItem::QualifiedWildcard(_, o) => o,
                        _ => continue,
                    };
                    if let Some(except) = &mut options.opt_except {
                        self.ident(&mut except.first_element)?;
                        for i in &mut except.additional_elements {
                            self.ident(i)?;
                        }
                    }
                    match &mut options.opt_exclude {
                        Some(ExcludeSelectItem::Single(name)) => self.object_name(name)?,
                        Some(ExcludeSelectItem::Multiple(names)) => {
                            for name in names {
                                self.object_name(name)?;
                            }
                        }
                        None => {}
                    }
                }
                for join in s.from.iter_mut().flat_map(|t| &mut t.joins) {
                    if let Some(JoinConstraint::Using(names)) = constraint(&mut join.join_operator)
                    {
                        for name in names {
                            self.object_name(name)?;
                        }
                    }
                }
                Ok(())
            }
            SetExpr::SetOperation { left, right, .. } => {
                self.clauses(left)?;
                self.clauses(right)
            }
            _ => Ok(()),
        }
    }

    fn object_name(&self, name: &mut ObjectName) -> Result<(), Ambiguous> {
        if let [ObjectNamePart::Identifier(i)] = name.0.as_mut_slice() {
            self.ident(i)?;
        }
        Ok(())
    }
}

fn constraint(op: &mut JoinOperator) -> Option<&mut JoinConstraint> {
    match op {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::Semi(c)
        | JoinOperator::LeftSemi(c)
        | JoinOperator::RightSemi(c)
        | JoinOperator::Anti(c)
        | JoinOperator::LeftAnti(c)
        | JoinOperator::RightAnti(c) => Some(c),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn schema(names: &[&str]) -> SchemaRef {
        Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ))
    }

    fn respelt(sql: &str, columns: &[&str]) -> Result<String, Ambiguous> {
        let parsed = cdcflow_sql::parse_statements(&format!("CREATE VIEW v AS {sql};"));
        let cdcflow_sql::ast::Statement::CreateDataset(def) = &parsed.statements[0] else {
            panic!("not a dataset");
        };
        let s = schema(columns);
        let q = query(def.query.as_ref().expect("query"), &|t| {
            t.eq_ignore_ascii_case("t").then(|| Arc::clone(&s))
        })?;
        Ok(q.to_string())
    }

    #[test]
    fn references_take_the_declared_spelling() {
        assert_eq!(
            respelt(
                "SELECT USERID, T.OPERATION AS op FROM t WHERE SEQUENCENUM > 1 ORDER BY Op",
                &["userId", "operation", "sequenceNum"]
            ),
            Ok("SELECT userId, t.operation AS op FROM t WHERE sequenceNum > 1 ORDER BY op".into())
        );
        assert_eq!(
            respelt("SELECT * EXCEPT (USERID) FROM t", &["userId", "x"]),
            Ok("SELECT * EXCEPT (userId) FROM t".into())
        );
    }

    #[test]
    fn an_exact_spelling_is_kept_and_an_inexact_one_over_two_is_ambiguous() {
        assert_eq!(
            respelt("SELECT id, Id FROM t", &["id", "Id"]),
            Ok("SELECT id, Id FROM t".into())
        );
        let err = respelt("SELECT ID FROM t", &["id", "Id"]).expect_err("ambiguous");
        assert_eq!(err.candidates, ["id", "Id"]);
    }
}
