//! `syncs:` of pipeline.yaml become files of generated SQL, one per table
//! ([`crate::syncs`]), before the files are collected: from then on a synced table is
//! planned and checked as one written by hand.

use std::collections::BTreeMap;
use std::sync::Arc;

use cdcflow_sql::preprocess::Preprocessed;
use cdcflow_sql::{Location, Span};

use super::{CONFIG_FILE, Resolver};
use crate::config::PipelineConfig;
use crate::connections::{ConnectionKind, Target};
use crate::diagnostic::{Diagnostic, Located};
use crate::pipeline::SourceFile;
use crate::syncs::{
    PLACEHOLDERS, Scd, SourceTable, SyncConfig, SyncedTable, TablePattern, default_schema, fill,
    table_sql,
};

/// A sync as this load expanded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sync {
    pub name: String,
    pub connection: String,
    pub kind: ConnectionKind,
    /// The schema of a table named without one (`public`, or a MySQL connection's
    /// database).
    pub default_schema: String,
    /// The schemas whose tables the server is asked for (`None`: every schema).
    pub schemas: Option<Vec<String>>,
    /// The tables synced, with what they become; `None` until the server was asked
    /// (then only tables named exactly, with their keys given, are known).
    pub tables: Option<Vec<SyncedTable>>,
    /// Tables a pattern matched that are not synced, and why.
    pub skipped: Vec<(SourceTable, String)>,
}

const SCD_HELP: &str = "scd_type: 1 keeps the current rows, 2 their history, [1, 2] both";

/// An `scd_type` written that is none of 1, 2 and [1, 2].
fn invalid_scd(types: Option<&crate::syncs::ScdTypes>) -> bool {
    types.is_some_and(|t| t.resolve().is_none())
}

/// Where a generated file says it comes from.
pub fn generated_path(sync: &str, table: &SourceTable) -> String {
    format!("{CONFIG_FILE}#syncs.{sync}/{table}.sql")
}

/// The names of the synced tables' datasets and flows, for collisions.
struct Claimed {
    by: BTreeMap<String, String>,
}

impl Resolver<'_> {
    /// Each sync of pipeline.yaml as generated files; `found` holds the tables the
    /// server has, by sync, when it was asked.
    pub(super) fn expand_syncs(
        &mut self,
        config: &PipelineConfig,
        text: &Arc<str>,
        discovered: &super::Discovered,
    ) -> Vec<Sync> {
        let mut syncs = Vec::new();
        let mut claimed = Claimed {
            by: BTreeMap::new(),
        };
        for (name, sync) in &config.syncs {
            if let Some(expanded) =
                self.expand_sync(name, sync, text, discovered.tables.get(name), &mut claimed)
            {
                let gone = discovered
                    .gone
                    .get(name)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let storage = self.root.join(&config.storage);
                let stored = (storage.as_path(), discovered.stored.as_ref());
                self.keep_gone(&expanded, sync, gone, stored, &mut claimed);
                syncs.push(expanded);
            }
        }
        syncs
    }

    fn sync_diagnostic(
        &mut self,
        d: Diagnostic,
        text: &Arc<str>,
        sync: &str,
        needle: &str,
        help: String,
    ) {
        let d = match yaml_place(text, sync, needle) {
            Some(span) => d.at(Located {
                path: CONFIG_FILE.into(),
                text: Arc::clone(text),
                span,
                label: "here".into(),
            }),
            None => d,
        };
        self.diags.push(d.help(help));
    }

    fn expand_sync(
        &mut self,
        name: &str,
        sync: &SyncConfig,
        text: &Arc<str>,
        found: Option<&Vec<SourceTable>>,
        claimed: &mut Claimed,
    ) -> Option<Sync> {
        const CODE: &str = "cdcflow::sync";
        let Some(connection) = self.connections.get(&sync.connection).cloned() else {
            let known: Vec<&str> = self.connections.keys().map(String::as_str).collect();
            self.sync_diagnostic(
                Diagnostic::error(
                    CODE,
                    format!(
                        "sync `{name}` reads connection `{}`, which `connections:` does not declare",
                        sync.connection
                    ),
                ),
                text,
                name,
                "connection:",
                format!(
                    "declare it under `connections:` (kind postgres or mysql); declared: {}",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            );
            return None;
        };
        let kind = connection.kind;
        let database = match &connection.target {
            Target::Parts { database, .. } => Some(database.as_str()),
            _ => None,
        };
        let default = default_schema(kind, database);
        let mut ok = true;
        let mut patterns = |list: &[&str], what: &str, this: &mut Self| -> Vec<TablePattern> {
            let mut out = Vec::new();
            for item in list {
                match TablePattern::parse(item, kind, &default) {
                    Some(p) => out.push(p),
                    None => {
                        ok = false;
                        this.sync_diagnostic(
                            Diagnostic::error(
                                CODE,
                                format!("`{item}` in `{what}` of sync `{name}` is no table name or pattern"),
                            ),
                            text,
                            name,
                            item,
                            "write `schema.table` or `table` (a MySQL connection given by dsn_env has no database of its own: name it), each part a name or a glob (`*`, `?`, `[…]`): `shop.*`, `public.order_*`".into(),
                        );
                    }
                }
            }
            out
        };
        let include = patterns(&sync.tables.items(), "tables", self);
        let excluded: Vec<&str> = sync.exclude.iter().map(String::as_str).collect();
        let exclude = patterns(&excluded, "exclude", self);
        let overrides: Vec<(String, TablePattern)> = sync
            .overrides
            .keys()
            .filter_map(|k| TablePattern::parse(k, kind, &default).map(|p| (k.clone(), p)))
            .collect();
        for key in sync.overrides.keys() {
            if !overrides.iter().any(|(k, _)| k == key) {
                ok = false;
                self.sync_diagnostic(
                    Diagnostic::error(
                        CODE,
                        format!("override `{key}` of sync `{name}` is no table name"),
                    ),
                    text,
                    name,
                    key,
                    "name a table as `tables:` does: `schema.table` or `table`".into(),
                );
            }
        }
        if invalid_scd(sync.scd_type.as_ref()) {
            ok = false;
            self.sync_diagnostic(
                Diagnostic::error(
                    CODE,
                    format!("`scd_type` of sync `{name}` is not 1, 2 or [1, 2]"),
                ),
                text,
                name,
                "scd_type",
                SCD_HELP.into(),
            );
        }
        for template in [&sync.bronze_table, &sync.target, &sync.history_target] {
            let probe = SourceTable {
                schema: "s".into(),
                name: "t".into(),
                keys: vec![],
            };
            if fill(template, name, &probe).is_none() {
                ok = false;
                self.sync_diagnostic(
                    Diagnostic::error(
                        CODE,
                        format!("the name template `{template}` of sync `{name}` holds an unknown placeholder"),
                    ),
                    text,
                    name,
                    template,
                    format!("a name template may hold {}", PLACEHOLDERS.join(", ")),
                );
            }
        }
        // Each override's own SCD type and names, whatever tables the server has.
        for (key, over) in &sync.overrides {
            if invalid_scd(over.scd_type.as_ref()) {
                ok = false;
                self.sync_diagnostic(
                    Diagnostic::error(
                        CODE,
                        format!(
                            "`scd_type` of override `{key}` of sync `{name}` is not 1, 2 or [1, 2]"
                        ),
                    ),
                    text,
                    name,
                    key,
                    SCD_HELP.into(),
                );
            }
            let probe = SourceTable {
                schema: "s".into(),
                name: "t".into(),
                keys: vec![],
            };
            let names = [&over.bronze_table, &over.target, &over.history_target];
            if names
                .into_iter()
                .flatten()
                .any(|t| fill(t, name, &probe).is_none())
            {
                ok = false;
                self.sync_diagnostic(
                    Diagnostic::error(
                        CODE,
                        format!("a name of override `{key}` of sync `{name}` holds an unknown placeholder"),
                    ),
                    text,
                    name,
                    key,
                    format!("a name template may hold {}", PLACEHOLDERS.join(", ")),
                );
            }
        }
        let schemas = match include.iter().map(TablePattern::exact_schema).collect() {
            Some(mut list) => {
                let list: &mut Vec<String> = &mut list;
                list.sort();
                list.dedup();
                Some(list.clone())
            }
            None => None,
        };
        let mut expanded = Sync {
            name: name.to_string(),
            connection: sync.connection.clone(),
            kind,
            default_schema: default.clone(),
            schemas,
            tables: None,
            skipped: vec![],
        };
        if !ok {
            return Some(expanded);
        }
        // The tables: those the server has that the patterns match, or without the
        // server those named exactly whose keys the overrides give.
        let listed = |t: &SourceTable| {
            include.iter().any(|p| p.matches(&t.schema, &t.name))
                && !exclude.iter().any(|p| p.matches(&t.schema, &t.name))
        };
        let overrides_of = |t: &SourceTable| -> Vec<&String> {
            overrides
                .iter()
                .filter(|(_, p)| p.matches(&t.schema, &t.name))
                .map(|(k, _)| k)
                .collect()
        };
        let override_of = |t: &SourceTable| {
            overrides_of(t)
                .first()
                .and_then(|k| sync.overrides.get(k.as_str()))
        };
        let mut candidates: Vec<(SourceTable, bool)> = match found {
            Some(tables) => {
                for p in include.iter().filter(|p| p.is_exact()) {
                    if !tables.iter().any(|t| p.matches(&t.schema, &t.name)) {
                        self.sync_diagnostic(
                            Diagnostic::error(
                                CODE,
                                format!("sync `{name}` lists table `{}`, which the server of connection `{}` does not have", p.text, sync.connection),
                            ),
                            text,
                            name,
                            &p.text,
                            "check the name (and its schema); a table created later is synced from the run after it exists".into(),
                        );
                    }
                }
                tables
                    .iter()
                    .filter(|t| listed(t))
                    .map(|t| {
                        let exact = include
                            .iter()
                            .any(|p| p.is_exact() && p.matches(&t.schema, &t.name));
                        (t.clone(), exact)
                    })
                    .collect()
            }
            None => {
                let mut known = vec![];
                let mut unknown = 0;
                for p in &include {
                    let named = match (p.exact_schema(), p.exact_table()) {
                        (Some(schema), Some(name)) if p.is_exact() => Some(SourceTable {
                            schema,
                            name,
                            keys: vec![],
                        }),
                        _ => None,
                    };
                    match named {
                        Some(mut t) if listed(&t) => {
                            match override_of(&t).and_then(|o| o.keys.clone()) {
                                Some(keys) => {
                                    t.keys = keys;
                                    known.push((t, true));
                                }
                                None => unknown += 1,
                            }
                        }
                        Some(_) => {}
                        None => unknown += 1,
                    }
                }
                if unknown > 0 {
                    self.diags.push(
                        Diagnostic::note(
                            "cdcflow::schema_unknown",
                            format!(
                                "sync `{name}`: which tables `{}` matches, and their keys, are known only to the server of connection `{}`; the run asks it (and so does validate, when the server answers)",
                                sync.tables.items().join("`, `"),
                                sync.connection
                            ),
                        ),
                    );
                }
                known
            }
        };
        candidates.sort();
        candidates.dedup();
        let mut tables = Vec::new();
        for (source, exact) in candidates {
            if let [first, second, ..] = overrides_of(&source).as_slice() {
                self.sync_diagnostic(
                    Diagnostic::error(
                        CODE,
                        format!(
                            "overrides `{first}` and `{second}` of sync `{name}` both name {source}"
                        ),
                    ),
                    text,
                    name,
                    second,
                    "give each table one override".into(),
                );
                continue;
            }
            let over = override_of(&source).cloned().unwrap_or_default();
            let keys = over.keys.clone().unwrap_or_else(|| source.keys.clone());
            if keys.is_empty() {
                let why = match kind {
                    ConnectionKind::Mysql => "it has no primary key, by which read_mysql copies and follows a table: give it one, or leave it out with `exclude:`",
                    ConnectionKind::Postgres => "it has no primary key: give it one, or give it REPLICA IDENTITY FULL and its key columns as `keys:` under `overrides:`, or leave it out with `exclude:`",
                }
                .to_string();
                if exact {
                    self.sync_diagnostic(
                        Diagnostic::error(
                            CODE,
                            format!("table {source} of sync `{name}` has no primary key"),
                        ),
                        text,
                        name,
                        &include
                            .iter()
                            .find(|p| p.is_exact() && p.matches(&source.schema, &source.name))
                            .map_or_else(|| "tables".to_string(), |p| p.text.clone()),
                        format!("AUTO CDC needs a key: {why}"),
                    );
                } else {
                    self.diags.push(Diagnostic::warning(
                        CODE,
                        format!("table {source} matches sync `{name}` but is not synced: {why}"),
                    ));
                    expanded
                        .skipped
                        .push((source.clone(), "no primary key".into()));
                }
                continue;
            }
            // Both checked above: the override's and the sync's.
            let table_scd = over
                .scd_type
                .as_ref()
                .or(sync.scd_type.as_ref())
                .and_then(crate::syncs::ScdTypes::resolve)
                .unwrap_or(Scd::One);
            let named = |template: Option<&String>, default: &String| {
                fill(template.unwrap_or(default), name, &source)
            };
            let (Some(bronze), Some(target), Some(history)) = (
                named(over.bronze_table.as_ref(), &sync.bronze_table),
                named(over.target.as_ref(), &sync.target),
                named(over.history_target.as_ref(), &sync.history_target),
            ) else {
                // The templates were checked above: the table's own name holds a brace.
                self.sync_diagnostic(
                    Diagnostic::error(
                        CODE,
                        format!("the name of table {source} of sync `{name}` holds `{{` or `}}`, which a name template cannot take"),
                    ),
                    text,
                    name,
                    "tables",
                    "give the table its names under `overrides:` (bronze_table, target, history_target) without placeholders, or leave it out with `exclude:`".into(),
                );
                continue;
            };
            let (current, history) = match table_scd {
                Scd::One => (Some(target), None),
                Scd::Two => (None, Some(target)),
                Scd::Both => (Some(target), Some(history)),
            };
            let synced = SyncedTable {
                source: source.clone(),
                bronze,
                current,
                history,
                keys,
                exclude_columns: over.exclude_columns.clone(),
                track_history_on: over.track_history_on.clone(),
                track_history_except: over.track_history_except.clone(),
                max_changes_per_batch: sync.max_changes_per_batch,
            };
            let names = [
                Some(&synced.bronze),
                synced.current.as_ref(),
                synced.history.as_ref(),
            ];
            let mut clash = None;
            for n in names.into_iter().flatten() {
                let by = format!("{source} (sync `{name}`)");
                if let Some(other) = claimed.by.insert(n.to_lowercase(), by) {
                    clash = Some((n.clone(), other));
                }
            }
            if let Some((dataset, other)) = clash {
                self.sync_diagnostic(
                    Diagnostic::error(
                        CODE,
                        format!("sync `{name}` names a table `{dataset}` for {source}, and so it does for {other}"),
                    ),
                    text,
                    name,
                    "tables",
                    "tables of two schemas with one name need the schema in their names: `target: '{schema}_{table}'` (and the same for bronze_table and history_target), or a `target:` under `overrides:`".into(),
                );
                continue;
            }
            let sql = table_sql(name, &sync.connection, kind, &synced);
            self.files.push(SourceFile {
                path: generated_path(name, &source),
                text: Arc::from(sql.as_str()),
                pre: Preprocessed::verbatim(&sql),
            });
            tables.push(synced);
        }
        if let Some(found) = found {
            for (key, p) in &overrides {
                let used = found
                    .iter()
                    .any(|t| listed(t) && p.matches(&t.schema, &t.name));
                if !used {
                    self.sync_diagnostic(
                        Diagnostic::warning(
                            CODE,
                            format!(
                                "override `{key}` of sync `{name}` names no table the sync reads"
                            ),
                        ),
                        text,
                        name,
                        key,
                        "check its name against `tables:` and `exclude:`".into(),
                    );
                }
            }
            if tables.is_empty() && expanded.skipped.is_empty() {
                self.sync_diagnostic(
                    Diagnostic::warning(
                        CODE,
                        format!(
                            "sync `{name}` matches no table on the server of connection `{}`",
                            sync.connection
                        ),
                    ),
                    text,
                    name,
                    "tables",
                    "check `tables:`; a table created later is synced from the run after it exists"
                        .into(),
                );
            }
        }
        let known = found.is_some() || tables.len() == include.len();
        expanded.tables = known.then_some(tables);
        Some(expanded)
    }
}

impl Resolver<'_> {
    /// The tables of `gone` (synced once, no longer on the server) as tables without
    /// flows: what they hold stays readable under their names.
    fn keep_gone(
        &mut self,
        expanded: &Sync,
        sync: &SyncConfig,
        gone: &[SourceTable],
        (storage, stored): (
            &std::path::Path,
            Option<&std::collections::BTreeSet<String>>,
        ),
        claimed: &mut Claimed,
    ) {
        let synced = expanded.tables.iter().flatten();
        for table in gone {
            if synced
                .clone()
                .any(|t| t.source.schema == table.schema && t.source.name == table.name)
            {
                continue;
            }
            let mut sql = format!(
                "-- Synced by pipeline.yaml, syncs: {}, until {table} left the server: kept, without flows.\n",
                expanded.name
            );
            let source = (expanded.kind, expanded.default_schema.as_str());
            let names = match stored {
                Some(stored) => crate::syncs::fed_names(&expanded.name, sync, source, table)
                    .into_iter()
                    .filter(|n| stored.contains(n))
                    .collect(),
                None => crate::syncs::stored_names(storage, &expanded.name, sync, source, table),
            };
            for name in names {
                if claimed.by.contains_key(&name.to_lowercase()) {
                    continue;
                }
                claimed
                    .by
                    .insert(name.to_lowercase(), format!("{table} (gone)"));
                sql.push_str(&format!(
                    "CREATE OR REFRESH STREAMING TABLE `{}` COMMENT 'No longer updated: {table} is gone from the server of sync {}';\n",
                    name.replace('`', "``"),
                    expanded.name,
                ));
            }
            self.files.push(SourceFile {
                path: generated_path(&expanded.name, table),
                text: Arc::from(sql.as_str()),
                pre: Preprocessed::verbatim(&sql),
            });
        }
    }
}

/// While a sync's tables are not known (its server was not asked), a table it may
/// define is not unknown: a reference to one is a note, not an error.
pub(super) fn unknown_until_asked(syncs: &[Sync], diags: &mut [Diagnostic]) {
    let waiting: Vec<&str> = syncs
        .iter()
        .filter(|s| s.tables.is_none())
        .map(|s| s.name.as_str())
        .collect();
    if waiting.is_empty() {
        return;
    }
    for d in diags
        .iter_mut()
        .filter(|d| d.is_error() && d.code == "cdcflow::unknown_dataset")
    {
        d.severity = crate::diagnostic::Severity::Note;
        d.message = format!(
            "{} (it may be a table of sync `{}`, known once its server is asked)",
            d.message,
            waiting.join("`, `")
        );
    }
}

/// Where `needle` stands in sync `sync` of pipeline.yaml: the first line holding it
/// after the sync's own key under `syncs:`.
fn yaml_place(text: &str, sync: &str, needle: &str) -> Option<Span> {
    let lines: Vec<&str> = text.lines().collect();
    let syncs = lines.iter().position(|l| l.trim_end() == "syncs:")?;
    let key = format!("{sync}:");
    let start = (syncs + 1..lines.len()).find(|&i| lines[i].trim_start().starts_with(&key))?;
    let (i, col) = (start..lines.len()).find_map(|i| lines[i].find(needle).map(|c| (i, c)))?;
    let col = lines[i][..col].chars().count() as u64 + 1;
    let line = i as u64 + 1;
    Some(Span::new(
        Location::new(line, col),
        Location::new(line, col + needle.chars().count() as u64),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_needle_is_found_inside_its_sync() {
        let text = "name: p\nconnections:\n  shop:\n    kind: mysql\nsyncs:\n  shop:\n    connection: shop\n";
        let span = yaml_place(text, "shop", "shop").expect("a place");
        assert_eq!((span.start.line, span.start.column), (6, 3));
        let span = yaml_place(text, "shop", "connection: shop").expect("a place");
        assert_eq!((span.start.line, span.start.column), (7, 5));
    }
}
