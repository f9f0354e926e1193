//! Crash injection for the crash-safety tests: `CDCFLOW_FAILPOINT=name[,name…]` makes
//! the process abort (no unwinding, no destructors, as a SIGKILL would) when it reaches
//! a point of that name. Points: `offsets:<flow>` (offsets written, nothing committed),
//! `before-commit:<table>` and `committed:<table>` around every Delta commit;
//! `optimize-staged:<table>` and `optimize-committed:<table>` around a compaction's
//! commit; in a vacuum `vacuum-started:<table>` (`VACUUM START` committed, nothing
//! deleted), `vacuum-deleting:<table>` (one file deleted) and `vacuum-ended:<table>`
//! (`VACUUM END` committed). An AUTO CDC state table is `<target>__state`. A slice
//! of a split AUTO CDC batch (on a worker, or in the run): `apply-task-start:<target>`
//! (nothing read) and `apply-task:<target>` (its files written, its changes not
//! returned). `name=stop` stops the process instead (SIGSTOP, its connections left
//! open), as a machine that vanishes without a word: the worker-timeout test uses it.

/// Aborts (or stops) the process when `CDCFLOW_FAILPOINT` names `point`.
pub fn hit(point: &str) {
    let Ok(wanted) = std::env::var("CDCFLOW_FAILPOINT") else {
        return;
    };
    for w in wanted.split(',') {
        let (name, action) = w.trim().split_once('=').unwrap_or((w.trim(), "abort"));
        if !name.eq_ignore_ascii_case(point) {
            continue;
        }
        if action == "stop" {
            eprintln!("cdcflow: failpoint {point}: stopping");
            let me = std::process::id().to_string();
            let _ = std::process::Command::new("kill")
                .args(["-STOP", &me])
                .status();
            return;
        }
        eprintln!("cdcflow: failpoint {point}: aborting");
        std::process::abort();
    }
}
