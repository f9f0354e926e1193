//! The two SQL dialects a `read_query` read speaks: how names and values are written,
//! where NULLs sort, and an order every type has.

/// PostgreSQL, or MySQL and MariaDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Mysql,
}

impl Dialect {
    /// A quoted identifier.
    pub fn ident(self, name: &str) -> String {
        match self {
            Self::Postgres => format!("\"{}\"", name.replace('"', "\"\"")),
            Self::Mysql => format!("`{}`", name.replace('`', "``")),
        }
    }

    /// A string literal.
    pub fn literal(self, text: &str) -> String {
        match self {
            Self::Postgres => format!("'{}'", text.replace('\'', "''")),
            // MySQL strings also escape with a backslash.
            Self::Mysql => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''")),
        }
    }

    /// A value as the server printed it, written so that it compares as the column's
    /// own values do. PostgreSQL types a quoted literal as the column it meets; MySQL
    /// compares a number with a string as floating point (inexact for large integers
    /// and decimals), so a number column's value is written bare.
    pub fn value(self, text: &str, numeric: bool) -> String {
        match self {
            Self::Mysql if numeric && is_number(text) => text.to_string(),
            _ => self.literal(text),
        }
    }

    /// NULLs sort before every value in ascending order (MySQL, MariaDB), or after
    /// (PostgreSQL).
    pub fn nulls_first(self) -> bool {
        match self {
            Self::Postgres => false,
            Self::Mysql => true,
        }
    }

    /// `column` as text that orders bytewise, for a type of any kind (PostgreSQL's
    /// json or point have no order of their own) and whatever the collation (a
    /// case-insensitive one holds 'a' and 'A' equal). MySQL's is the hexadecimal of
    /// the value's bytes, which orders as the bytes do and prints in ASCII whatever
    /// the column's character set.
    pub fn text_order(self, column: &str) -> String {
        match self {
            Self::Postgres => format!("CAST({column} AS text) COLLATE \"C\""),
            Self::Mysql => format!("HEX(CAST({column} AS BINARY))"),
        }
    }
}

/// A decimal number literal: digits, with a sign, a point and an exponent.
fn is_number(text: &str) -> bool {
    let body = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e.strip_prefix(['+', '-']).unwrap_or(e))),
        None => (body, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(whole) && digits(fraction) && exponent.is_none_or(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_literals_a_mysql_number_bare() {
        assert_eq!(Dialect::Mysql.literal("a'b\\c"), "'a''b\\\\c'");
        assert_eq!(Dialect::Postgres.literal("a'b\\c"), "'a''b\\c'");
        assert_eq!(Dialect::Mysql.value("-12.5e3", true), "-12.5e3");
        assert_eq!(Dialect::Mysql.value("12", false), "'12'");
        assert_eq!(Dialect::Mysql.value("1; DROP", true), "'1; DROP'");
        assert_eq!(Dialect::Mysql.value("", true), "''");
        assert_eq!(Dialect::Mysql.value("1.", true), "'1.'");
        assert_eq!(Dialect::Postgres.value("12", true), "'12'");
    }
}
