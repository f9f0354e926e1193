//! `cdcflow validate`'s diagnostics in the forms CI systems show beside the code:
//! GitHub Actions workflow commands (an annotation on the file and line of a pull
//! request) and a SARIF 2.1.0 log (code-scanning views: GitHub, GitLab, Azure DevOps,
//! IDE viewers). Files are named as `validate` names them, from the folder it ran in,
//! so a CI job run at the repository's root annotates the repository's files.

use cdcflow_plan::{Diagnostic, Severity};
use serde_json::{Value, json};

/// One workflow command per diagnostic: `::error file=…,line=…,col=…,endLine=…,
/// endColumn=…,title=code::message`, the help on the message's next line.
/// <https://docs.github.com/actions/reference/workflow-commands-for-github-actions>
pub fn github(diagnostics: &[Diagnostic]) -> Vec<String> {
    diagnostics
        .iter()
        .map(|d| {
            let command = match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "notice",
            };
            let mut properties = Vec::new();
            if let Some(at) = &d.at {
                let (start, end) = (at.span.start, at.span.end);
                properties.push(format!("file={}", property(&at.path)));
                properties.push(format!("line={}", start.line));
                properties.push(format!("col={}", start.column));
                // GitHub's end column is the last one marked; ours is the one after.
                let end_column = match end.line == start.line {
                    true => end.column.saturating_sub(1).max(start.column),
                    false => end.column.saturating_sub(1).max(1),
                };
                properties.push(format!("endLine={}", end.line.max(start.line)));
                properties.push(format!("endColumn={end_column}"));
            }
            properties.push(format!("title={}", property(d.code)));
            format!(
                "::{command} {}::{}",
                properties.join(","),
                data(&with_help(d))
            )
        })
        .collect()
}

/// The diagnostic's message, and its help on the next line.
fn with_help(d: &Diagnostic) -> String {
    match &d.help {
        Some(help) => format!("{}\nhelp: {help}", d.message),
        None => d.message.clone(),
    }
}

/// A workflow command's message, escaped as the Actions toolkit escapes it.
fn data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: as [`data`], and its separators too.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}

/// One SARIF 2.1.0 log of one run: a rule per diagnostic code, a result per diagnostic.
/// Columns count characters (`columnKind: unicodeCodePoints`), and a region's end
/// column is the one after it, as SARIF's is.
/// <https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html>
pub fn sarif(diagnostics: &[Diagnostic]) -> String {
    let mut codes: Vec<&str> = diagnostics.iter().map(|d| d.code).collect();
    codes.sort_unstable();
    codes.dedup();
    let rules: Vec<Value> = codes
        .iter()
        .map(|code| {
            json!({
                "id": code,
                "shortDescription": { "text": format!("{code}: see docs/diagnostics.md") },
            })
        })
        .collect();
    let results: Vec<Value> = diagnostics
        .iter()
        .map(|d| {
            let text = with_help(d);
            let mut result = json!({
                "ruleId": d.code,
                "ruleIndex": codes.binary_search(&d.code).unwrap_or_default(),
                "level": match d.severity {
                    Severity::Error => "error",
                    Severity::Warning => "warning",
                    Severity::Note => "note",
                },
                "message": { "text": text },
            });
            if let Some(at) = &d.at {
                result["locations"] = json!([{
                    "physicalLocation": {
                        "artifactLocation": { "uri": at.path, "uriBaseId": "%SRCROOT%" },
                        "region": {
                            "startLine": at.span.start.line,
                            "startColumn": at.span.start.column,
                            "endLine": at.span.end.line,
                            "endColumn": at.span.end.column,
                        },
                    },
                    "message": { "text": at.label },
                }]);
            }
            result
        })
        .collect();
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "cdcflow",
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": rules,
                },
            },
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    });
    serde_json::to_string_pretty(&log).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workflow_commands_escape_their_separators() {
        assert_eq!(data("50%\nnext"), "50%25%0Anext");
        assert_eq!(property("a:b,c"), "a%3Ab%2Cc");
        let d = Diagnostic::warning("cdcflow::x", "no location");
        assert_eq!(
            github(&[d]),
            ["::warning title=cdcflow%3A%3Ax::no location"]
        );
    }
}
