//! Where a pipeline's tables, AUTO CDC state and checkpoints live under its storage
//! folder, and the one place their paths are built from dataset and flow names.
//!
//! A name becomes one folder name ([`folder_name`]): lower-cased (names ignore case),
//! with the characters that could climb out of or start over from the storage folder
//! escaped, so ordinary names keep the folders they always had. `cdcflow validate`
//! reports the names that need escaping (`cdcflow_plan::names`) and `cdcflow run`
//! refuses them; escaping is what keeps a pipeline run despite its diagnostics (by a
//! library caller) inside its storage folder. Every path is
//! checked to lie inside the storage folder ([`ensure_within`]) before it is returned,
//! and [`remove_dir_all`] checks again before it deletes. Fixed names (`_run.lock`,
//! `system/event_log`) are built where they are used: they take nothing from a name.

use std::path::{Component, Path, PathBuf};

use cdcflow_plan::Dataset;
use cdcflow_plan::location::Location;
pub use cdcflow_plan::names::folder_name;

use crate::RunError;

/// The Delta table of a dataset: under `tables/` when published, under `private/`
/// for `PRIVATE` and `TEMPORARY` datasets, which only the pipeline's own flows read.
pub fn table_dir(storage: &Location, dataset: &Dataset) -> Result<Location, RunError> {
    let area = if dataset.is_published() {
        "tables"
    } else {
        "private"
    };
    table_under(storage, area, &dataset.name)
}

/// The quarantine table of the table at `table`: beside it, its folder name with
/// `__quarantine` appended (one folder name still, as `table_dir`'s is).
pub fn quarantine_dir(table: &Location) -> Location {
    table.with_suffix("__quarantine")
}

/// The late-rows table of the table at `table` (rows an aggregation over a
/// watermarked stream dropped): beside it, its folder name with `__late` appended.
pub fn late_dir(table: &Location) -> Location {
    table.with_suffix("__late")
}

/// The internal state table of an AUTO CDC target.
pub fn state_dir(storage: &Location, dataset: &str) -> Result<Location, RunError> {
    table_under(storage, "state", dataset)
}

/// The Delta table of a published dataset named `name` (`tables/`), as [`table_dir`]
/// places it.
pub fn published_dir(storage: &Location, name: &str) -> Result<Location, RunError> {
    table_under(storage, "tables", name)
}

/// `<storage>/<area>/<folder name of name>`, checked.
fn table_under(storage: &Location, area: &str, name: &str) -> Result<Location, RunError> {
    let at = storage.join(area).join(&folder_name(name));
    match at.is_inside(storage) {
        true => Ok(at),
        false => Err(RunError::internal(format!(
            "{at} is not inside the storage {storage}"
        ))),
    }
}

/// The checkpoint folder of a flow.
pub fn checkpoint_dir(storage: &Path, flow: &str) -> Result<PathBuf, RunError> {
    under(storage, "checkpoints", flow)
}

/// The application-transaction id a flow's commits carry.
pub fn app_id(flow: &str) -> String {
    format!("cdcflow:{}", flow.to_lowercase())
}

/// Deletes the folder `dir` and everything in it (nothing when it does not exist),
/// once it is checked to lie inside `storage`.
pub fn remove_dir_all(storage: &Path, dir: &Path) -> Result<(), RunError> {
    ensure_within(storage, dir)?;
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RunError::io(dir, e)),
    }
}

/// `<storage>/<area>/<folder name of name>`, checked.
fn under(storage: &Path, area: &str, name: &str) -> Result<PathBuf, RunError> {
    let path = storage.join(area).join(folder_name(name));
    ensure_within(storage, &path)?;
    Ok(path)
}

/// Fails unless `path` is `storage` followed by one or more plain folder names: no
/// `..`, no root, no drive. Decided on the paths as written, not the disk: what a
/// path would resolve to does not matter when it cannot name anything but a folder
/// under `storage`.
pub fn ensure_within(storage: &Path, path: &Path) -> Result<(), RunError> {
    let inside = path.strip_prefix(storage).is_ok_and(|rest| {
        rest.components().next().is_some()
            && rest.components().all(|c| matches!(c, Component::Normal(_)))
    });
    match inside {
        true => Ok(()),
        false => Err(RunError::internal(format!(
            "{} is not inside the storage folder {}",
            path.display(),
            storage.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_keep_their_folders() {
        for (name, folder) in [
            ("orders", "orders"),
            ("Silver_Orders", "silver_orders"),
            ("quoted name", "quoted name"),
            ("orders.v2", "orders.v2"),
            ("orders@v2", "orders@v2"),
            ("Été", "été"),
        ] {
            assert_eq!(folder_name(name), folder, "{name}");
        }
    }

    #[test]
    fn names_that_could_leave_the_folder_are_escaped_into_one_folder_name() {
        for (name, folder) in [
            ("../../../victim", "@2E.@2F..@2F..@2Fvictim"),
            ("/tmp/Abs_Table", "@2Ftmp@2Fabs_table"),
            ("..", "@2E."),
            (".", "@2E"),
            ("", "@"),
            ("a\\b", "a@5Cb"),
            ("c:x", "c@3Ax"),
            ("50%_off", "50@25_off"),
            ("nul\0here", "nul@00here"),
            ("\u{85}x", "@C2@85x"),
        ] {
            let got = folder_name(name);
            assert_eq!(got, folder, "{name:?}");
            let mut parts = Path::new(&got).components();
            assert!(
                matches!(parts.next(), Some(Component::Normal(_))) && parts.next().is_none(),
                "{got} is one plain folder name"
            );
        }
    }

    #[test]
    fn validate_reads_the_stored_shape_where_a_run_writes_it() {
        let storage = Path::new("/data/pipe/_storage");
        for flow in ["orders_cdc", "Silver Orders", "../x", "c:x"] {
            let run = checkpoint_dir(storage, flow)
                .expect("inside")
                .join(cdcflow_plan::stored_shape::FILE);
            assert_eq!(
                run,
                cdcflow_plan::stored_shape::path(storage, flow),
                "{flow}"
            );
        }
    }

    #[test]
    fn paths_are_built_inside_the_storage_folder_whatever_the_name() {
        let storage = Path::new("/data/pipe/../elsewhere/_storage");
        let dir = checkpoint_dir(storage, "../../../victim").expect("inside");
        assert_eq!(
            dir,
            Path::new("/data/pipe/../elsewhere/_storage/checkpoints/@2E.@2F..@2F..@2Fvictim")
        );
        assert_eq!(
            quarantine_dir(
                &state_dir(&Location::Local(storage.to_path_buf()), "/x").expect("inside")
            ),
            Location::Local(PathBuf::from(
                "/data/pipe/../elsewhere/_storage/state/@2Fx__quarantine"
            ))
        );
    }

    #[test]
    fn a_path_outside_the_storage_folder_is_an_internal_error() {
        let storage = Path::new("/data/pipe/_storage");
        for outside in [
            "/data/pipe/_storage",
            "/data/pipe/_storage/checkpoints/../../../victim",
            "/data/pipe/_storage/..",
            "/data/pipe/_storage_other/x",
            "/data/pipe",
            "/tmp/abs_table",
            "relative/_storage/x",
        ] {
            let err = ensure_within(storage, Path::new(outside)).expect_err(outside);
            assert!(matches!(err, RunError::Internal { .. }), "{outside}: {err}");
        }
        ensure_within(storage, Path::new("/data/pipe/_storage/tables/orders")).expect("inside");
        ensure_within(storage, Path::new("/data/pipe/_storage/./tables/a..b")).expect("inside");
    }

    #[test]
    fn removing_a_folder_outside_the_storage_folder_deletes_nothing() {
        let root = tempfile::tempdir().expect("tempdir");
        let storage = root.path().join("pipe/_storage");
        let victim = root.path().join("victim");
        std::fs::create_dir_all(&victim).expect("mkdir");
        std::fs::write(victim.join("precious.txt"), "keep").expect("write");
        let err = remove_dir_all(&storage, &storage.join("checkpoints/../../../victim"))
            .expect_err("outside");
        assert!(matches!(err, RunError::Internal { .. }), "{err}");
        assert!(victim.join("precious.txt").is_file());
        let inside = storage.join("checkpoints/f");
        std::fs::create_dir_all(inside.join("offsets")).expect("mkdir");
        remove_dir_all(&storage, &inside).expect("inside");
        assert!(!inside.exists());
        remove_dir_all(&storage, &inside).expect("a missing folder is no error");
    }
}
