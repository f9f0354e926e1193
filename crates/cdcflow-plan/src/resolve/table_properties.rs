//! Table properties whose values a run reads (`TBLPROPERTIES (…)`), checked without
//! data: a value the run could not use, or would read as something else than meant
//! (`pipelines.reset.allowed = 'flase'` allowing resets), is refused here.

use super::*;

use crate::table_properties::{DELETION_VECTORS, RESET_ALLOWED, TOMBSTONE_RETENTION};

/// Properties that are `true` or `false`.
const BOOLEAN: [&str; 2] = [RESET_ALLOWED, DELETION_VECTORS];

impl Resolver<'_> {
    pub(super) fn check_table_properties(&mut self) {
        for d in 0..self.datasets.len() {
            let (file, table) = (self.datasets[d].file, self.datasets[d].name.clone());
            for p in self.datasets[d].def.properties.clone() {
                let value = p.value.trim();
                let problem = if p.key.eq_ignore_ascii_case(TOMBSTONE_RETENTION) {
                    match value.parse::<i64>() {
                        Ok(seconds) if seconds >= 0 => None,
                        _ => Some((
                            format!("`{}` = '{}' is not a number of seconds", p.key, p.value),
                            "give a whole number of seconds, 0 or more: how long a deleted key's tombstone is kept, so that late events for it are recognised (default 172800, two days)",
                        )),
                    }
                } else if BOOLEAN.iter().any(|b| p.key.eq_ignore_ascii_case(b))
                    && !value.eq_ignore_ascii_case("true")
                    && !value.eq_ignore_ascii_case("false")
                {
                    Some((
                        format!("`{}` = '{}' is neither true nor false", p.key, p.value),
                        "give 'true' or 'false'",
                    ))
                } else {
                    None
                };
                if let Some((message, help)) = problem {
                    self.error(
                        file,
                        p.span,
                        "cdcflow::table_property",
                        format!("table `{table}`: {message}"),
                        "this property",
                        Some(help.into()),
                    );
                }
            }
        }
    }
}
