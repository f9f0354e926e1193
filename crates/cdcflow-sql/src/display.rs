//! `Display` for the pipeline statements: canonical SQL that parses back to the
//! same statement (the round-trip the golden tests check).

use std::fmt::{self, Display, Formatter};

use crate::ast::*;
use crate::sqlparser::ast::Ident;

fn comma<T: Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A property key or value prints bare when it would parse back as the same words.
fn property_text(s: &str) -> String {
    let bare = !s.is_empty()
        && s.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if bare { s.to_string() } else { quoted(s) }
}

impl Display for Statement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Statement::CreateDataset(d) => d.fmt(f),
            Statement::CreateFlow(c) => c.fmt(f),
            Statement::ApplyChanges(a) => {
                write!(f, "APPLY CHANGES INTO ")?;
                a.fmt(f)
            }
            Statement::Set(s) => match &s.value {
                Some(value) => write!(f, "SET {} = {value}", s.key),
                None => write!(f, "SET {}", s.key),
            },
            Statement::Use(u) => match u.kind {
                UseKind::Catalog => write!(f, "USE CATALOG {}", u.name),
                UseKind::Schema => write!(f, "USE SCHEMA {}", u.name),
            },
        }
    }
}

impl Display for DatasetName {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.parts.iter().map(Ident::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

impl Display for CreateDataset {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "CREATE ")?;
        if self.or_refresh {
            write!(f, "OR REFRESH ")?;
        }
        if self.private {
            write!(f, "PRIVATE ")?;
        }
        write!(f, "{} {}", self.kind.sql(), self.name)?;
        let mut elements: Vec<String> = self.columns.iter().map(ToString::to_string).collect();
        elements.extend(self.expectations.iter().map(ToString::to_string));
        elements.extend(self.table_constraints.iter().cloned());
        if !elements.is_empty() {
            write!(f, " ({})", elements.join(", "))?;
        }
        if let Some(c) = &self.comment {
            write!(f, " COMMENT {}", quoted(c))?;
        }
        if !self.partitioned_by.is_empty() {
            write!(f, " PARTITIONED BY ({})", comma(&self.partitioned_by))?;
        }
        if !self.cluster_by.is_empty() {
            write!(f, " CLUSTER BY ({})", comma(&self.cluster_by))?;
        }
        if let Some(l) = &self.location {
            write!(f, " LOCATION {}", quoted(l))?;
        }
        if !self.properties.is_empty() {
            let props: Vec<String> = self
                .properties
                .iter()
                .map(|p| format!("{} = {}", property_text(&p.key), property_text(&p.value)))
                .collect();
            write!(f, " TBLPROPERTIES ({})", props.join(", "))?;
        }
        if let Some(q) = &self.query {
            write!(f, " AS {q}")?;
        }
        Ok(())
    }
}

impl Display for ColumnDef {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.data_type)?;
        if self.not_null {
            write!(f, " NOT NULL")?;
        }
        if let Some(g) = &self.generated {
            write!(f, " GENERATED ALWAYS AS ({g})")?;
        }
        if let Some(i) = &self.identity {
            let how = if i.always { "ALWAYS" } else { "BY DEFAULT" };
            write!(
                f,
                " GENERATED {how} AS IDENTITY (START WITH {} INCREMENT BY {})",
                i.start, i.step
            )?;
        }
        if let Some(d) = &self.default {
            write!(f, " DEFAULT {d}")?;
        }
        for c in &self.constraints {
            write!(f, " {c}")?;
        }
        if let Some(c) = &self.comment {
            write!(f, " COMMENT {}", quoted(c))?;
        }
        Ok(())
    }
}

impl Display for Expectation {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "CONSTRAINT {} EXPECT ({})", self.name, self.condition)?;
        match self.on_violation {
            OnViolation::Warn => Ok(()),
            OnViolation::DropRow => write!(f, " ON VIOLATION DROP ROW"),
            OnViolation::FailUpdate => write!(f, " ON VIOLATION FAIL UPDATE"),
        }
    }
}

impl Display for CreateFlow {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "CREATE FLOW {}", self.name)?;
        if let Some(c) = &self.comment {
            write!(f, " COMMENT {}", quoted(c))?;
        }
        match &self.body {
            FlowBody::AutoCdc(a) => {
                write!(f, " AS AUTO CDC ")?;
                if a.once {
                    write!(f, "ONCE ")?;
                }
                write!(f, "INTO ")?;
                a.fmt(f)
            }
            FlowBody::InsertInto(i) => {
                write!(f, " AS INSERT ")?;
                if i.once {
                    write!(f, "ONCE ")?;
                }
                write!(f, "INTO {} BY NAME {}", i.target, i.query)
            }
        }
    }
}

impl Display for ColumnSelection {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            ColumnSelection::Only(c) => write!(f, "({})", comma(c)),
            ColumnSelection::AllExcept(c) => write!(f, "* EXCEPT ({})", comma(c)),
        }
    }
}

/// Prints the part after `INTO`, shared by both spellings.
impl Display for AutoCdc {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} FROM ", self.target)?;
        match &self.source {
            CdcSource::Dataset(s) if s.streaming => write!(f, "STREAM({})", s.name)?,
            CdcSource::Dataset(s) => write!(f, "{}", s.name)?,
            CdcSource::Query(q) => write!(f, "({})", q.node)?,
            CdcSource::Snapshot(s) => {
                write!(f, "SNAPSHOT ({})", s.query.node)?;
                if let Some(v) = &s.version {
                    write!(f, " WITH VERSION ({})", v.node)?;
                }
            }
        }
        write!(f, " KEYS ({})", comma(&self.keys.node))?;
        if let Some(w) = &self.filter {
            write!(f, " WHERE {}", w.node)?;
        }
        if let Some(i) = &self.ignore_null_updates {
            write!(f, " IGNORE NULL UPDATES")?;
            if let Some(on) = &i.node {
                write!(f, " ON {on}")?;
            }
        }
        if let Some(d) = &self.apply_as_delete {
            write!(f, " APPLY AS DELETE WHEN {}", d.node)?;
        }
        if let Some(t) = &self.apply_as_truncate {
            write!(f, " APPLY AS TRUNCATE WHEN {}", t.node)?;
        }
        if self.snapshot().is_none() {
            write!(f, " SEQUENCE BY {}", self.sequence_by.node)?;
        }
        if let Some(c) = &self.columns {
            write!(f, " COLUMNS {}", c.node)?;
        }
        if let Some(s) = &self.stored_as {
            write!(f, " STORED AS SCD TYPE {}", s.node)?;
        }
        if self.stored_as_bitemporal.is_some() {
            write!(f, " STORED AS BITEMPORAL")?;
        }
        if let Some(s) = &self.system_sequence_by {
            write!(f, " SYSTEM SEQUENCE BY {}", s.node)?;
        }
        if let Some(t) = &self.track_history {
            write!(f, " TRACK HISTORY ON {}", t.node)?;
        }
        Ok(())
    }
}
