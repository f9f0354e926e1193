//! Panics a library raises and catches itself are not failures, and their default
//! report ("thread panicked at …", a backtrace) must not reach the terminal. deltalake
//! aborts a Parquet upload that failed (a full disk) inside `catch_unwind`, and
//! object_store's `BufWriter::abort` panics ("Already shut down") when the failure came
//! from its own shutdown; the write's error itself comes back as an error.

use std::panic::PanicHookInfo;

/// Installs a panic hook that keeps quiet about the panics libraries catch themselves
/// and reports every other panic as before.
pub fn quiet_caught_library_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if caught_by_deltalake(info) {
            tracing::debug!(panic = %info, "a panic deltalake catches itself");
            return;
        }
        report(info);
    }));
}

/// object_store's `BufWriter::abort` after a failed shutdown, which deltalake's
/// `upload_parquet_file` calls inside `catch_unwind`.
fn caught_by_deltalake(info: &PanicHookInfo<'_>) -> bool {
    let message = info
        .payload()
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str));
    message == Some("Already shut down")
        && info
            .location()
            .is_some_and(|l| l.file().contains("object_store") && l.file().ends_with("buffered.rs"))
}
