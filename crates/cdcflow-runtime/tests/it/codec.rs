//! docs/scale-out.md's first step: an AUTO CDC batch's physical plan (the apply over
//! the events over DataFusion's projection and scan of the batch's rows) goes through
//! datafusion-proto with cdcflow's `AutoCdcCodec` (serialize, deserialize in a fresh
//! session, execute) and gives the same tables, state and counts as the plan run where
//! it was made: SCD type 1 and 2, over a first batch and a later one with an update, a
//! delete and a late event; and a large first batch read in key groups gives the
//! tables of the same batch read whole, sent or not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cdcflow_plan::Pipeline;
use cdcflow_plan::autocdc::AutoCdcSpec;
use cdcflow_runtime::cdc::engine::GroupedLoad;
use cdcflow_runtime::cdc::exec::codec::AutoCdcCodec;
use cdcflow_runtime::cdc::exec::{
    Applied, ApplyTarget, BatchPlan, BatchSource, apply_plan, run_apply,
};
use cdcflow_runtime::cdc::rules_for;
use cdcflow_runtime::delta::{Commit, DataFile, Table, read_named};
use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
};

use crate::recovery::pipeline_of;

pub(crate) const FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING, op STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE cur;
CREATE FLOW cur_cdc AS AUTO CDC INTO cur FROM STREAM(raw) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op);
CREATE OR REFRESH STREAMING TABLE hist;
CREATE FLOW hist_cdc AS AUTO CDC INTO hist FROM STREAM(raw) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op) STORED AS SCD TYPE 2;
";

pub(crate) fn source_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("v", DataType::Utf8, true),
        Field::new("op", DataType::Utf8, true),
        Field::new("seq", DataType::Int64, true),
    ]))
}

/// id, v, op, seq.
pub(crate) type Change<'a> = (i64, Option<&'a str>, &'a str, i64);

pub(crate) fn rows(events: &[Change]) -> RecordBatch {
    let col = |f: fn(&Change) -> i64| {
        Arc::new(Int64Array::from(events.iter().map(f).collect::<Vec<_>>()))
    };
    RecordBatch::try_new(
        source_schema(),
        vec![
            col(|e| e.0),
            Arc::new(StringArray::from(
                events.iter().map(|e| e.1).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                events.iter().map(|e| e.2).collect::<Vec<_>>(),
            )),
            col(|e| e.3),
        ],
    )
    .expect("batch")
}

/// A target's two tables under `root`, for the flow of `spec`.
pub(crate) fn target(
    pipeline: &Pipeline,
    spec: &AutoCdcSpec,
    root: &Path,
    batch: i64,
) -> ApplyTarget {
    let dataset = pipeline.dataset(&spec.target).expect("target");
    let rules = rules_for(spec, &source_schema(), &dataset.properties).expect("rules");
    let commit = |name: String| Commit {
        txns: vec![(format!("cdcflow-{}", spec.flow), batch)],
        configuration: [("delta.enableDeletionVectors".into(), "true".into())].into(),
        name,
        ..Commit::default()
    };
    let dir = |name: &str| -> PathBuf { root.join(name) };
    ApplyTarget {
        rules: Arc::new(rules),
        name: spec.target.clone(),
        state_at: crate::at(&dir("state")),
        public_at: crate::at(&dir("public")),
        state_commit: commit(format!("{}__state", spec.target)),
        public_commit: commit(spec.target.clone()),
        now_micros: 1_000_000 * batch,
        opened: Mutex::new(None),
        slices: 1,
        versions: None,
    }
}

/// The AUTO CDC flow `name` of `pipeline`.
pub(crate) fn spec_of(pipeline: &Pipeline, name: &str) -> Arc<AutoCdcSpec> {
    pipeline
        .flows
        .iter()
        .find(|f| f.name == name)
        .and_then(|f| f.auto_cdc())
        .map(|s| Arc::new(s.clone()))
        .expect("spec")
}

/// The plan through bytes and back, decoded in a session of its own.
pub(crate) fn round_trip(plan: &Arc<dyn ExecutionPlan>) -> BatchPlan {
    let codec = AutoCdcCodec;
    let bytes =
        physical_plan_to_bytes_with_extension_codec(Arc::clone(plan), &codec).expect("encode");
    let task = cdcflow_plan::functions::session_context().task_ctx();
    let decoded =
        physical_plan_from_bytes_with_extension_codec(&bytes, &task, &codec).expect("decode");
    let shown = |p: &Arc<dyn ExecutionPlan>| {
        datafusion::physical_plan::displayable(p.as_ref())
            .indent(true)
            .to_string()
    };
    assert_eq!(shown(plan), shown(&decoded));
    BatchPlan {
        plan: decoded,
        task,
    }
}

/// Both tables of a target, sorted rows printed.
pub(crate) async fn tables(root: &Path, spec: &AutoCdcSpec, target: &ApplyTarget) -> Vec<String> {
    let mut out = Vec::new();
    for (dir, schema) in [
        (root.join("public"), target.rules.public_schema()),
        (root.join("state"), target.rules.state_schema()),
    ] {
        let table = Table::open_dir(&dir).await.expect("open");
        let batches = table.read_batches(&schema).await.expect("read");
        let text = pretty_format_batches(&batches).expect("format").to_string();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        out.push(format!("{}:\n{}", spec.target, lines.join("\n")));
    }
    out
}

#[tokio::test]
async fn an_auto_cdc_plan_sent_through_the_codec_gives_the_same_tables() {
    let dir = pipeline_of("codec", FLOWS);
    let pipeline = cdcflow_plan::load(dir.path(), &BTreeMap::new())
        .pipeline
        .expect("pipeline");
    let batches = [
        rows(&[
            (1, Some("a"), "I", 1),
            (2, Some("b"), "I", 1),
            (3, Some("c"), "I", 1),
        ]),
        rows(&[
            (1, Some("c"), "U", 3),
            (2, None, "D", 2),
            (1, Some("x"), "U", 2),
            (4, Some("d"), "I", 4),
        ]),
    ];
    for flow in ["cur_cdc", "hist_cdc"] {
        let spec = spec_of(&pipeline, flow);
        let (here, there) = (
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        );
        for (b, batch) in batches.iter().enumerate() {
            let b = i64::try_from(b).expect("batch") + 1;
            let rows = vec![(format!("batch {b}"), batch.clone())];
            let at = |root: &Path| target(&pipeline, &spec, root, b);
            let source = BatchSource::Rows(rows.clone());
            let plan = apply_plan(&spec, &source_schema(), source, at(here.path()), None)
                .await
                .expect("plan");
            let applied_here: Applied = run_apply(plan).await.expect("apply here");

            let source = BatchSource::Rows(rows);
            let plan = apply_plan(&spec, &source_schema(), source, at(there.path()), None)
                .await
                .expect("plan");
            let applied_there = run_apply(round_trip(&plan.plan))
                .await
                .expect("apply there");
            assert_eq!(applied_here, applied_there, "{flow} batch {b}");
            assert!(applied_here.metrics.events > 0, "{flow}: {applied_here:?}");
        }
        let t = target(&pipeline, &spec, here.path(), 1);
        let expected = tables(here.path(), &spec, &t).await;
        assert_eq!(expected, tables(there.path(), &spec, &t).await, "{flow}");
        // The second batch's update and delete reached both.
        assert!(expected[0].contains("| 1  | c "), "{flow}: {expected:?}");
    }
}

/// Three Parquet files of changes under `dir`: 150 keys, updates and deletes, each
/// file's events older than the one before's, as a source's files of a first batch.
fn landed_files(dir: &Path) -> Vec<(String, DataFile)> {
    let mut files = Vec::new();
    for f in 0..3_i64 {
        let changes: Vec<(i64, String, &str, i64)> = (0..200_i64)
            .map(|i| {
                let op = if (i + f) % 9 == 0 { "D" } else { "U" };
                (
                    (i * 7 + f * 13) % 150,
                    format!("v{f}-{i}"),
                    op,
                    (2 - f) * 1000 + i,
                )
            })
            .collect();
        let changes: Vec<Change> = changes
            .iter()
            .map(|(id, v, op, seq)| (*id, Some(v.as_str()), *op, *seq))
            .collect();
        let path = dir.join(format!("{f}.parquet"));
        let file = std::fs::File::create(&path).expect("file");
        let mut writer =
            datafusion::parquet::arrow::ArrowWriter::try_new(file, source_schema(), None)
                .expect("writer");
        writer.write(&rows(&changes)).expect("write");
        writer.close().expect("close");
        files.push((format!("file {f}"), DataFile::plain(path)));
    }
    files
}

#[tokio::test]
async fn a_first_batch_in_key_groups_gives_the_tables_of_one_read_and_goes_through_the_codec() {
    let dir = pipeline_of("codec_groups", FLOWS);
    let pipeline = cdcflow_plan::load(dir.path(), &BTreeMap::new())
        .pipeline
        .expect("pipeline");
    let landed = tempfile::tempdir().expect("dir");
    let files = landed_files(landed.path());
    // With the change data feed on, only deltalake's write operation writes the tables:
    // the groups are then applied together, as the batch read whole is.
    for (flow, feed) in [("cur_cdc", false), ("hist_cdc", false), ("cur_cdc", true)] {
        let spec = spec_of(&pipeline, flow);
        let [whole, here, there] = [(); 3].map(|()| tempfile::tempdir().expect("dir"));
        let at = |root: &Path| {
            let mut t = target(&pipeline, &spec, root, 1);
            if feed {
                for commit in [&mut t.state_commit, &mut t.public_commit] {
                    commit
                        .configuration
                        .insert("delta.enableChangeDataFeed".into(), "true".into());
                }
            }
            t
        };
        let flow = format!("{flow} (change data feed: {feed})");

        let rows = read_named(&files, &source_schema()).expect("read");
        let plan = apply_plan(
            &spec,
            &source_schema(),
            BatchSource::Rows(rows),
            at(whole.path()),
            None,
        )
        .await
        .expect("plan");
        let applied_whole = run_apply(plan).await.expect("apply whole");

        // A few kilobytes a group: the three files make several groups.
        let grouped = || {
            GroupedLoad::plan_in_groups_of(&spec, &files, &source_schema(), 4096)
                .expect("grouped load")
                .expect("more than one group")
        };
        let groups = grouped().groups();
        assert!(groups >= 2, "{flow}: {groups} group(s)");
        let plan = apply_plan(
            &spec,
            &source_schema(),
            BatchSource::KeyGroups(grouped()),
            at(here.path()),
            None,
        )
        .await
        .expect("plan");
        let shown = datafusion::physical_plan::displayable(plan.plan.as_ref())
            .indent(true)
            .to_string();
        assert!(
            shown.contains(&format!("KeyGroupsExec: groups={groups}")),
            "{shown}"
        );
        assert!(shown.contains(&format!("key_groups={groups}")), "{shown}");
        assert!(!shown.contains("Repartition"), "{shown}");
        let applied_here = run_apply(plan).await.expect("apply here");

        let plan = apply_plan(
            &spec,
            &source_schema(),
            BatchSource::KeyGroups(grouped()),
            at(there.path()),
            None,
        )
        .await
        .expect("plan");
        let applied_there = run_apply(round_trip(&plan.plan))
            .await
            .expect("apply there");

        assert_eq!(applied_whole, applied_here, "{flow}");
        assert_eq!(applied_whole, applied_there, "{flow}");
        assert_eq!(
            applied_whole.metrics.events, 600,
            "{flow}: {applied_whole:?}"
        );
        let t = at(whole.path());
        let expected = tables(whole.path(), &spec, &t).await;
        assert!(expected[0].lines().count() > 100, "{flow}: {expected:?}");
        assert_eq!(expected, tables(here.path(), &spec, &t).await, "{flow}");
        assert_eq!(expected, tables(there.path(), &spec, &t).await, "{flow}");
    }
}
