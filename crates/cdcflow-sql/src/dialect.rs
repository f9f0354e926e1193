//! The SQL dialect queries are read in: sqlparser's Databricks dialect, and what of
//! Spark's that dialect does not read: `a DIV b` (integral division) and backslash
//! escapes in string literals (`'it\'s'`). Every other rule is the Databricks
//! dialect's, and sqlparser takes it for that dialect wherever it asks which dialect it
//! reads.

use std::any::TypeId;

use crate::sqlparser::ast::{BinaryOperator, CastKind, DataType, Expr};
use crate::sqlparser::dialect::{DatabricksDialect, Dialect};
use crate::sqlparser::keywords::Keyword;
use crate::sqlparser::parser::{Parser, ParserError};
use crate::sqlparser::tokenizer::Token;

/// Databricks SQL as sqlparser reads it, with `DIV` and backslash escapes.
#[derive(Debug, Default, Clone, Copy)]
pub struct SparkSqlDialect;

const DATABRICKS: DatabricksDialect = DatabricksDialect;

impl Dialect for SparkSqlDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<DatabricksDialect>()
    }

    /// `a DIV b`: Spark's integral division, `CAST(a / b AS BIGINT)` (the quotient
    /// truncated toward zero, a BIGINT, as Spark's `div`), binding as `*` and `/` do.
    fn parse_infix(
        &self,
        parser: &mut Parser,
        expr: &Expr,
        precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
        if !parser.parse_keyword(Keyword::DIV) {
            return None;
        }
        // sqlparser would read a clause keyword as a column name here.
        let next = parser.peek_token();
        let ends = match &next.token {
            Token::Word(w) => matches!(
                w.keyword,
                Keyword::FROM
                    | Keyword::WHERE
                    | Keyword::GROUP
                    | Keyword::HAVING
                    | Keyword::ORDER
                    | Keyword::LIMIT
                    | Keyword::UNION
                    | Keyword::AS
                    | Keyword::QUALIFY
            ),
            Token::EOF | Token::Comma | Token::RParen | Token::SemiColon => true,
            _ => false,
        };
        if ends {
            return Some(Err(ParserError::ParserError(format!(
                "Expected: an expression after DIV, found: {}{}",
                next.token, next.span.start
            ))));
        }
        let right = match parser.parse_subexpr(precedence) {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(Expr::Nested(Box::new(Expr::BinaryOp {
                left: Box::new(expr.clone()),
                op: BinaryOperator::Divide,
                right: Box::new(right),
            }))),
            data_type: DataType::BigInt(None),
            array: false,
            format: None,
        }))
    }

    /// Spark reads a backslash in a string literal as an escape: `'it\'s'`, `'\t'`.
    fn supports_string_literal_backslash_escape(&self) -> bool {
        true
    }

    /// Spark keeps the backslash before a LIKE wildcard: `'50\%'` is `50\%`.
    fn ignores_wildcard_escapes(&self) -> bool {
        true
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        DATABRICKS.is_delimited_identifier_start(ch)
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        DATABRICKS.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        DATABRICKS.is_identifier_part(ch)
    }
    fn supports_numeric_prefix(&self) -> bool {
        DATABRICKS.supports_numeric_prefix()
    }
    fn supports_filter_during_aggregation(&self) -> bool {
        DATABRICKS.supports_filter_during_aggregation()
    }
    fn supports_group_by_expr(&self) -> bool {
        DATABRICKS.supports_group_by_expr()
    }
    fn supports_table_versioning(&self) -> bool {
        DATABRICKS.supports_table_versioning()
    }
    fn supports_lambda_functions(&self) -> bool {
        DATABRICKS.supports_lambda_functions()
    }
    fn supports_select_wildcard_except(&self) -> bool {
        DATABRICKS.supports_select_wildcard_except()
    }
    fn require_interval_qualifier(&self) -> bool {
        DATABRICKS.require_interval_qualifier()
    }
    fn supports_struct_literal(&self) -> bool {
        DATABRICKS.supports_struct_literal()
    }
    fn supports_nested_comments(&self) -> bool {
        DATABRICKS.supports_nested_comments()
    }
    fn supports_group_by_with_modifier(&self) -> bool {
        DATABRICKS.supports_group_by_with_modifier()
    }
    fn supports_values_as_table_factor(&self) -> bool {
        DATABRICKS.supports_values_as_table_factor()
    }
    fn supports_optimize_table(&self) -> bool {
        DATABRICKS.supports_optimize_table()
    }
    fn supports_bang_not_operator(&self) -> bool {
        DATABRICKS.supports_bang_not_operator()
    }
    fn supports_cte_without_as(&self) -> bool {
        DATABRICKS.supports_cte_without_as()
    }
    fn supports_select_item_multi_column_alias(&self) -> bool {
        DATABRICKS.supports_select_item_multi_column_alias()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expr(sql: &str) -> String {
        Parser::new(&SparkSqlDialect)
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_expr())
            .map(|e| e.to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn div_binds_as_multiplication_does() {
        assert_eq!(expr("7 DIV 2"), "CAST((7 / 2) AS BIGINT)");
        assert_eq!(expr("a + 7 div 2 * 3"), "a + CAST((7 / 2) AS BIGINT) * 3");
        assert_eq!(expr("7 DIV 2 + 1"), "CAST((7 / 2) AS BIGINT) + 1");
    }

    #[test]
    fn a_backslash_escapes_in_string_literals_as_in_spark() {
        assert_eq!(expr(r"'x\'y'"), "'x''y'");
        assert_eq!(expr(r"'a\\b' = 'a\tb'"), "'a\\b' = 'a\tb'");
        assert_eq!(expr(r#""say \"hi\"""#), r#""say ""hi""""#);
        // Spark keeps the backslash before a LIKE wildcard: `\%` matches a `%`.
        assert_eq!(expr(r"'50\%'"), r"'50\%'");
    }

    #[test]
    fn a_flow_file_reads_backslash_escapes() {
        let parsed = crate::parser::parse_statements(
            "CREATE OR REFRESH MATERIALIZED VIEW v AS SELECT 'it\\'s' AS s;",
        );
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        assert_eq!(parsed.statements.len(), 1);
    }
}
