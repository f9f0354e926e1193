//! The statements the binary log holds as text (query events), as they concern one
//! captured table: the bounds of a transaction, a `TRUNCATE` (a change of its own), a
//! `DROP` or `RENAME` (after which the log's rows under the name are another table's),
//! and a change logged as a statement rather than as rows (a session that set
//! `binlog_format = STATEMENT`), which no reader of rows can apply.

use cdcflow_plan::read_mysql::MysqlTable;

/// What a query event is to the captured table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statement {
    Begin,
    Commit,
    Truncate,
    /// Dropped, or renamed away.
    Gone,
    /// Rows of the table changed by a statement logged as text.
    LoggedAsStatement,
    /// Rows removed or swapped by a partition operation (`DROP`, `TRUNCATE` or
    /// `EXCHANGE PARTITION`), which logs no row.
    PartitionRows,
    /// Anything else: another table's, or a change the row events describe
    /// (`ALTER TABLE … ADD COLUMN` shows in the next rows' columns).
    Other,
}

/// Whether `a` and `b` name one table, on a server that compares names without case
/// when `fold` (`lower_case_table_names` 1 or 2).
pub fn same_table(a: &MysqlTable, b: &MysqlTable, fold: bool) -> bool {
    match fold {
        true => {
            a.database.eq_ignore_ascii_case(&b.database) && a.name.eq_ignore_ascii_case(&b.name)
        }
        false => a == b,
    }
}

/// `sql`, run with `schema` as its default database, as it concerns `table` (names
/// compared without case when `fold`).
pub fn classify(sql: &str, schema: &str, table: &MysqlTable, fold: bool) -> Statement {
    let tokens = tokens(sql);
    let word = |i: usize| tokens.get(i).map(|t| t.to_ascii_uppercase());
    let is = |i: usize, w: &str| word(i).as_deref() == Some(w);
    let names_table =
        |i: usize| name_at(&tokens, i, schema).is_some_and(|(n, _)| same_table(&n, table, fold));
    match word(0).as_deref() {
        Some("BEGIN") => Statement::Begin,
        Some("XA") if is(1, "START") || is(1, "BEGIN") => Statement::Begin,
        Some("COMMIT") => Statement::Commit,
        Some("TRUNCATE") => {
            let at = if is(1, "TABLE") { 2 } else { 1 };
            match names_table(at) {
                true => Statement::Truncate,
                false => Statement::Other,
            }
        }
        Some("DROP") if is(1, "TABLE") || (is(1, "TEMPORARY") && is(2, "TABLE")) => {
            match list_names(&tokens, schema)
                .iter()
                .any(|n| same_table(n, table, fold))
            {
                true => Statement::Gone,
                false => Statement::Other,
            }
        }
        Some("RENAME") if is(1, "TABLE") || is(1, "TABLES") => {
            // RENAME TABLE a TO b, c TO d: the names before each TO.
            let mut i = 2;
            while let Some((name, next)) = name_at(&tokens, i, schema) {
                if same_table(&name, table, fold) {
                    return Statement::Gone;
                }
                // Skip TO and the new name, then a comma.
                let after_new = name_at(&tokens, next + 1, schema).map_or(next + 1, |(_, n)| n);
                if tokens.get(after_new).map(String::as_str) != Some(",") {
                    break;
                }
                i = after_new + 1;
            }
            Statement::Other
        }
        Some("ALTER") => {
            let at = (1..4).find(|i| is(*i, "TABLE")).map(|i| i + 1);
            let renames = tokens.iter().enumerate().any(|(i, t)| {
                t.eq_ignore_ascii_case("RENAME")
                    && !is(i + 1, "COLUMN")
                    && !is(i + 1, "INDEX")
                    && !is(i + 1, "KEY")
            });
            let partition_rows = tokens.iter().enumerate().any(|(i, t)| {
                matches!(
                    t.to_ascii_uppercase().as_str(),
                    "DROP" | "TRUNCATE" | "EXCHANGE"
                ) && is(i + 1, "PARTITION")
            });
            match (at.is_some_and(names_table), renames, partition_rows) {
                (true, true, _) => Statement::Gone,
                (true, false, true) => Statement::PartitionRows,
                _ => Statement::Other,
            }
        }
        Some("INSERT" | "REPLACE" | "UPDATE" | "DELETE" | "LOAD") => {
            let writes = tokens.iter().enumerate().any(|(i, t)| {
                let t = t.to_ascii_uppercase();
                matches!(
                    t.as_str(),
                    "INTO" | "UPDATE" | "FROM" | "JOIN" | "IGNORE" | "LOW_PRIORITY"
                ) && names_table(i + 1)
            });
            match writes {
                true => Statement::LoggedAsStatement,
                false => Statement::Other,
            }
        }
        _ => Statement::Other,
    }
}

/// The names of a `DROP TABLE [IF EXISTS] a, b, …` list.
fn list_names(tokens: &[String], schema: &str) -> Vec<MysqlTable> {
    let mut i = tokens
        .iter()
        .position(|t| t.eq_ignore_ascii_case("TABLE"))
        .map_or(tokens.len(), |t| t + 1);
    if tokens.get(i).is_some_and(|t| t.eq_ignore_ascii_case("IF")) {
        i += 2;
    }
    let mut names = vec![];
    while let Some((name, next)) = name_at(tokens, i, schema) {
        names.push(name);
        if tokens.get(next).map(String::as_str) != Some(",") {
            break;
        }
        i = next + 1;
    }
    names
}

/// The table name at token `i` (`db.t` or `t` in `schema`) and the token after it.
fn name_at(tokens: &[String], i: usize, schema: &str) -> Option<(MysqlTable, usize)> {
    let first = identifier(tokens.get(i)?)?;
    if tokens.get(i + 1).map(String::as_str) == Some(".") {
        let second = identifier(tokens.get(i + 2)?)?;
        return Some((
            MysqlTable {
                database: first,
                name: second,
            },
            i + 3,
        ));
    }
    Some((
        MysqlTable {
            database: schema.to_string(),
            name: first,
        },
        i + 1,
    ))
}

/// A token as an identifier: a backticked one unquoted, a bare word as is.
fn identifier(token: &str) -> Option<String> {
    if let Some(inner) = token.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
        return Some(inner.replace("``", "`"));
    }
    token
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        .then(|| token.to_string())
        .filter(|t| !t.is_empty())
}

/// Words, backticked identifiers, quoted strings and single punctuation marks;
/// comments are left out.
fn tokens(sql: &str) -> Vec<String> {
    let mut out = vec![];
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '`' | '\'' | '"' => {
                let mut token = c.to_string();
                while let Some(d) = chars.next() {
                    token.push(d);
                    if d == c {
                        if chars.peek() == Some(&c) {
                            token.extend(chars.next());
                            continue;
                        }
                        break;
                    }
                    if d == '\\' && c != '`' {
                        token.extend(chars.next());
                    }
                }
                out.push(token);
            }
            c if c.is_alphanumeric() || c == '_' || c == '$' => {
                let mut token = c.to_string();
                while let Some(d) = chars.peek().copied() {
                    if !(d.is_alphanumeric() || d == '_' || d == '$') {
                        break;
                    }
                    token.push(d);
                    chars.next();
                }
                out.push(token);
            }
            c => out.push(c.to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orders() -> MysqlTable {
        MysqlTable {
            database: "shop".into(),
            name: "orders".into(),
        }
    }

    #[test]
    fn statements_are_told_apart() {
        let c = |sql: &str| classify(sql, "shop", &orders(), false);
        assert_eq!(c("BEGIN"), Statement::Begin);
        assert_eq!(c("COMMIT"), Statement::Commit);
        assert_eq!(c("TRUNCATE TABLE orders"), Statement::Truncate);
        assert_eq!(c("truncate `shop`.`orders`"), Statement::Truncate);
        assert_eq!(c("TRUNCATE other"), Statement::Other);
        assert_eq!(
            c("DROP TABLE IF EXISTS `x`,`orders` /* generated by server */"),
            Statement::Gone
        );
        assert_eq!(c("DROP TABLE x"), Statement::Other);
        assert_eq!(
            c("RENAME TABLE a TO b, orders TO orders_old"),
            Statement::Gone
        );
        assert_eq!(c("RENAME TABLE a TO b"), Statement::Other);
        assert_eq!(c("ALTER TABLE orders RENAME TO o2"), Statement::Gone);
        assert_eq!(
            c("ALTER TABLE orders RENAME COLUMN a TO b"),
            Statement::Other
        );
        assert_eq!(
            c("ALTER TABLE orders ADD COLUMN note TEXT"),
            Statement::Other
        );
        assert_eq!(
            c("/* app */ UPDATE orders SET x = 1"),
            Statement::LoggedAsStatement
        );
        assert_eq!(
            c("INSERT INTO shop.orders VALUES (1)"),
            Statement::LoggedAsStatement
        );
        assert_eq!(c("INSERT INTO other.orders VALUES (1)"), Statement::Other);
        assert_eq!(
            classify("DELETE FROM orders", "other", &orders(), false),
            Statement::Other
        );
        assert_eq!(c("TRUNCATE Orders"), Statement::Other);
        assert_eq!(
            classify("TRUNCATE Orders", "shop", &orders(), true),
            Statement::Truncate
        );
    }
}
