//! Names as Unity Catalog reads them: a dataset is `catalog.schema.name`, and a name
//! written with fewer parts takes the rest from the defaults in effect where it is
//! written: the pipeline's `catalog` and `schema` (pipeline.yaml), changed for the rest
//! of a file by `USE CATALOG` / `USE SCHEMA`. `LIVE.name` is the pipeline's own dataset:
//! it takes the pipeline's defaults, whatever a `USE` said. A part that neither the
//! name nor a default gives is unknown and matches any value, so a pipeline that sets
//! no defaults finds `orders` in `main.bronze.orders`, as it always has; two datasets
//! that a reference matches equally are an ambiguity, not a guess.

/// A dataset's identity, or what a reference asks for; parts compare ignoring case.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    pub catalog: Option<String>,
    pub schema: Option<String>,
    pub name: String,
}

impl Identity {
    /// True when every part both sides know is the same (ignoring case).
    pub fn matches(&self, other: &Identity) -> bool {
        let part = |a: &Option<String>, b: &Option<String>| match (a, b) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            _ => true,
        };
        self.name.eq_ignore_ascii_case(&other.name)
            && part(&self.catalog, &other.catalog)
            && part(&self.schema, &other.schema)
    }

    /// True when both are the same name: every part the same or unknown on both sides.
    pub fn same(&self, other: &Identity) -> bool {
        let part = |a: &Option<String>, b: &Option<String>| match (a, b) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            (None, None) => true,
            _ => false,
        };
        self.name.eq_ignore_ascii_case(&other.name)
            && part(&self.catalog, &other.catalog)
            && part(&self.schema, &other.schema)
    }

    /// The known parts, catalog first.
    pub fn parts(&self) -> Vec<&str> {
        self.catalog
            .iter()
            .chain(&self.schema)
            .map(String::as_str)
            .chain([self.name.as_str()])
            .collect()
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.parts().join("."))
    }
}

/// The default catalog and schema in effect at a place in a file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespace {
    pub catalog: Option<String>,
    pub schema: Option<String>,
    /// The pipeline's own defaults, which `LIVE.name` takes.
    pipeline: (Option<String>, Option<String>),
}

impl Namespace {
    /// The pipeline's defaults (pipeline.yaml `catalog` and `schema`).
    pub fn new(catalog: Option<String>, schema: Option<String>) -> Self {
        Self {
            pipeline: (catalog.clone(), schema.clone()),
            catalog,
            schema,
        }
    }

    /// `USE CATALOG c`: the catalog of the names after it.
    pub fn use_catalog(&mut self, catalog: &str) {
        self.catalog = Some(catalog.to_string());
    }

    /// `USE SCHEMA s` or `USE c.s`.
    pub fn use_schema(&mut self, parts: &[&str]) {
        match parts {
            [catalog, schema] => {
                self.catalog = Some(catalog.to_string());
                self.schema = Some(schema.to_string());
            }
            [schema] => self.schema = Some(schema.to_string()),
            _ => {}
        }
    }

    /// What `parts` (as written, `LIVE` included) names here; at most three parts
    /// after `LIVE` (more are reported where the name is written).
    pub fn identity(&self, parts: &[&str]) -> Identity {
        let (live, parts) = match parts {
            [first, rest @ ..] if !rest.is_empty() && first.eq_ignore_ascii_case("live") => {
                (true, rest)
            }
            _ => (false, parts),
        };
        let (catalog, schema) = match live {
            true => self.pipeline.clone(),
            false => (self.catalog.clone(), self.schema.clone()),
        };
        let own = |s: &&str| Some(s.to_string());
        match parts {
            [name] => Identity {
                catalog,
                schema,
                name: name.to_string(),
            },
            [s, name] => Identity {
                catalog,
                schema: own(s),
                name: name.to_string(),
            },
            [.., c, s, name] => Identity {
                catalog: own(c),
                schema: own(s),
                name: name.to_string(),
            },
            [] => Identity::default(),
        }
    }
}

/// The names datasets are known by: for each identity, the fewest of its last parts
/// that no other identity ends with (`orders`, or `silver.orders` beside
/// `bronze.orders`), joined by `.`.
pub fn short_names(identities: &[Identity]) -> Vec<String> {
    // The last `k` parts, lower-cased, of an identity that has that many; a shorter one
    // ends with its own, whole, so `a` and `s.a` collide at `k = 1` only.
    let suffix = |id: &Identity, k: usize| -> String {
        let parts = id.parts();
        parts[parts.len().saturating_sub(k)..]
            .join(".")
            .to_ascii_lowercase()
    };
    let mut counts: std::collections::HashMap<(usize, String), usize> = Default::default();
    for id in identities {
        for k in 1..=3 {
            *counts.entry((k, suffix(id, k))).or_default() += 1;
        }
    }
    identities
        .iter()
        .map(|id| {
            let parts = id.parts();
            let k = (1..=parts.len())
                .find(|&k| counts.get(&(k, suffix(id, k))) == Some(&1))
                .unwrap_or(parts.len());
            parts[parts.len() - k..].join(".")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(parts: &[&str]) -> Identity {
        Namespace::default().identity(parts)
    }

    #[test]
    fn unknown_parts_match_anything_and_known_ones_must_agree() {
        let ns = Namespace::new(Some("main".into()), Some("silver".into()));
        let def = ns.identity(&["orders"]);
        assert_eq!(def.to_string(), "main.silver.orders");
        assert!(ns.identity(&["ORDERS"]).matches(&def));
        assert!(ns.identity(&["live", "orders"]).matches(&def));
        assert!(!ns.identity(&["bronze", "orders"]).matches(&def));
        assert!(id(&["orders"]).matches(&def));
        assert!(!id(&["other", "silver", "orders"]).matches(&def));
    }

    #[test]
    fn use_changes_the_defaults_but_live_keeps_the_pipelines() {
        let mut ns = Namespace::new(Some("main".into()), Some("silver".into()));
        ns.use_schema(&["dev", "bronze"]);
        assert_eq!(ns.identity(&["orders"]).to_string(), "dev.bronze.orders");
        assert_eq!(
            ns.identity(&["LIVE", "orders"]).to_string(),
            "main.silver.orders"
        );
        ns.use_catalog("prod");
        assert_eq!(ns.identity(&["crm", "x"]).to_string(), "prod.crm.x");
    }

    #[test]
    fn short_names_take_the_fewest_parts_that_tell_datasets_apart() {
        let ids = [
            id(&["main", "bronze", "orders"]),
            id(&["main", "silver", "orders"]),
            id(&["main", "silver", "customers"]),
            id(&["dev", "silver", "customers"]),
        ];
        assert_eq!(
            short_names(&ids),
            [
                "bronze.orders",
                "silver.orders",
                "main.silver.customers",
                "dev.silver.customers"
            ]
        );
        assert_eq!(short_names(&[id(&["a"]), id(&["s", "a"])]), ["a", "s.a"]);
    }
}
