//! No import cycle between the modules of `cdcflow-runtime/src` (issue 13 §6): a module
//! may use its descendants and its ancestors, but two modules that are neither may not
//! depend on each other, however far round. Read from the source: every `use` of a
//! `crate::`, `super::` or `self::` path and every `crate::` path in code (comments and
//! test modules aside), resolved to the deepest module that exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`cdc::kernel`) → its source text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).expect("read");
            out.insert(parts.join("::"), text);
        }
    }
    out
}

/// The code of a module: no comment lines, no text of string literals (a message may
/// say "use"), nothing from its test module on.
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    let lines = text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    without_string_text(&lines)
}

/// `code` with the text inside its string literals (`"…"`, `r"…"`, `r#"…"#`) left
/// out, the quotes kept; character literals (`'"'`) are not strings.
fn without_string_text(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // A character literal holding a quote or an escape.
        if c == '\'' && i + 2 < chars.len() && (chars[i + 1] == '"' || chars[i + 1] == '\\') {
            let close = (i + 2..chars.len().min(i + 12)).find(|&j| chars[j] == '\'');
            if let Some(close) = close {
                out.extend(&chars[i..=close]);
                i = close + 1;
                continue;
            }
        }
        // A raw string: r, then hashes, then a quote; it ends at a quote and as many.
        if c == 'r' && (i == 0 || !chars[i - 1].is_alphanumeric() && chars[i - 1] != '_') {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) == Some(&'"') {
                let mut j = i + 2 + hashes;
                while j < chars.len()
                    && !(chars[j] == '"'
                        && chars[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == '#')
                            .count()
                            == hashes)
                {
                    j += 1;
                }
                out.push_str("\"\"");
                i = j + 1 + hashes;
                continue;
            }
        }
        if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

#[test]
fn string_literals_are_no_code() {
    let code = r##"let a = "it cannot use workers"; use crate::x; let b = r#"use y"#; let q = '"'; use crate::z;"##;
    assert_eq!(
        without_string_text(code),
        r#"let a = ""; use crate::x; let b = ""; let q = '"'; use crate::z;"#
    );
    assert_eq!(
        paths(&without_string_text(code)),
        ["crate::x", "crate::z", "crate::x", "crate::z"]
    );
}

/// The paths `module`'s code names: `use` trees flattened (`a::{b, c::d}` gives `a::b`
/// and `a::c::d`) and inline `crate::` paths.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("use ") else {
            continue;
        };
        let tree: String = statement[at + 4..].split_whitespace().collect();
        flatten("", &tree, &mut out);
    }
    let bytes = code.as_bytes();
    let mut i = 0;
    while let Some(found) = code[i..].find("crate::") {
        let start = i + found;
        let mut end = start;
        while end < bytes.len()
            && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_' || bytes[end] == b':')
        {
            end += 1;
        }
        out.push(code[start..end].trim_end_matches(':').to_string());
        i = end.max(start + 1);
    }
    out
}

fn flatten(prefix: &str, tree: &str, out: &mut Vec<String>) {
    match tree.find('{') {
        None => out.push(format!(
            "{prefix}{}",
            tree.split(" as ").next().unwrap_or(tree)
        )),
        Some(open) => {
            let head = &tree[..open];
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut depth = 0;
            let mut from = 0;
            for (i, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        flatten(&format!("{prefix}{head}"), &inner[from..i], out);
                        from = i + 1;
                    }
                    _ => {}
                }
            }
            flatten(&format!("{prefix}{head}"), &inner[from..], out);
        }
    }
}

/// The module `path` (named in `module`) is in, if it is one of `known`.
fn resolve(module: &str, path: &str, known: &BTreeMap<String, String>) -> Option<String> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = match segments.first().copied() {
        Some("crate") => {
            segments.remove(0);
            vec![]
        }
        Some("super") => {
            let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
            while segments.first() == Some(&"super") {
                segments.remove(0);
                base.pop();
            }
            base
        }
        Some("self") => {
            segments.remove(0);
            module.split("::").filter(|s| !s.is_empty()).collect()
        }
        _ => return None,
    };
    let mut found = None;
    for segment in segments {
        base.push(segment);
        let candidate = base.join("::");
        if known.contains_key(&candidate) {
            found = Some(candidate);
        }
    }
    found
}

/// Whether `a` is `b` or one of its ancestors.
fn within(a: &str, b: &str) -> bool {
    a.is_empty() || a == b || b.starts_with(&format!("{a}::"))
}

#[test]
fn no_two_modules_of_the_runtime_depend_on_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &modules {
        let targets = edges.entry(module.clone()).or_default();
        for path in paths(&code(text)) {
            let Some(target) = resolve(module, &path, &modules) else {
                continue;
            };
            if !within(&target, module) && !within(module, &target) {
                targets.insert(target);
            }
        }
    }
    // A cycle is a module that reaches itself.
    let mut cycles = Vec::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, trail)) = todo.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    cycles.push(trail.join(" -> ") + " -> " + start);
                } else if seen.insert(next.clone()) {
                    let mut longer = trail.clone();
                    longer.push(next.clone());
                    todo.push((next.clone(), longer));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}
