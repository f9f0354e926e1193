//! Landing folders as trees: arbitrary file names (bytes that are not UTF-8, names a
//! lossy conversion would merge), nested folders, empty files written later, files
//! rewritten after they were read, binary files, and symbolic links inside, out of and
//! looping back into the folder. Whatever the tree, every row of every file in it is
//! read exactly once, nothing outside it is read or copied, and a file changed after it
//! was read is reported by name.

#![cfg(unix)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cdcflow_runtime::{RunOptions, RunReport, catalog, run};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use proptest::prelude::*;

const FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING');\n";

/// Rows of files outside the landing folder: never read.
const OUTSIDE_IDS: i64 = 1_000_000;

/// What one entry of a generated landing tree is.
#[derive(Debug, Clone)]
enum Kind {
    /// A JSON file of this many rows.
    Data(usize),
    /// Created empty; written (this many rows) before the second run.
    EmptyThenWritten(usize),
    /// Bytes with NUL in them, holding a secret that must not be copied anywhere.
    Binary,
    /// A link to the entry at this index (a file or its folder), inside the folder.
    LinkInside(prop::sample::Index),
    /// A link to a JSON file outside the landing folder.
    LinkOutsideFile,
    /// A link to a folder outside the landing folder.
    LinkOutsideDir,
    /// A link to the landing folder itself, from inside it.
    LinkLoop,
}

#[derive(Debug, Clone)]
struct Entry {
    /// Folders above the file, then its name: raw bytes.
    dirs: Vec<Vec<u8>>,
    name: Vec<u8>,
    kind: Kind,
}

/// File-name bytes: anything but `/` and NUL, not hidden or `_`-prefixed (skipped by
/// design), with the names a lossy conversion merges over-represented.
fn name_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"x\xff".to_vec()),
        Just(b"x\xfe".to_vec()),
        Just("x\u{FFFD}".as_bytes().to_vec()),
        Just(b"x\\xff".to_vec()),
        Just("é".as_bytes().to_vec()),
        Just(b"a b\nc".to_vec()),
        proptest::collection::vec(
            any::<u8>().prop_filter("no / or NUL", |b| *b != b'/' && *b != 0),
            1..12
        ),
    ]
    .prop_map(|mut n| {
        n.insert(0, b'f');
        n.extend_from_slice(b".json");
        n
    })
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        6 => (1usize..4).prop_map(Kind::Data),
        1 => (1usize..3).prop_map(Kind::EmptyThenWritten),
        1 => Just(Kind::Binary),
        1 => any::<prop::sample::Index>().prop_map(Kind::LinkInside),
        1 => Just(Kind::LinkOutsideFile),
        1 => Just(Kind::LinkOutsideDir),
        1 => Just(Kind::LinkLoop),
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        proptest::collection::vec(
            prop_oneof![
                Just(b"d1".to_vec()),
                Just(b"d\xff".to_vec()),
                Just(b"d2".to_vec())
            ],
            0..3,
        ),
        name_bytes(),
        kind(),
    )
        .prop_map(|(dirs, name, kind)| Entry { dirs, name, kind })
}

fn os(bytes: &[u8]) -> &OsStr {
    OsStr::from_bytes(bytes)
}

/// A file's modification time set an hour back: landed long ago, so settled.
fn landed_long_ago(path: &Path) {
    let f = fs::File::options().write(true).open(path).expect("open");
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .expect("set mtime");
}

fn rows(ids: std::ops::Range<i64>) -> String {
    ids.map(|i| format!("{{\"id\": {i}, \"v\": \"r{i}\"}}\n"))
        .collect()
}

/// Lays `entries` out under `landing`; returns the ids a run must read at first and
/// the ids written into empty files before the second run, with their files.
struct Tree {
    first: Vec<i64>,
    later: Vec<(PathBuf, std::ops::Range<i64>)>,
    binary: bool,
}

fn lay_out(entries: &[Entry], landing: &Path, outside: &Path) -> Tree {
    let mut tree = Tree {
        first: vec![],
        later: vec![],
        binary: false,
    };
    let mut next = 0i64;
    let mut paths: Vec<PathBuf> = Vec::new();
    for e in entries {
        let mut dir = landing.to_path_buf();
        for d in &e.dirs {
            dir.push(os(d));
        }
        fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join(os(&e.name));
        // The first entry of a name wins; the tree has each path once.
        if paths.contains(&path) || fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        match &e.kind {
            Kind::Data(n) => {
                let n = *n as i64;
                fs::write(&path, rows(next..next + n)).expect("write");
                tree.first.extend(next..next + n);
                next += n;
            }
            Kind::EmptyThenWritten(n) => {
                let n = *n as i64;
                fs::write(&path, "").expect("write");
                tree.later.push((path.clone(), next..next + n));
                next += n;
            }
            Kind::Binary => {
                let mut bytes = b"{\"id\": 5, \"v\": \"secret-binary\"}\n\0\x01".to_vec();
                bytes.extend_from_slice(b"secret-binary\n");
                fs::write(&path, bytes).expect("write");
                tree.binary = true;
            }
            Kind::LinkInside(i) => {
                // To an earlier file or folder of the tree; it adds no rows of its own.
                let Some(target) = (!paths.is_empty()).then(|| paths[i.index(paths.len())].clone())
                else {
                    continue;
                };
                symlink(&target, &path).expect("symlink");
            }
            Kind::LinkOutsideFile => symlink(outside.join("shadow.json"), &path).expect("symlink"),
            Kind::LinkOutsideDir => symlink(outside, &path).expect("symlink"),
            Kind::LinkLoop => symlink(landing, &path).expect("symlink"),
        }
        if !matches!(e.kind, Kind::LinkInside(_)) {
            paths.push(path.clone());
            paths.push(dir);
        }
        if path.is_file() && fs::symlink_metadata(&path).is_ok_and(|m| !m.is_symlink()) {
            landed_long_ago(&path);
        }
    }
    tree
}

async fn run_ok(dir: &Path) -> RunReport {
    let loaded = cdcflow_plan::load(dir, &BTreeMap::new());
    let pipeline = loaded.pipeline.expect("pipeline");
    let report = run(&pipeline, &RunOptions::default()).await.expect("run");
    assert!(!report.failed(), "{report:?}");
    report
}

async fn column(dir: &Path, sql: &str) -> Vec<Option<String>> {
    let loaded = cdcflow_plan::load(dir, &BTreeMap::new());
    let pipeline = loaded.pipeline.expect("pipeline");
    let ctx = catalog::session(&pipeline).await.expect("session");
    let batches = ctx
        .sql(sql)
        .await
        .expect("sql")
        .collect()
        .await
        .expect("collect");
    let mut out = Vec::new();
    for b in &batches {
        let c = cast(b.column(0), &DataType::Utf8).expect("cast");
        let c = c.as_string::<i32>();
        out.extend((0..c.len()).map(|i| c.is_valid(i).then(|| c.value(i).to_string())));
    }
    out
}

async fn ids(dir: &Path) -> Vec<i64> {
    column(dir, "SELECT id FROM raw ORDER BY id")
        .await
        .into_iter()
        .flatten()
        .map(|id| id.parse().expect("an integer id"))
        .collect()
}

fn pipeline_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("pipeline.yaml"), "name: trees\n").expect("write");
    fs::write(dir.path().join("flows.sql"), FLOWS).expect("write");
    let outside = dir.path().join("outside");
    fs::create_dir_all(&outside).expect("mkdir");
    fs::write(
        outside.join("shadow.json"),
        rows(OUTSIDE_IDS..OUTSIDE_IDS + 2),
    )
    .expect("write");
    fs::write(
        outside.join("root.json"),
        "root:$6$secret-outside:19000:0:99999:7:::\n",
    )
    .expect("write");
    fs::create_dir_all(dir.path().join("landing")).expect("mkdir");
    (dir, outside)
}

async fn check_tree(entries: Vec<Entry>) {
    let (dir, outside) = pipeline_dir();
    let landing = dir.path().join("landing");
    let tree = lay_out(&entries, &landing, &outside);
    run_ok(dir.path()).await;
    let mut want = tree.first.clone();
    want.sort();
    assert_eq!(ids(dir.path()).await, want, "first run");

    // The empty files get their rows; the next run reads them, and only them.
    for (path, range) in &tree.later {
        fs::write(path, rows(range.clone())).expect("write");
        landed_long_ago(path);
        want.extend(range.clone());
    }
    want.sort();
    run_ok(dir.path()).await;
    assert_eq!(ids(dir.path()).await, want, "second run");
    let third = run_ok(dir.path()).await;
    assert_eq!(third.flows[0].files, 0, "{third:?}");
    assert_eq!(ids(dir.path()).await, want, "third run");

    if tree.binary {
        let records = column(dir.path(), "SELECT record FROM raw__quarantine").await;
        assert!(
            records.iter().flatten().all(|r| !r.contains("secret")),
            "{records:?}"
        );
    }
}

proptest! {
    // Each case lays out a tree and runs the pipeline three times: few cases, raised here
    // to fuzz longer (`PROPTEST_CASES` does not override an explicit count).
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn every_file_of_a_landing_tree_is_read_once_and_nothing_outside_it(
        entries in proptest::collection::vec(entry(), 1..10),
    ) {
        tokio::runtime::Runtime::new().expect("runtime").block_on(check_tree(entries));
    }
}

#[tokio::test]
async fn names_a_lossy_conversion_would_merge_are_each_read() {
    let (dir, _) = pipeline_dir();
    let names: [&[u8]; 3] = [b"x\xff.json", b"x\xfe.json", "x\u{FFFD}.json".as_bytes()];
    // One at a time: a name read before must not hide another.
    for (i, name) in names.iter().enumerate() {
        let path = dir.path().join("landing").join(os(name));
        fs::write(&path, rows(i as i64..i as i64 + 1)).expect("write");
        landed_long_ago(&path);
        run_ok(dir.path()).await;
    }
    assert_eq!(ids(dir.path()).await, vec![0, 1, 2]);
}

#[tokio::test]
async fn a_file_rewritten_after_it_was_read_is_reported_by_name_and_not_half_read() {
    let (dir, _) = pipeline_dir();
    let path = dir.path().join("landing/a.json");
    fs::write(&path, rows(0..2)).expect("write");
    landed_long_ago(&path);
    run_ok(dir.path()).await;
    fs::write(&path, rows(0..5)).expect("write");
    landed_long_ago(&path);
    let report = run_ok(dir.path()).await;
    assert!(
        report.flows[0]
            .warnings
            .iter()
            .any(|w| w.contains("changed after a batch read them") && w.contains("landing/a.json")),
        "{report:?}"
    );
    assert_eq!(ids(dir.path()).await, vec![0, 1]);
}

#[tokio::test]
async fn with_allow_overwrites_a_rewritten_file_is_read_again_whole() {
    let (dir, _) = pipeline_dir();
    fs::write(
        dir.path().join("flows.sql"),
        FLOWS.replace(
            "format => 'json',",
            "format => 'json', `cloudFiles.allowOverwrites` => 'true',",
        ),
    )
    .expect("write");
    let path = dir.path().join("landing/a.json");
    fs::write(&path, rows(0..2)).expect("write");
    landed_long_ago(&path);
    run_ok(dir.path()).await;
    fs::write(&path, rows(10..13)).expect("write");
    landed_long_ago(&path);
    run_ok(dir.path()).await;
    assert_eq!(ids(dir.path()).await, vec![0, 1, 10, 11, 12]);
}

#[tokio::test]
async fn links_out_of_the_landing_folder_are_read_only_when_pipeline_yaml_allows_it() {
    let (dir, outside) = pipeline_dir();
    symlink(
        outside.join("shadow.json"),
        dir.path().join("landing/s.json"),
    )
    .expect("symlink");
    let report = run_ok(dir.path()).await;
    assert!(
        report.flows[0]
            .warnings
            .iter()
            .any(|w| w.contains("not followed") && w.contains("landing/s.json")),
        "{report:?}"
    );
    assert_eq!(ids(dir.path()).await, Vec::<i64>::new());
    fs::write(
        dir.path().join("pipeline.yaml"),
        "name: trees\nfollow_symlinks_out_of_landing: true\n",
    )
    .expect("write");
    run_ok(dir.path()).await;
    assert_eq!(ids(dir.path()).await, vec![OUTSIDE_IDS, OUTSIDE_IDS + 1]);
}

#[tokio::test]
async fn link_loops_under_the_pipeline_folder_are_walked_once() {
    let (dir, _) = pipeline_dir();
    let landing = dir.path().join("landing");
    // Found by the tree fuzz test: the search for SQL files under the pipeline folder
    // and the landing walk both followed these without end.
    symlink(&landing, landing.join("again")).expect("symlink");
    symlink(dir.path(), landing.join("up")).expect("symlink");
    let path = landing.join("a.json");
    fs::write(&path, rows(0..2)).expect("write");
    landed_long_ago(&path);
    run_ok(dir.path()).await;
    assert_eq!(ids(dir.path()).await, vec![0, 1]);
}
