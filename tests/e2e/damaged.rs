//! Damaged storage: a table whose newest Delta commit is cut short is named, with its
//! fix, by every command, while the pipeline's other tables stay usable; a full refresh
//! of that table repairs it. A full disk is a clear error, never a panic.

use std::fs;
use std::path::PathBuf;

use crate::{cdcflow, copy_dir, repo, stderr, stdout};

fn newest_commit(table: &std::path::Path) -> PathBuf {
    let mut commits: Vec<PathBuf> = fs::read_dir(table.join("_delta_log"))
        .expect("log")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    commits.pop().expect("a commit")
}

fn query(p: &str, sql: &str) -> std::process::Output {
    cdcflow(&["query", "-p", p, sql, "--format", "csv"])
}

#[test]
fn a_table_with_a_cut_short_commit_is_named_with_its_fix_and_the_others_stay_usable() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let p = dir.path().to_str().expect("utf-8");
    assert!(cdcflow(&["run", "-p", p]).status.success());
    let gold_sql = "SELECT * FROM gold_orders_by_status ORDER BY status";
    let bronze_sql = "SELECT count(*) AS n FROM bronze_order_changes";
    let gold = stdout(&query(p, gold_sql));
    let bronze = stdout(&query(p, bronze_sql));

    let commit = newest_commit(&dir.path().join("_storage/tables/gold_orders_by_status"));
    let bytes = fs::read(&commit).expect("read");
    fs::write(&commit, &bytes[..bytes.len() / 2]).expect("truncate");
    let named = |text: &str| {
        assert!(text.contains(&commit.display().to_string()), "{text}");
        assert!(
            text.contains("cdcflow run --full-refresh gold_orders_by_status"),
            "{text}"
        );
    };

    // query: the other tables answer; the damaged one is named with its fix.
    let out = query(p, bronze_sql);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), bronze);
    let out = query(p, gold_sql);
    assert!(!out.status.success());
    named(&stderr(&out));
    // tables: every table listed, the damaged one failing the command.
    let out = cdcflow(&["tables", "-p", p]);
    assert!(!out.status.success());
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("bronze_order_changes") && l.contains("streaming table")),
        "{}",
        stdout(&out)
    );
    named(&stderr(&out));
    // status: every flow shown, the damaged table's named.
    let out = cdcflow(&["status", "-p", p]);
    assert!(!out.status.success());
    assert!(
        stdout(&out).contains("bronze_order_changes"),
        "{}",
        stdout(&out)
    );
    named(&stderr(&out));
    // Warnings reach the user without RUST_LOG: one line each, with their fields.
    assert!(
        stderr(&out).contains("warning: table left out of the catalog (error: ")
            && stderr(&out).contains("table: gold_orders_by_status)"),
        "{}",
        stderr(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        stderr(&out)
    );

    // A full refresh of that table repairs it, keeping the damaged file for a look.
    let out = cdcflow(&["run", "-p", p, "--full-refresh", "gold_orders_by_status"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        dir.path()
            .join("_storage/tables/gold_orders_by_status/_delta_log_damaged")
            .join(commit.file_name().expect("name"))
            .exists()
    );
    let out = query(p, gold_sql);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), gold);
    assert!(cdcflow(&["tables", "-p", p]).status.success());
    assert!(cdcflow(&["status", "-p", p]).status.success());
}

/// A tmpfs of `size` mounted at `at` while this lives (the test runs as root, as CI
/// does; without the right to mount it fails rather than pass untested).
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &std::path::Path, size: &str) -> Self {
        fs::create_dir_all(at).expect("mkdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .expect("mount(8)");
        assert!(
            out.status.success(),
            "this test needs to mount a small tmpfs (run it as root): {}",
            stderr(&out)
        );
        Self(at.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_is_a_clear_error_naming_what_was_written_never_a_panic() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    // More rows than the disk holds once encoded.
    let mut landing = std::io::BufWriter::new(
        fs::File::create(dir.path().join("landing/orders/0003.json")).expect("create"),
    );
    for i in 0..200_000u64 {
        let scrambled = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
        writeln!(
            landing,
            r#"{{"order_id": {}, "customer_id": {scrambled}, "status": "s{}", "amount": {}.25, "operation": "INSERT", "commit_ts": "2024-06-02T10:00:00Z", "log_position": {}}}"#,
            1000 + i,
            scrambled % 1_000_003,
            scrambled % 999_983,
            100 + i
        )
        .expect("write");
    }
    landing.flush().expect("flush");
    drop(landing);
    let storage = dir.path().join("_storage");
    let _disk = SmallDisk::mount(&storage, "1m");
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p]);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    let table = storage.join("tables/bronze_order_changes");
    assert!(
        text.contains(&format!(
            "no space left on device while writing {}",
            table.display()
        )) || err.contains(&format!(
            "no space left on device while writing {}",
            table.display()
        )),
        "{text}{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("Already shut down"), "{err}");
}
