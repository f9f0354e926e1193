//! Which flows of a run wait for which (`schedule.rs`): readers wait for writers, through
//! views; flows into one table wait for each other in the pipeline's order; the rest
//! wait for nothing and run at the same time.

use std::collections::{BTreeMap, BTreeSet};

use cdcflow_runtime::schedule::waits;
use cdcflow_runtime::{RunOptions, run};

use crate::recovery::pipeline_of;

const FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE a AS SELECT * FROM STREAM read_files('landing/a', format => 'json', schema => 'id BIGINT, v STRING');
CREATE OR REFRESH STREAMING TABLE b AS SELECT * FROM STREAM read_files('landing/b', format => 'json', schema => 'id BIGINT, v STRING');
CREATE OR REFRESH STREAMING TABLE c AS SELECT * FROM STREAM read_files('landing/c', format => 'json', schema => 'id BIGINT, v STRING');
CREATE OR REFRESH STREAMING TABLE a_copy AS SELECT * FROM STREAM(a);
CREATE VIEW b_view AS SELECT id, upper(v) AS v FROM b;
CREATE OR REFRESH MATERIALIZED VIEW joined AS SELECT x.id, x.v, y.v AS w FROM a_copy x JOIN b_view y ON x.id = y.id;
CREATE OR REFRESH STREAMING TABLE both_sides;
CREATE FLOW from_a AS INSERT INTO both_sides BY NAME SELECT * FROM STREAM(a);
CREATE FLOW from_c AS INSERT INTO both_sides BY NAME SELECT * FROM STREAM(c);
";

/// The flows each flow waits for, by name.
fn waits_by_name(pipeline: &cdcflow_plan::Pipeline) -> BTreeMap<String, BTreeSet<String>> {
    let run: Vec<usize> = pipeline
        .order
        .iter()
        .copied()
        .filter(|&f| pipeline.flows[f].target != "b_view")
        .collect();
    let name = |i: usize| pipeline.flows[run[i]].name.clone();
    waits(pipeline, &run)
        .into_iter()
        .enumerate()
        .map(|(i, w)| (name(i), w.into_iter().map(name).collect()))
        .collect()
}

#[test]
fn readers_wait_for_writers_through_views_and_one_table_takes_one_flow_at_a_time() {
    let dir = pipeline_of("schedule", FLOWS);
    let pipeline = cdcflow_plan::load(dir.path(), &BTreeMap::new())
        .pipeline
        .expect("pipeline");
    let waits = waits_by_name(&pipeline);
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(waits["a"], set(&[]));
    assert_eq!(waits["b"], set(&[]));
    assert_eq!(waits["c"], set(&[]));
    assert_eq!(waits["a_copy"], set(&["a"]));
    // The view is not run: its reader waits for what the view reads.
    assert_eq!(waits["joined"], set(&["a_copy", "b"]));
    // Two flows into one table: the later in the pipeline's order waits for the earlier.
    let position = |name: &str| {
        pipeline
            .order
            .iter()
            .position(|&f| pipeline.flows[f].name == name)
    };
    let (first, second) = match position("from_a") < position("from_c") {
        true => (("from_a", "a"), ("from_c", "c")),
        false => (("from_c", "c"), ("from_a", "a")),
    };
    assert_eq!(waits[first.0], set(&[first.1]));
    assert_eq!(waits[second.0], set(&[second.1, first.0]));
}

/// Independent flows run at the same time and each commits; the report keeps the
/// pipeline's order, whatever order they ended in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_flows_all_commit_and_report_in_the_pipelines_order() {
    let dir = pipeline_of("schedule", FLOWS);
    for (folder, rows) in [
        ("a", "{\"id\":1,\"v\":\"x\"}\n"),
        ("b", "{\"id\":1,\"v\":\"y\"}\n"),
        ("c", "{\"id\":2,\"v\":\"z\"}\n"),
    ] {
        let landing = dir.path().join("landing").join(folder);
        std::fs::create_dir_all(&landing).expect("mkdir");
        std::fs::write(landing.join("1.json"), rows).expect("write");
    }
    let pipeline = cdcflow_plan::load(dir.path(), &BTreeMap::new())
        .pipeline
        .expect("pipeline");
    let report = run(&pipeline, &RunOptions::default()).await.expect("run");
    assert!(!report.failed(), "{report:?}");
    let order: Vec<&str> = pipeline
        .order
        .iter()
        .map(|&f| pipeline.flows[f].name.as_str())
        .filter(|n| *n != "b_view")
        .collect();
    let reported: Vec<&str> = report.flows.iter().map(|r| r.flow.as_str()).collect();
    assert_eq!(reported, order);
    let tables = crate::recovery::query_tables(
        dir.path(),
        &[
            "SELECT id, v, w FROM joined",
            "SELECT id, v FROM both_sides ORDER BY id",
        ],
    )
    .await;
    let expected = [
        "+----+---+---+\n| id | v | w |\n+----+---+---+\n| 1  | x | Y |\n+----+---+---+",
        "+----+---+\n| id | v |\n+----+---+\n| 1  | x |\n| 2  | z |\n+----+---+",
    ];
    assert_eq!(tables, expected);
}
