//! Tokenizing a flow file, and the one token rewrite the dialect needs.
//!
//! Databricks accepts `FROM STREAM name` and `FROM STREAM read_files(…)` without
//! parentheses; sqlparser would read `STREAM` as a table and `name` as its alias.
//! We insert the parentheses as synthetic tokens, so sqlparser sees the table-function
//! form `STREAM(name)` while every real token keeps its original span.

use crate::error::ParseError;
use crate::sqlparser::dialect::DatabricksDialect;
use crate::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

/// Tokenizes `text` (whitespace and comments included, as sqlparser's parser expects).
pub(crate) fn tokenize(text: &str) -> Result<Vec<TokenWithSpan>, ParseError> {
    let dialect = DatabricksDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(ParseError::from_tokenizer)?;
    Ok(parenthesize_stream(tokens))
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
}
