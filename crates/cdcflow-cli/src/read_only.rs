//! `cdcflow query` only reads. Tables change through `cdcflow run` alone, which keeps
//! their checkpoints, keys and history consistent; a statement that writes a table or a
//! file (INSERT, COPY … TO), defines or drops something (CREATE EXTERNAL TABLE, DROP) or
//! changes the session (SET) is refused, named, before anything of it runs.

use cdcflow_runtime::RunError;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::context::SQLOptions;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, Statement, WriteOp};
use datafusion::prelude::{DataFrame, SessionContext};

/// Plans `sql` and makes it ready to run, unless some part of it writes. A table read
/// `VERSION AS OF` / `TIMESTAMP AS OF` is read at that version.
pub async fn sql(
    ctx: &SessionContext,
    pipeline: &cdcflow_plan::Pipeline,
    sql: &str,
) -> Result<DataFrame, RunError> {
    let mut statement = parse(ctx, sql)?;
    cdcflow_runtime::time_travel::resolve(ctx, pipeline, &mut statement).await?;
    // Spark's generators, as flows plan them (`cdcflow_plan::functions::syntax`).
    if let datafusion::sql::parser::Statement::Statement(s) = &mut statement {
        cdcflow_plan::functions::service::refuse_calls(s)?;
        cdcflow_plan::functions::syntax::rewrite_statement(s);
        if let datafusion::sql::sqlparser::ast::Statement::Query(query) = &mut **s {
            cdcflow_plan::list_files::rewrite_calls(query, &pipeline.root)
                .map_err(RunError::input)?;
        }
    }
    let plan = ctx.state().statement_to_plan(statement).await?;
    if let Some(kind) = writing_statement(&plan) {
        return Err(refused(kind));
    }
    // DataFusion's own check, for plan nodes that write and that this module does not
    // name yet.
    let read_only = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    if let Err(e) = read_only.verify_plan(&plan) {
        return Err(refused(&e.strip_backtrace()));
    }
    Ok(ctx.execute_logical_plan(plan).await?)
}

/// The one statement of `sql`, read in the dialect flows are read in (Databricks', with
/// Spark's `a DIV b`: `cdcflow_sql::dialect`), so a query reads as a flow's would.
pub fn parse(
    ctx: &SessionContext,
    sql: &str,
) -> datafusion::error::Result<datafusion::sql::parser::Statement> {
    let recursion_limit = ctx
        .state()
        .config()
        .options()
        .sql_parser
        .recursion_limit
        .get();
    let mut statements = datafusion::sql::parser::DFParserBuilder::new(sql)
        .with_dialect(&cdcflow_sql::dialect::SparkSqlDialect)
        .with_recursion_limit(recursion_limit)
        .build()?
        .parse_statements()?;
    if statements.len() > 1 {
        return datafusion::common::plan_err!("`cdcflow query` takes one statement at a time");
    }
    statements
        .pop_front()
        .ok_or_else(|| datafusion::common::plan_datafusion_err!("no SQL statement was given"))
}

fn refused(kind: &str) -> RunError {
    RunError::input(format!("`cdcflow query` only reads: {kind} is refused")).with_help(
        "tables change only through `cdcflow run`, from the pipeline's SQL files; query them with SELECT, WITH, VALUES, EXPLAIN, DESCRIBE or SHOW",
    )
}

/// The first statement in `plan` (EXPLAIN ANALYZE and subqueries included) that writes
/// or changes the session, as SQL names it.
fn writing_statement(plan: &LogicalPlan) -> Option<&'static str> {
    let mut found = None;
    // The closure never fails; a visit error would only mean nothing was found.
    let _ = plan.apply_with_subqueries(|node| {
        found = statement_kind(node);
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

fn statement_kind(node: &LogicalPlan) -> Option<&'static str> {
    Some(match node {
        LogicalPlan::Dml(dml) => match dml.op {
            WriteOp::Insert(InsertOp::Append) => "INSERT INTO",
            WriteOp::Insert(InsertOp::Overwrite) => "INSERT OVERWRITE",
            WriteOp::Insert(InsertOp::Replace) => "REPLACE INTO",
            WriteOp::Delete => "DELETE",
            WriteOp::Update => "UPDATE",
            WriteOp::Ctas => "CREATE TABLE … AS",
            WriteOp::Truncate => "TRUNCATE",
            WriteOp::MergeInto(_) => "MERGE INTO",
            _ => "a statement that writes",
        },
        LogicalPlan::Copy(_) => "COPY … TO",
        LogicalPlan::Ddl(ddl) => match ddl {
            DdlStatement::CreateExternalTable(_) => "CREATE EXTERNAL TABLE",
            DdlStatement::CreateMemoryTable(_) => "CREATE TABLE",
            DdlStatement::CreateView(_) => "CREATE VIEW",
            DdlStatement::CreateCatalogSchema(_) => "CREATE SCHEMA",
            DdlStatement::CreateCatalog(_) => "CREATE DATABASE",
            DdlStatement::CreateIndex(_) => "CREATE INDEX",
            DdlStatement::DropTable(_) => "DROP TABLE",
            DdlStatement::DropView(_) => "DROP VIEW",
            DdlStatement::DropCatalogSchema(_) => "DROP SCHEMA",
            DdlStatement::CreateFunction(_) => "CREATE FUNCTION",
            DdlStatement::DropFunction(_) => "DROP FUNCTION",
        },
        LogicalPlan::Statement(statement) => match statement {
            Statement::SetVariable(_) => "SET",
            Statement::ResetVariable(_) => "RESET",
            Statement::TransactionStart(_) => "START TRANSACTION",
            Statement::TransactionEnd(_) => "COMMIT / ROLLBACK",
            Statement::Prepare(_) => "PREPARE",
            Statement::Execute(_) => "EXECUTE",
            Statement::Deallocate(_) => "DEALLOCATE",
        },
        _ => return None,
    })
}
