//! The order a `read_query` read pages in: the watermark, then the keys (`keys =>`),
//! or without keys every other column of the result as text, so that rows with one
//! watermark value have a place each and a read can stop between any two of them and
//! go on after the last it took (keyset pagination). NULLs sort where the server puts
//! them, and the condition for "after" follows.

use crate::dialect::Dialect;

/// One expression of the order.
#[derive(Debug, Clone, PartialEq)]
struct SortKey {
    /// What the checkpoint records of it (`id`, or `text(id)` when ordered as text).
    name: String,
    /// The expression, over the columns of `cdcflow_q`.
    sql: String,
    /// Its values are numbers (how a value is written back: [`Dialect::value`]).
    numeric: bool,
}

/// A column of the query's result, as the order takes it.
#[derive(Debug, Clone, Copy)]
pub struct Column<'a> {
    pub name: &'a str,
    pub numeric: bool,
}

/// The order of a read's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    dialect: Dialect,
    keys: Vec<SortKey>,
}

impl Order {
    /// The watermark, then `keys` when there are, else every column of `columns`
    /// but the watermark, as text.
    pub fn new(
        dialect: Dialect,
        watermark: Column<'_>,
        keys: &[Column<'_>],
        columns: &[Column<'_>],
    ) -> Self {
        let natural = |c: Column<'_>| SortKey {
            name: c.name.to_string(),
            sql: format!("cdcflow_q.{}", dialect.ident(c.name)),
            numeric: c.numeric,
        };
        let mut order = vec![natural(watermark)];
        match keys.is_empty() {
            false => order.extend(keys.iter().copied().map(natural)),
            true => order.extend(
                columns
                    .iter()
                    .filter(|c| c.name != watermark.name)
                    .map(|c| SortKey {
                        name: format!("text({})", c.name),
                        sql: dialect.text_order(&format!("cdcflow_q.{}", dialect.ident(c.name))),
                        numeric: false,
                    }),
            ),
        }
        Self {
            dialect,
            keys: order,
        }
    }

    /// The names a checkpoint records, to tell a position of another order.
    pub fn names(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.name.clone()).collect()
    }

    /// The watermark as SQL (the order's first expression).
    pub fn watermark_sql(&self) -> &str {
        self.keys.first().map_or("", |k| k.sql.as_str())
    }

    /// How many values a row's place has.
    pub fn width(&self) -> usize {
        self.keys.len()
    }

    /// The order's expressions as extra result columns after the query's own: a
    /// row's place, as the server computes it.
    pub fn select(&self) -> String {
        self.keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!(", {} AS cdcflow_o{i}", k.sql))
            .collect()
    }

    pub fn order_by(&self) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|k| k.sql.as_str()).collect();
        format!(" ORDER BY {}", keys.join(", "))
    }

    /// The condition for the rows after `place` (the values of [`Self::select`]'s
    /// columns of a row), lexicographically with NULLs where the server sorts them.
    /// `watermark_not_null`: the read already leaves out rows without a watermark,
    /// so a bound on it that an index can serve is added.
    pub fn after(&self, place: &[Option<String>], watermark_not_null: bool) -> String {
        let mut condition: Option<String> = None;
        for (key, value) in self.keys.iter().zip(place).rev() {
            let value = value.as_deref().map(|v| self.dialect.value(v, key.numeric));
            let beyond = self.beyond(&key.sql, value.as_deref());
            let equal = match &value {
                Some(v) => format!("{} = {v}", key.sql),
                None => format!("{} IS NULL", key.sql),
            };
            condition = Some(match (beyond, condition) {
                (beyond, None) => beyond.unwrap_or_else(|| "FALSE".into()),
                (None, Some(rest)) => format!("{equal} AND ({rest})"),
                (Some(beyond), Some(rest)) => format!("{beyond} OR ({equal} AND ({rest}))"),
            });
        }
        let condition = condition.unwrap_or_else(|| "TRUE".into());
        match (self.keys.first(), place.first()) {
            (Some(first), Some(Some(v))) if watermark_not_null || self.dialect.nulls_first() => {
                let v = self.dialect.value(v, first.numeric);
                format!("{} >= {v} AND ({condition})", first.sql)
            }
            _ => condition,
        }
    }

    /// The condition for values that sort after `value`, `None` when none does (NULL,
    /// where NULLs sort last).
    fn beyond(&self, sql: &str, value: Option<&str>) -> Option<String> {
        match (value, self.dialect.nulls_first()) {
            (Some(v), true) => Some(format!("{sql} > {v}")),
            (Some(v), false) => Some(format!("({sql} > {v} OR {sql} IS NULL)")),
            (None, true) => Some(format!("{sql} IS NOT NULL")),
            (None, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: Column<'static> = Column {
        name: "updated_at",
        numeric: false,
    };
    const ID: Column<'static> = Column {
        name: "id",
        numeric: true,
    };
    const NAME: Column<'static> = Column {
        name: "name",
        numeric: false,
    };

    fn some(values: &[&str]) -> Vec<Option<String>> {
        values.iter().map(|v| Some(v.to_string())).collect()
    }

    #[test]
    fn by_key_the_watermark_then_the_key() {
        let pg = Order::new(Dialect::Postgres, AT, &[ID], &[ID, NAME, AT]);
        assert_eq!(pg.names(), ["updated_at", "id"]);
        assert_eq!(
            pg.select(),
            ", cdcflow_q.\"updated_at\" AS cdcflow_o0, cdcflow_q.\"id\" AS cdcflow_o1"
        );
        assert_eq!(
            pg.order_by(),
            " ORDER BY cdcflow_q.\"updated_at\", cdcflow_q.\"id\""
        );
        // PostgreSQL sorts NULLs last: a NULL is after every value.
        assert_eq!(
            pg.after(&some(&["2024-05-01 10:00:00", "7"]), true),
            "cdcflow_q.\"updated_at\" >= '2024-05-01 10:00:00' AND ((cdcflow_q.\"updated_at\" > '2024-05-01 10:00:00' OR cdcflow_q.\"updated_at\" IS NULL) OR (cdcflow_q.\"updated_at\" = '2024-05-01 10:00:00' AND ((cdcflow_q.\"id\" > '7' OR cdcflow_q.\"id\" IS NULL))))"
        );
        // In the first read rows without a watermark come last, and are not cut off.
        assert!(
            pg.after(&some(&["2024-05-01 10:00:00", "7"]), false)
                .starts_with("(cdcflow_q.\"updated_at\" > ")
        );
        // After the last value, only NULLs are.
        assert_eq!(
            pg.after(&[None, Some("7".into())], false),
            "cdcflow_q.\"updated_at\" IS NULL AND ((cdcflow_q.\"id\" > '7' OR cdcflow_q.\"id\" IS NULL))"
        );

        let my = Order::new(Dialect::Mysql, AT, &[ID], &[ID, NAME, AT]);
        // MySQL sorts NULLs first: every value is after a NULL; a number bare.
        assert_eq!(
            my.after(&some(&["2024-05-01 10:00:00", "7"]), false),
            "cdcflow_q.`updated_at` >= '2024-05-01 10:00:00' AND (cdcflow_q.`updated_at` > '2024-05-01 10:00:00' OR (cdcflow_q.`updated_at` = '2024-05-01 10:00:00' AND (cdcflow_q.`id` > 7)))"
        );
        assert_eq!(
            my.after(&[None, None], false),
            "cdcflow_q.`updated_at` IS NOT NULL OR (cdcflow_q.`updated_at` IS NULL AND (cdcflow_q.`id` IS NOT NULL))"
        );
    }

    #[test]
    fn without_keys_every_other_column_as_text() {
        let pg = Order::new(Dialect::Postgres, AT, &[], &[ID, NAME, AT]);
        assert_eq!(pg.names(), ["updated_at", "text(id)", "text(name)"]);
        assert_eq!(
            pg.order_by(),
            " ORDER BY cdcflow_q.\"updated_at\", CAST(cdcflow_q.\"id\" AS text) COLLATE \"C\", CAST(cdcflow_q.\"name\" AS text) COLLATE \"C\""
        );
        // A NULL in the middle of a place: equal means IS NULL, and nothing of the
        // column is after it.
        assert_eq!(
            pg.after(&[Some("5".into()), Some("7".into()), None], false),
            "(cdcflow_q.\"updated_at\" > '5' OR cdcflow_q.\"updated_at\" IS NULL) OR (cdcflow_q.\"updated_at\" = '5' AND ((CAST(cdcflow_q.\"id\" AS text) COLLATE \"C\" > '7' OR CAST(cdcflow_q.\"id\" AS text) COLLATE \"C\" IS NULL) OR (CAST(cdcflow_q.\"id\" AS text) COLLATE \"C\" = '7' AND (FALSE))))"
        );
        let my = Order::new(Dialect::Mysql, AT, &[], &[ID, NAME, AT]);
        assert_eq!(
            my.order_by(),
            " ORDER BY cdcflow_q.`updated_at`, HEX(CAST(cdcflow_q.`id` AS BINARY)), HEX(CAST(cdcflow_q.`name` AS BINARY))"
        );
        // The hexadecimal text is a string, never a bare number.
        assert!(
            my.after(&some(&["5", "37", "6E"]), false)
                .contains("HEX(CAST(cdcflow_q.`id` AS BINARY)) > '37'")
        );
    }
}
