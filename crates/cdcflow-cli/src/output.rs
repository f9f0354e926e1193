//! Where commands print. A reader that goes away (`cdcflow run | true`,
//! `cdcflow status | head -c1`) is an ordinary end, as for other Unix tools: the rest of
//! the output is dropped, nothing is said about it, and the work done and the exit
//! status stand (std's `println!` would panic, after a run had committed). Any other
//! failure to write (a full disk) is reported once, when the command ends, and fails it.
//! Messages on stderr are best effort: there is nowhere left to report their failure.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static READER_GONE: AtomicBool = AtomicBool::new(false);
static WRITE_FAILED: Mutex<Option<io::Error>> = Mutex::new(None);

/// Stdout, noting how writing to it failed; nothing more is written once the reader has
/// gone.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if reader_gone() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        io::stdout().write(buf).inspect_err(note)
    }

    fn flush(&mut self) -> io::Result<()> {
        if reader_gone() {
            return Ok(());
        }
        io::stdout().flush().inspect_err(note)
    }
}

fn note(e: &io::Error) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        READER_GONE.store(true, Ordering::Relaxed);
    } else if let Ok(mut failed) = WRITE_FAILED.lock()
        && failed.is_none()
    {
        *failed = Some(io::Error::new(e.kind(), e.to_string()));
    }
}

/// Whether stdout's reader has gone: there is no point producing more output.
pub fn reader_gone() -> bool {
    READER_GONE.load(Ordering::Relaxed)
}

/// Whether writing to stdout has failed, for whatever reason.
pub fn failed() -> bool {
    reader_gone() || !matches!(WRITE_FAILED.lock().as_deref(), Ok(None))
}

/// One line on stdout: what `outln!` writes.
pub fn line(args: fmt::Arguments<'_>) {
    let _ = writeln!(Stdout, "{args}");
}

/// One line on stderr: what `errln!` writes.
pub fn error_line(args: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "{args}");
}

/// The exit status of a command that ended with `code`: flushes stdout, and fails the
/// command when its output could not be written for another reason than a reader gone.
pub fn finish(code: ExitCode) -> ExitCode {
    let _ = Stdout.flush();
    match WRITE_FAILED.lock().ok().and_then(|mut f| f.take()) {
        Some(e) => {
            error_line(format_args!("error: cannot write the output: {e}"));
            ExitCode::from(1)
        }
        None => code,
    }
}
