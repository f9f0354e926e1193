//! How a command prints a run's error, as validation diagnostics are printed: a first
//! line a script can match (`error: <message>`), then miette's report of it with the
//! error's stable code (`cdcflow::run::…`, or `cdcflow::internal` for a defect, whose
//! message asks for a report) and its help.

use std::fmt;

use cdcflow_runtime::RunError;
use miette::{GraphicalReportHandler, GraphicalTheme};

/// Prints `e` on stderr.
pub fn print(e: &RunError) {
    print_as(e, &e.to_string());
}

/// Prints `e` on stderr with `message` in place of its own (a query's error, worded
/// for the query's author).
pub fn print_as(e: &RunError, message: &str) {
    errln!("error: {message}");
    let mut out = String::new();
    let shown = Shown { error: e, message };
    match report_handler().render_report(&mut out, &shown) {
        Ok(()) => errln!("{}", out.trim_end()),
        Err(_) => {
            if let Some(h) = e.help() {
                errln!("  help: {h}");
            }
        }
    }
}

/// miette's renderer for stderr, as validate and every command print: colour only when
/// stderr is a terminal.
pub fn report_handler() -> GraphicalReportHandler {
    let theme = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    GraphicalReportHandler::new_themed(theme)
}

/// A run's error with the message it is shown with.
struct Shown<'a> {
    error: &'a RunError,
    message: &'a str,
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.error, f)
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message)
    }
}

// No source chain: each error's message already says what its source said, in the
// words the user reads (a query's error is reworded from DataFusion's).
impl std::error::Error for Shown<'_> {}

impl miette::Diagnostic for Shown<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        miette::Diagnostic::code(self.error)
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        miette::Diagnostic::help(self.error)
    }
}
