//! Spark SQL forms sqlparser does not take, rewritten token by token into ones it does
//! (every real token keeps its span, so diagnostics point at the file as written):
//!
//! - `FROM (orders)`, `JOIN (orders)`: a table name in parentheses loses them;
//! - `* EXCEPT (o.status)`: the columns a star leaves out lose their qualifier (the
//!   star's own, since it names the columns of one relation);
//! - `struct(amount total, …)`: a field named without `AS` gets it;
//! - `MAP<STRING, ARRAY<INT>>`, `ARRAY<MAP<STRING, INT>>`: the `>>` that closes two
//!   types at once is two `>`, so each type finds its own.

use crate::sqlparser::keywords::Keyword;
use crate::sqlparser::tokenizer::{Token, TokenWithSpan, Word};
use crate::tokens::is_word;

/// `tokens` with the forms above rewritten.
pub(crate) fn rewrite(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let tokens = unparenthesize_tables(tokens);
    let tokens = unqualify_star_except(tokens);
    let tokens = split_map_type_ends(tokens);
    name_struct_fields(tokens)
}

fn split_map_type_ends(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig = significant(&tokens);
    let mut split = Vec::new();
    for k in 0..sig.len() {
        let opens_type = ["MAP", "ARRAY", "STRUCT"]
            .iter()
            .any(|w| is_word(&tokens[sig[k]].token, w));
        if !opens_type || sig.get(k + 1).is_none_or(|&i| tokens[i].token != Token::Lt) {
            continue;
        }
        let mut depth = 0usize;
        for &i in &sig[k + 1..] {
            match tokens[i].token {
                Token::Lt => depth += 1,
                Token::Gt => depth -= 1,
                Token::ShiftRight if depth >= 2 => {
                    split.push(i);
                    depth -= 2;
                }
                _ => {}
            }
            if depth == 0 {
                break;
            }
        }
    }
    if split.is_empty() {
        return tokens;
    }
    let mut out = Vec::with_capacity(tokens.len() + split.len());
    for (i, t) in tokens.into_iter().enumerate() {
        match split.contains(&i) {
            true => {
                out.push(TokenWithSpan::new(Token::Gt, t.span));
                out.push(TokenWithSpan::new(Token::Gt, t.span));
            }
            false => out.push(t),
        }
    }
    out
}

fn significant(tokens: &[TokenWithSpan]) -> Vec<usize> {
    (0..tokens.len())
        .filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_)))
        .collect()
}

/// The end (in `sig`) of a dotted name starting at `sig[k]`: `a`, `a.b`, `a.b.c`.
fn dotted_name_end(tokens: &[TokenWithSpan], sig: &[usize], k: usize) -> Option<usize> {
    let mut at = k;
    if !matches!(tokens[*sig.get(at)?].token, Token::Word(_)) {
        return None;
    }
    while sig
        .get(at + 1)
        .is_some_and(|&i| tokens[i].token == Token::Period)
        && sig
            .get(at + 2)
            .is_some_and(|&i| matches!(tokens[i].token, Token::Word(_)))
    {
        at += 2;
    }
    Some(at)
}

fn unparenthesize_tables(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig = significant(&tokens);
    let mut drop = Vec::new();
    for k in 0..sig.len() {
        let t = &tokens[sig[k]].token;
        if !(is_word(t, "FROM") || is_word(t, "JOIN")) {
            continue;
        }
        if sig
            .get(k + 1)
            .is_none_or(|&i| tokens[i].token != Token::LParen)
        {
            continue;
        }
        // `FROM (SELECT …)` is a subquery, not a name.
        if sig.get(k + 2).is_some_and(|&i| {
            is_word(&tokens[i].token, "SELECT") || is_word(&tokens[i].token, "WITH")
        }) {
            continue;
        }
        let Some(end) = dotted_name_end(&tokens, &sig, k + 2) else {
            continue;
        };
        if sig
            .get(end + 1)
            .is_some_and(|&i| tokens[i].token == Token::RParen)
        {
            drop.extend([sig[k + 1], sig[end + 1]]);
        }
    }
    without(tokens, &drop)
}

fn unqualify_star_except(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig = significant(&tokens);
    let mut drop = Vec::new();
    for k in 1..sig.len() {
        if !(is_word(&tokens[sig[k]].token, "EXCEPT") && tokens[sig[k - 1]].token == Token::Mul)
            || sig
                .get(k + 1)
                .is_none_or(|&i| tokens[i].token != Token::LParen)
        {
            continue;
        }
        // Only a list of names: anything else is left to the parser to judge.
        let mut qualifiers = Vec::new();
        let mut at = k + 2;
        let closed = loop {
            let Some(end) = dotted_name_end(&tokens, &sig, at) else {
                break false;
            };
            qualifiers.extend(sig[at..end].iter().copied());
            match sig.get(end + 1).map(|&i| &tokens[i].token) {
                Some(Token::Comma) => at = end + 2,
                Some(Token::RParen) => break true,
                _ => break false,
            }
        };
        if closed {
            drop.extend(qualifiers);
        }
    }
    without(tokens, &drop)
}

/// Words that want an operand after them: a word following one is part of the
/// expression, not its alias (`struct(a AND b)`).
const OPERAND_BEFORE: [&str; 14] = [
    "AND", "OR", "NOT", "IS", "IN", "LIKE", "BETWEEN", "CASE", "WHEN", "THEN", "ELSE", "AS",
    "DISTINCT", "INTERVAL",
];
/// Words that end an expression themselves rather than name it.
const NOT_ALIASES: [&str; 4] = ["NULL", "TRUE", "FALSE", "END"];

fn name_struct_fields(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig = significant(&tokens);
    let mut insert_as = Vec::new();
    for k in 0..sig.len() {
        if !is_word(&tokens[sig[k]].token, "struct")
            || sig
                .get(k + 1)
                .is_none_or(|&i| tokens[i].token != Token::LParen)
        {
            continue;
        }
        let mut depth = 0;
        for j in k + 1..sig.len() {
            match &tokens[sig[j]].token {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Token::Word(w) if depth == 1 && is_field_alias(&tokens, &sig, j, w) => {
                    insert_as.push(sig[j]);
                }
                _ => {}
            }
        }
    }
    for &i in insert_as.iter().rev() {
        let span = tokens[i].span;
        let as_word = Token::Word(Word {
            value: "AS".to_string(),
            quote_style: None,
            keyword: Keyword::AS,
        });
        tokens.insert(
            i,
            TokenWithSpan::new(
                Token::Whitespace(crate::sqlparser::tokenizer::Whitespace::Space),
                span,
            ),
        );
        tokens.insert(i, TokenWithSpan::new(as_word, span));
    }
    tokens
}

/// Whether the word at `sig[j]` (inside `struct(…)`) names the field before it: it ends
/// the field (`,` or `)` follows) and follows the end of an expression.
fn is_field_alias(tokens: &[TokenWithSpan], sig: &[usize], j: usize, w: &Word) -> bool {
    if w.quote_style.is_none() && NOT_ALIASES.iter().any(|n| w.value.eq_ignore_ascii_case(n)) {
        return false;
    }
    let ends_field = sig
        .get(j + 1)
        .is_some_and(|&i| matches!(tokens[i].token, Token::Comma | Token::RParen));
    let after_expression = match &tokens[sig[j - 1]].token {
        Token::Number(..) | Token::SingleQuotedString(_) | Token::DoubleQuotedString(_) => true,
        Token::RParen => true,
        Token::Word(prev) => {
            prev.quote_style.is_some()
                || !OPERAND_BEFORE
                    .iter()
                    .any(|o| prev.value.eq_ignore_ascii_case(o))
        }
        _ => false,
    };
    ends_field && after_expression
}

fn without(tokens: Vec<TokenWithSpan>, drop: &[usize]) -> Vec<TokenWithSpan> {
    if drop.is_empty() {
        return tokens;
    }
    tokens
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !drop.contains(i))
        .map(|(_, t)| t)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlparser::dialect::DatabricksDialect;
    use crate::sqlparser::tokenizer::Tokenizer;

    fn rewritten(sql: &str) -> String {
        let tokens = Tokenizer::new(&DatabricksDialect {}, sql)
            .tokenize_with_location()
            .unwrap();
        rewrite(tokens)
            .iter()
            .map(|t| t.token.to_string())
            .collect()
    }

    #[test]
    fn spark_forms_become_forms_sqlparser_takes() {
        assert_eq!(
            rewritten("SELECT * FROM (orders) o"),
            "SELECT * FROM orders o"
        );
        assert_eq!(
            rewritten("SELECT * FROM a JOIN (s.b) ON x"),
            "SELECT * FROM a JOIN s.b ON x"
        );
        assert_eq!(
            rewritten("SELECT * FROM (SELECT 1)"),
            "SELECT * FROM (SELECT 1)"
        );
        assert_eq!(
            rewritten("SELECT o.* EXCEPT (o.status, o.x.y, z) FROM o"),
            "SELECT o.* EXCEPT (status, y, z) FROM o"
        );
        assert_eq!(
            rewritten("SELECT struct(a x, b + 1 y, c AS z, d, 'v' w, f(e) g) FROM t"),
            "SELECT struct(a AS x, b + 1 AS y, c AS z, d, 'v' AS w, f(e) AS g) FROM t"
        );
        assert_eq!(
            rewritten("SELECT struct(a IS NULL, CASE WHEN b THEN 1 ELSE 2 END c, x AND y) FROM t"),
            "SELECT struct(a IS NULL, CASE WHEN b THEN 1 ELSE 2 END AS c, x AND y) FROM t"
        );
        assert_eq!(
            rewritten("SELECT a FROM t EXCEPT (SELECT a FROM u)"),
            "SELECT a FROM t EXCEPT (SELECT a FROM u)"
        );
    }

    #[test]
    fn the_shift_that_closes_two_map_types_is_two_closings() {
        let sql = "CREATE TABLE t (m MAP<STRING, ARRAY<INT>>, n INT) AS SELECT a >> 1 FROM t";
        let tokens = Tokenizer::new(&DatabricksDialect {}, sql)
            .tokenize_with_location()
            .unwrap();
        let kinds: Vec<Token> = rewrite(tokens)
            .into_iter()
            .map(|t| t.token)
            .filter(|t| matches!(t, Token::Gt | Token::ShiftRight))
            .collect();
        assert_eq!(kinds, [Token::Gt, Token::Gt, Token::ShiftRight]);
    }
}
