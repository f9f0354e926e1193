//! Tokenizing a flow file, and the token rewrites the dialect needs.
//!
//! A notebook cell boundary (`-- COMMAND ----------`) ends a statement: Databricks runs
//! each cell on its own, so notebook exports rarely put `;` after a cell's last
//! statement. The comment is followed by a synthetic `;` with the comment's span.
//!
//! Databricks accepts `FROM STREAM name` and `FROM STREAM read_files(…)` without
//! parentheses; sqlparser would read `STREAM` as a table and `name` as its alias.
//! We insert the parentheses as synthetic tokens, so sqlparser sees the table-function
//! form `STREAM(name)` while every real token keeps its original span.

use crate::error::ParseError;
use crate::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer, Whitespace};

/// Tokenizes `text` (whitespace and comments included, as sqlparser's parser expects),
/// with the statements that began without a `;` before them.
pub(crate) fn tokenize(
    text: &str,
) -> Result<(Vec<TokenWithSpan>, Vec<Unended>, crate::watermark::Found), ParseError> {
    let dialect = crate::dialect::SparkSqlDialect;
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(ParseError::from_tokenizer)?;
    let (tokens, unended) = end_before_statements(end_cells(tokens));
    let (tokens, watermarks) =
        crate::watermark::extract(crate::spark_forms::rewrite(parenthesize_stream(tokens)));
    Ok((tokens, unended, watermarks))
}

/// A statement that began where the one before had no `;`: a `;` with its first
/// token's span was put before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unended {
    pub span: Span,
    /// The statement's first word, as written.
    pub word: String,
}

/// Ends a statement before a `CREATE` or `APPLY CHANGES` that begins a line, when the
/// statement before it has no `;`. Neither word can continue a statement of the dialect,
/// so a forgotten `;` costs one diagnostic, not the next statement too.
fn end_before_statements(tokens: Vec<TokenWithSpan>) -> (Vec<TokenWithSpan>, Vec<Unended>) {
    let sig: Vec<usize> = (0..tokens.len())
        .filter(|&i| significant(&tokens[i].token))
        .collect();
    let mut before = Vec::new();
    for (k, &i) in sig.iter().enumerate().skip(1) {
        let prev = &tokens[sig[k - 1]];
        let starts = is_word(&tokens[i].token, "CREATE")
            || (is_word(&tokens[i].token, "APPLY")
                && sig
                    .get(k + 1)
                    .is_some_and(|&n| is_word(&tokens[n].token, "CHANGES")));
        let first_on_line = tokens[i].span.start.line > prev.span.end.line;
        if starts && first_on_line && prev.token != Token::SemiColon {
            before.push(i);
        }
    }
    if before.is_empty() {
        return (tokens, vec![]);
    }
    let mut unended = Vec::with_capacity(before.len());
    let mut out = Vec::with_capacity(tokens.len() + before.len());
    for (i, t) in tokens.into_iter().enumerate() {
        if before.contains(&i) {
            out.push(TokenWithSpan::new(Token::SemiColon, t.span));
            unended.push(Unended {
                span: t.span,
                word: t.token.to_string(),
            });
        }
        out.push(t);
    }
    (out, unended)
}

/// True for the comment that separates the cells of a notebook export.
fn is_cell_boundary(token: &Token) -> bool {
    matches!(token, Token::Whitespace(Whitespace::SingleLineComment { comment, prefix })
    if prefix == "--" && comment.trim_end().strip_prefix(" COMMAND ").is_some_and(|rest| {
        rest.len() >= 3 && rest.chars().all(|c| c == '-')
    }))
}

fn end_cells(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    if !tokens.iter().any(|t| is_cell_boundary(&t.token)) {
        return tokens;
    }
    let mut out = Vec::with_capacity(tokens.len() + 8);
    for t in tokens {
        let boundary = is_cell_boundary(&t.token).then_some(t.span);
        out.push(t);
        if let Some(span) = boundary {
            out.push(TokenWithSpan::new(Token::SemiColon, span));
        }
    }
    out
}

/// True for an unquoted word equal to `word`, ignoring case.
pub(crate) fn is_word(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

fn significant(token: &Token) -> bool {
    !matches!(token, Token::Whitespace(_))
}

fn parenthesize_stream(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig: Vec<usize> = (0..tokens.len())
        .filter(|&i| significant(&tokens[i].token))
        .collect();
    // Positions (in `tokens`) after which to insert '(' and before which ')'.
    let mut opens = Vec::new();
    let mut closes = Vec::new();
    for (k, &i) in sig.iter().enumerate() {
        if !is_word(&tokens[i].token, "STREAM") || k == 0 {
            continue;
        }
        let prev = &tokens[sig[k - 1]].token;
        let in_from =
            is_word(prev, "FROM") || is_word(prev, "JOIN") || matches!(prev, Token::Comma);
        let Some(&next) = sig.get(k + 1) else {
            continue;
        };
        if !in_from || !matches!(tokens[next].token, Token::Word(_)) {
            continue;
        }
        // Consume a dotted name, then an optional balanced argument list.
        let mut j = k + 1;
        while j + 2 < sig.len()
            && matches!(tokens[sig[j + 1]].token, Token::Period)
            && matches!(tokens[sig[j + 2]].token, Token::Word(_))
        {
            j += 2;
        }
        if j + 1 < sig.len() && matches!(tokens[sig[j + 1]].token, Token::LParen) {
            let mut depth = 0usize;
            let mut m = j + 1;
            while m < sig.len() {
                match tokens[sig[m]].token {
                    Token::LParen => depth += 1,
                    Token::RParen => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                m += 1;
            }
            j = m.min(sig.len() - 1);
        }
        opens.push(i);
        closes.push(sig[j]);
    }
    if opens.is_empty() {
        return tokens;
    }
    let mut out = Vec::with_capacity(tokens.len() + 2 * opens.len());
    for (i, t) in tokens.into_iter().enumerate() {
        let span = t.span;
        let open = opens.contains(&i);
        let close = closes.iter().filter(|&&c| c == i).count();
        out.push(t);
        if open {
            out.push(TokenWithSpan::new(Token::LParen, span));
        }
        for _ in 0..close {
            out.push(TokenWithSpan::new(Token::RParen, span));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(sql: &str) -> String {
        tokenize(sql)
            .unwrap()
            .0
            .iter()
            .map(|t| t.token.to_string())
            .collect::<String>()
            .replace(' ', "")
    }

    #[test]
    fn stream_without_parentheses_gets_them() {
        assert_eq!(text("FROM STREAM bronze b"), "FROMSTREAM(bronze)b");
        assert_eq!(text("FROM STREAM live.bronze"), "FROMSTREAM(live.bronze)");
        assert_eq!(
            text("FROM STREAM read_files('x', format => 'json') WHERE"),
            "FROMSTREAM(read_files('x',format=>'json'))WHERE"
        );
        assert_eq!(text("FROM STREAM(bronze)"), "FROMSTREAM(bronze)");
        assert_eq!(text("SELECT stream FROM t"), "SELECTstreamFROMt");
    }

    #[test]
    fn a_cell_boundary_ends_a_statement() {
        let cell = "CREATE VIEW v AS SELECT 1\n-- COMMAND ----------\nCREATE VIEW w AS SELECT 2";
        let semis = tokenize(cell)
            .unwrap()
            .0
            .iter()
            .filter(|t| t.token == Token::SemiColon)
            .count();
        assert_eq!(semis, 1);
        // Any other comment is only a comment.
        for other in [
            "-- COMMAND",
            "-- COMMAND --",
            "--COMMAND ----------",
            "-- MAGIC ----------",
        ] {
            let text = format!("SELECT 1\n{other}\nSELECT 2");
            assert!(
                !tokenize(&text)
                    .unwrap()
                    .0
                    .iter()
                    .any(|t| t.token == Token::SemiColon),
                "{other}"
            );
        }
    }
}
