//! Every Spark function issue 14 lists plans (validation would report it otherwise),
//! and the ones written here compute what Spark computes.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;

use crate::planner::Planner;

fn schema() -> Arc<Schema> {
    let list = DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)));
    Arc::new(Schema::new(vec![
        Field::new("s", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("d", DataType::Date32, true),
        Field::new("n", DataType::Int64, true),
        Field::new("arr", list, true),
        Field::new("j", DataType::Utf8, true),
    ]))
}

fn planner() -> Planner {
    let mut p = Planner::new();
    p.register_schema("t", schema());
    p
}

fn plan(sql: &str) -> Result<(), String> {
    let query = match cdcflow_sql::sqlparser::parser::Parser::parse_sql(
        &cdcflow_sql::sqlparser::dialect::DatabricksDialect {},
        sql,
    ) {
        Ok(mut s) => match s.pop() {
            Some(cdcflow_sql::sqlparser::ast::Statement::Query(q)) => q,
            other => return Err(format!("not a query: {other:?}")),
        },
        Err(e) => return Err(format!("does not parse: {e}")),
    };
    planner()
        .plan_query(&query)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Each function of section 3 of issue 14, as a pipeline calls it.
const CALLS: &[&str] = &[
    "SELECT date(s), date(ts), timestamp(s), bigint(s), int(n) FROM t",
    "SELECT year(ts), month(d), day(ts), hour(ts), minute(ts), quarter(d) FROM t",
    "SELECT dayofweek(ts), weekofyear(d), dayofyear(ts) FROM t",
    "SELECT datediff(d, d), date_add(d, 1), add_months(d, 2) FROM t",
    "SELECT unix_timestamp(), unix_timestamp(ts), unix_timestamp(s), unix_timestamp(s, 'yyyy-MM-dd') FROM t",
    "SELECT unix_millis(ts) FROM t",
    "SELECT if(n > 1, 'a', 'b'), isnull(s), isnotnull(s) FROM t",
    "SELECT explode(arr) FROM t",
    "SELECT n, x FROM t LATERAL VIEW explode(arr) v AS x",
    "SELECT n, v.x FROM t LATERAL VIEW OUTER explode(arr) v AS x",
    "SELECT split(s, ','), split(s, ',', 2), array(n, n), sequence(1, n) FROM t",
    "SELECT first(s), max_by(s, n), min_by(s, n), mode(s), percentile_approx(n, 0.5) FROM t",
    "SELECT base64(s), sha1(s), len(s), regexp_extract(s, '(a+)', 1) FROM t",
    "SELECT get_json_object(j, '$.a.b'), parse_json(j), try_parse_json(j) FROM t",
    "SELECT j:a AS a, j:a.b::int AS b, j:a.b::string AS c FROM t",
];

#[test]
fn every_listed_function_plans() {
    let failed: Vec<String> = CALLS
        .iter()
        .filter_map(|sql| plan(sql).err().map(|e| format!("{sql}\n  {e}")))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn service_functions_are_refused_by_name() {
    for sql in [
        "SELECT ai_classify(s, array('a', 'b')) FROM t",
        "SELECT is_member('admins') FROM t",
        "SELECT session_user() FROM t",
    ] {
        let err = plan(sql).expect_err(sql);
        assert!(err.contains("a Databricks service"), "{sql}: {err}");
    }
    plan("SELECT secret('crm', 'key') FROM t").expect("secret plans");
}

/// The first column of `sql` over one row of `t`, each value as text.
async fn values(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    for b in run(sql).await {
        let f = ArrayFormatter::try_new(b.column(0).as_ref(), &FormatOptions::default()).unwrap();
        out.extend((0..b.num_rows()).map(|i| f.value(i).to_string()));
    }
    out
}

/// `sql` over one row of `t`.
async fn run(sql: &str) -> Vec<RecordBatch> {
    let ctx = super::session_context();
    let row: Vec<ArrayRef> = vec![
        Arc::new(datafusion::arrow::array::StringArray::from(vec![
            "2024-03-05 10:30:00",
        ])),
        Arc::new(
            datafusion::arrow::array::TimestampMicrosecondArray::from(vec![1_709_634_600_000_000])
                .with_timezone("UTC"),
        ),
        Arc::new(datafusion::arrow::array::Date32Array::from(vec![19_787])),
        Arc::new(datafusion::arrow::array::Int64Array::from(vec![7])),
        Arc::new(datafusion::arrow::array::ListArray::from_iter_primitive::<
            datafusion::arrow::datatypes::Int64Type,
            _,
            _,
        >(vec![Some(vec![Some(1), Some(2)])])),
        Arc::new(datafusion::arrow::array::StringArray::from(vec![
            r#"{"a": {"b": 42}, "c": "x"}"#,
        ])),
    ];
    let batch = RecordBatch::try_new(schema(), row).unwrap();
    let table = MemTable::try_new(schema(), vec![vec![batch]]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    // As `cdcflow query` plans: Spark's generators rewritten first.
    let state = ctx.state();
    let mut statement = state
        .sql_to_statement(sql, &datafusion::config::Dialect::Databricks)
        .unwrap();
    if let datafusion::sql::parser::Statement::Statement(s) = &mut statement {
        super::syntax::rewrite_statement(s);
    }
    let plan = state.statement_to_plan(statement).await.unwrap();
    ctx.execute_logical_plan(plan)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
}

/// A struct decoded from JSON is decoded once per row, however many of its fields the
/// query reads and whatever it filters on it (DataFusion would copy the call into each
/// field read and each filter pushed below it).
#[tokio::test]
async fn json_decoders_run_once_per_row() {
    for (call, name) in [
        ("from_json(j, 'a STRUCT<b: INT>, c STRING')", "from_json("),
        ("debezium(j, 'a STRING, c STRING')", "debezium("),
    ] {
        let explained = run(&format!(
            "EXPLAIN SELECT e.a AS a, e.c AS c FROM (SELECT {call} AS e FROM t) WHERE e IS NOT NULL"
        ))
        .await;
        let plans = explained[0].column(1);
        let f = ArrayFormatter::try_new(plans.as_ref(), &FormatOptions::default()).unwrap();
        let physical = f.value(1).to_string();
        assert_eq!(physical.matches(name).count(), 1, "{physical}");
    }
}

#[tokio::test]
async fn our_functions_compute_what_spark_computes() {
    for (sql, expected) in [
        ("SELECT date(s) FROM t", vec!["2024-03-05"]),
        ("SELECT year(s) * 100 + month(ts) FROM t", vec!["202403"]),
        ("SELECT dayofweek(d) FROM t", vec!["3"]),
        ("SELECT quarter(d) + dayofyear(d) FROM t", vec!["66"]),
        ("SELECT weekofyear(d) FROM t", vec!["10"]),
        ("SELECT isnull(s) OR isnotnull(n) FROM t", vec!["true"]),
        ("SELECT unix_timestamp(s) FROM t", vec!["1709634600"]),
        ("SELECT unix_timestamp(ts) FROM t", vec!["1709634600"]),
        (
            "SELECT split(s, '[- ]', 3) FROM t",
            vec!["[2024, 03, 05 10:30:00]"],
        ),
        (
            "SELECT regexp_extract(s, '(\\d+):(\\d+)', 2) FROM t",
            vec!["30"],
        ),
        ("SELECT get_json_object(j, '$.a.b') FROM t", vec!["42"]),
        ("SELECT j:a.b::int + 1 FROM t", vec!["43"]),
        (
            "SELECT try_parse_json('{nope') IS NULL FROM t",
            vec!["true"],
        ),
        ("SELECT date_add(s, 1) FROM t", vec!["2024-03-06"]),
        ("SELECT hour(s) * 100 + minute(ts) FROM t", vec!["1030"]),
        ("SELECT explode(arr) FROM t", vec!["1", "2"]),
        (
            "SELECT x FROM t LATERAL VIEW explode(arr) v AS x",
            vec!["1", "2"],
        ),
        ("SELECT max_by(s, n) FROM t", vec!["2024-03-05 10:30:00"]),
        ("SELECT mode(n) FROM t", vec!["7"]),
        ("SELECT bigint('12') + int(n) FROM t", vec!["19"]),
    ] {
        assert_eq!(values(sql).await, expected, "{sql}");
    }
}

/// `struct(…)` names its fields as Spark does: a column its name, a struct field its
/// field's, any other value `col<n>`; and structs compare field by field, as
/// Databricks' snapshot example compares `struct(modification_time, path)`.
#[tokio::test]
async fn struct_fields_take_spark_names_and_structs_compare() {
    assert_eq!(
        values("SELECT struct(n, s, n + 1) FROM t").await,
        ["{n: 7, s: 2024-03-05 10:30:00, col3: 8}"]
    );
    assert_eq!(
        values("SELECT v.n FROM (SELECT struct(d, n) AS v FROM t)").await,
        ["7"]
    );
    assert_eq!(values("SELECT struct(n AS id) FROM t").await, ["{id: 7}"]);
    assert_eq!(
        values(
            "SELECT struct(n, s) < struct(n + 1 AS n, s) AND NOT struct(n, s) > struct(n, s) FROM t"
        )
        .await,
        ["true"]
    );
}
