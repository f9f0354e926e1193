//! The WATERMARK clause of a from item (Databricks SQL reference, "WATERMARK clause"):
//!
//! ```sql
//! FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL 10 SECONDS AS e
//! FROM STREAM(raw) WATERMARK to_timestamp(ts_text) AS ts DELAY OF INTERVAL 1 MINUTE r
//! ```
//!
//! sqlparser has no such clause, so it is taken out of the tokens before the query is
//! parsed and kept beside it as a [`Watermark`], tied to the from item by its alias. A
//! from item without an alias gets one (its table's name, or a generated one), so the
//! planner always finds the watermarked relation by name. A computed event time becomes
//! a column of the from item, as Spark projects it: `(SELECT *, expr AS ts FROM item)`.

use crate::error::ParseError;
use crate::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Word};
use crate::tokens::is_word;

/// One WATERMARK clause.
#[derive(Debug, Clone, PartialEq)]
pub struct Watermark {
    /// The from item's alias, as written or given (see the module's doc).
    pub alias: String,
    /// The event-time column of the from item: the column named, or the name of the
    /// computed expression.
    pub column: String,
    /// The delay, in microseconds (a month counts 31 days, as in Spark).
    pub delay_micros: i64,
    /// The delay as written (`INTERVAL 10 SECONDS`).
    pub delay_text: String,
    /// The whole clause, from WATERMARK to the end of the interval.
    pub span: Span,
    /// The event time as written (the column, or the expression and its name).
    pub column_span: Span,
    pub delay_span: Span,
}

/// The clauses of a file, and the errors in them.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub watermarks: Vec<Watermark>,
    pub errors: Vec<ParseError>,
}

/// Words after a from item that begin the next clause, never an alias.
const NOT_ALIAS: &[&str] = &[
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "LIMIT",
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "CROSS",
    "OUTER",
    "ON",
    "USING",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "WINDOW",
    "NATURAL",
    "LATERAL",
    "QUALIFY",
    "CLUSTER",
    "DISTRIBUTE",
    "SORT",
    "SEMI",
    "ANTI",
];

/// `tokens` without their WATERMARK clauses, and the clauses.
pub(crate) fn extract(tokens: Vec<TokenWithSpan>) -> (Vec<TokenWithSpan>, Found) {
    let mut found = Found::default();
    let mut tokens = tokens;
    let mut generated = 0;
    // One clause at a time: each rewrite shifts the positions after it.
    let mut from = 0;
    while let Some(at) = next_clause(&tokens, from) {
        match rewrite_one(&tokens, at, &mut generated) {
            Ok((rewritten, watermark, resume)) => {
                tokens = rewritten;
                found.watermarks.push(watermark);
                from = resume;
            }
            Err(e) => {
                // The clause goes all the same, so that the query around it parses
                // and only the clause's own error is reported.
                found.errors.push(e);
                let (rest, resume) = drop_clause(tokens, at);
                tokens = rest;
                from = resume;
            }
        }
    }
    (tokens, found)
}

/// `tokens` without the clause at `tokens[at]` as far as it reads: WATERMARK, the event
/// time, DELAY OF and the interval's tokens.
fn drop_clause(tokens: Vec<TokenWithSpan>, at: usize) -> (Vec<TokenWithSpan>, usize) {
    let sig = sig(&tokens);
    let Some(k) = sig.iter().position(|&i| i == at) else {
        return (tokens, at + 1);
    };
    let Some(delay_k) = delay_of(&tokens, &sig, k + 1) else {
        return (tokens, at + 1);
    };
    let mut j = delay_k + 2;
    if sig
        .get(j)
        .is_some_and(|&i| is_word(&tokens[i].token, "INTERVAL"))
    {
        j += 1;
    }
    while let Some(&i) = sig.get(j) {
        let part = match &tokens[i].token {
            Token::Minus | Token::Number(..) | Token::SingleQuotedString(_) => true,
            t => unit_micros(t).is_some(),
        };
        if !part {
            break;
        }
        j += 1;
    }
    let end = sig.get(j).copied().unwrap_or(tokens.len());
    let mut out = tokens;
    out.drain(at..end);
    (out, at)
}

fn sig(tokens: &[TokenWithSpan]) -> Vec<usize> {
    (0..tokens.len())
        .filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_)))
        .collect()
}

/// The position (in `tokens`) of the next `WATERMARK` that follows a from item and is
/// followed by `DELAY OF` before the statement ends.
fn next_clause(tokens: &[TokenWithSpan], from: usize) -> Option<usize> {
    let sig = sig(tokens);
    for (k, &i) in sig.iter().enumerate() {
        if i < from || k == 0 || !is_word(&tokens[i].token, "WATERMARK") {
            continue;
        }
        let prev = &tokens[sig[k - 1]].token;
        if !matches!(prev, Token::RParen | Token::Word(_)) {
            continue;
        }
        if delay_of(tokens, &sig, k + 1).is_some() {
            return Some(i);
        }
    }
    None
}

/// The position in `sig` of `DELAY` (followed by `OF`) at depth 0 from `k`, before the
/// statement ends.
fn delay_of(tokens: &[TokenWithSpan], sig: &[usize], k: usize) -> Option<usize> {
    let mut depth = 0i32;
    for j in k..sig.len() {
        match &tokens[sig[j]].token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            Token::SemiColon => return None,
            t if depth == 0
                && is_word(t, "DELAY")
                && sig
                    .get(j + 1)
                    .is_some_and(|&n| is_word(&tokens[n].token, "OF")) =>
            {
                return Some(j);
            }
            _ => {}
        }
    }
    None
}

fn span_of(tokens: &[TokenWithSpan], first: usize, last: usize) -> Span {
    Span::new(tokens[first].span.start, tokens[last].span.end)
}

fn text_of(tokens: &[TokenWithSpan], first: usize, last: usize) -> String {
    tokens[first..=last]
        .iter()
        .map(|t| t.token.to_string())
        .collect::<String>()
        .trim()
        .to_string()
}

fn word(value: &str, span: Span) -> TokenWithSpan {
    TokenWithSpan::new(
        Token::Word(Word {
            value: value.to_string(),
            quote_style: None,
            keyword: crate::sqlparser::keywords::Keyword::NoKeyword,
        }),
        span,
    )
}

fn quoted(value: &str, span: Span) -> TokenWithSpan {
    TokenWithSpan::new(
        Token::Word(Word {
            value: value.to_string(),
            quote_style: Some('`'),
            keyword: crate::sqlparser::keywords::Keyword::NoKeyword,
        }),
        span,
    )
}

fn keyword(value: &str, span: Span) -> TokenWithSpan {
    TokenWithSpan::new(Token::make_keyword(value), span)
}

/// Rewrites the clause at `tokens[at]`; gives the tokens, the clause and where to look
/// for the next one.
fn rewrite_one(
    tokens: &[TokenWithSpan],
    at: usize,
    generated: &mut usize,
) -> Result<(Vec<TokenWithSpan>, Watermark, usize), ParseError> {
    let sig = sig(tokens);
    let unread = || ParseError::new("WATERMARK needs DELAY OF <interval>", tokens[at].span);
    let k = sig.iter().position(|&i| i == at).ok_or_else(unread)?;
    let delay_k = delay_of(tokens, &sig, k + 1).ok_or_else(unread)?;
    let clause_start = tokens[at].span.start;
    if delay_k == k + 1 {
        return Err(ParseError::new(
            "WATERMARK needs an event time before DELAY OF",
            tokens[at].span,
        )
        .with_help("write WATERMARK <timestamp column> DELAY OF INTERVAL <n> <unit>"));
    }
    // The event time: a column, or `expression AS name`.
    let (expr_first, expr_last) = (k + 1, delay_k - 1);
    let column_span = span_of(tokens, sig[expr_first], sig[expr_last]);
    let named = expr_last >= expr_first + 2
        && is_word(&tokens[sig[expr_last - 1]].token, "AS")
        && matches!(tokens[sig[expr_last]].token, Token::Word(_));
    let (column, computed) = if named {
        let Token::Word(w) = &tokens[sig[expr_last]].token else {
            unreachable!()
        };
        let expr = (sig[expr_first], sig[expr_last - 2]);
        (w.value.clone(), Some(expr))
    } else {
        match dotted_last(tokens, &sig[expr_first..=expr_last]) {
            Some(name) => (name, None),
            None => {
                return Err(ParseError::new(
                    format!(
                        "[REQUIRES_EXPLICIT_NAME_IN_WATERMARK_CLAUSE] the watermark's event time `{}` is an expression without a name",
                        text_of(tokens, sig[expr_first], sig[expr_last])
                    ),
                    column_span,
                )
                .with_help(format!(
                    "name it: WATERMARK {} AS event_time DELAY OF …, and use that name in the query",
                    text_of(tokens, sig[expr_first], sig[expr_last])
                )));
            }
        }
    };
    // The delay.
    let interval_k = delay_k + 2;
    let Some(&interval_i) = sig
        .get(interval_k)
        .filter(|&&i| is_word(&tokens[i].token, "INTERVAL"))
    else {
        let span = sig
            .get(interval_k)
            .map_or(tokens[sig[delay_k]].span, |&i| tokens[i].span);
        return Err(ParseError::new("expected INTERVAL after DELAY OF", span)
            .with_help("write the delay as an interval: DELAY OF INTERVAL 10 MINUTES"));
    };
    let (delay_micros, last_k) = interval(tokens, &sig, interval_k + 1)?;
    let delay_span = span_of(tokens, interval_i, sig[last_k]);
    let delay_text = text_of(tokens, interval_i, sig[last_k]);
    if delay_micros < 0 {
        return Err(ParseError::new(
            format!("the watermark's delay threshold ({delay_text}) should not be negative"),
            delay_span,
        )
        .with_help("the delay is how late an event may arrive: a positive interval"));
    }
    let clause_span = Span::new(clause_start, tokens[sig[last_k]].span.end);
    // The alias after the clause, with or without AS.
    let mut after = last_k + 1;
    let has_as = sig
        .get(after)
        .is_some_and(|&i| is_word(&tokens[i].token, "AS"));
    if has_as {
        after += 1;
    }
    let alias = sig.get(after).and_then(|&i| match &tokens[i].token {
        Token::Word(w)
            if w.quote_style.is_some()
                || !NOT_ALIAS.iter().any(|n| w.value.eq_ignore_ascii_case(n)) =>
        {
            Some(w.value.clone())
        }
        _ => None,
    });
    if has_as && alias.is_none() {
        let span = sig.get(after).map_or(clause_span, |&i| tokens[i].span);
        return Err(ParseError::new("expected an alias after AS", span));
    }
    let item_start = from_item_start(tokens, &sig, k);
    let alias = match alias {
        Some(a) => a,
        None => {
            let named = item_name(tokens, &sig, item_start, k);
            named.unwrap_or_else(|| {
                *generated += 1;
                format!("__watermarked_{generated}")
            })
        }
    };
    let alias_given = sig.get(after).is_some_and(|&i| match &tokens[i].token {
        Token::Word(w) => w.value == alias,
        _ => false,
    });
    // Rebuild: item tokens (wrapped when computed), the alias, the rest.
    let mut out = Vec::with_capacity(tokens.len() + 8);
    out.extend_from_slice(&tokens[..sig[item_start]]);
    if let Some((first, last)) = computed {
        let s = tokens[at].span;
        out.push(TokenWithSpan::new(Token::LParen, s));
        out.push(keyword("SELECT", s));
        out.push(TokenWithSpan::new(Token::Mul, s));
        out.push(TokenWithSpan::new(Token::Comma, s));
        out.extend_from_slice(&tokens[first..=last]);
        out.push(keyword("AS", s));
        out.push(quoted(&column, tokens[sig[expr_last]].span));
        out.push(keyword("FROM", s));
        out.extend_from_slice(&tokens[sig[item_start]..at]);
        out.push(TokenWithSpan::new(Token::RParen, s));
    } else {
        out.extend_from_slice(&tokens[sig[item_start]..at]);
    }
    let resume;
    if alias_given {
        // Keep `AS alias` as written.
        let rest_from = sig[last_k] + 1;
        resume = out.len();
        out.extend_from_slice(&tokens[rest_from..]);
    } else {
        let s = tokens[at].span;
        out.push(keyword("AS", s));
        out.push(word(&alias, s));
        resume = out.len();
        out.extend_from_slice(&tokens[sig[last_k] + 1..]);
    }
    let watermark = Watermark {
        alias,
        column,
        delay_micros,
        delay_text,
        span: clause_span,
        column_span,
        delay_span,
    };
    Ok((out, watermark, resume))
}

/// The last part of a dotted name filling `sig_range`, or `None` if it is not one.
fn dotted_last(tokens: &[TokenWithSpan], range: &[usize]) -> Option<String> {
    let mut last = None;
    for (n, &i) in range.iter().enumerate() {
        match (&tokens[i].token, n % 2) {
            (Token::Word(w), 0) => last = Some(w.value.clone()),
            (Token::Period, 1) => {}
            _ => return None,
        }
    }
    last.filter(|_| range.len() % 2 == 1)
}

/// Where (in `sig`) the from item ending before `sig[k]` starts: a name, a call
/// (`STREAM(x)`, `read_files(…)`), or a parenthesized query.
fn from_item_start(tokens: &[TokenWithSpan], sig: &[usize], k: usize) -> usize {
    let mut j = k - 1;
    if tokens[sig[j]].token == Token::RParen {
        let mut depth = 0i32;
        loop {
            match tokens[sig[j]].token {
                Token::RParen => depth += 1,
                Token::LParen => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            if j == 0 {
                return 0;
            }
            j -= 1;
        }
        // A call's name before its arguments (not FROM, JOIN or a comma).
        if j > 0
            && let Token::Word(w) = &tokens[sig[j - 1]].token
            && !["FROM", "JOIN"]
                .iter()
                .any(|x| w.value.eq_ignore_ascii_case(x))
        {
            j -= 1;
        } else {
            return j;
        }
    }
    // A dotted name, back to its first part.
    while j >= 2
        && tokens[sig[j - 1]].token == Token::Period
        && matches!(tokens[sig[j - 2]].token, Token::Word(_))
    {
        j -= 2;
    }
    j
}

/// The name the from item `sig[start..k]` gives its relation when it has no alias: a
/// table's name, or the name inside `STREAM(…)`.
fn item_name(tokens: &[TokenWithSpan], sig: &[usize], start: usize, k: usize) -> Option<String> {
    let parts = &sig[start..k];
    let inner = match parts.first().map(|&i| &tokens[i].token) {
        Some(t)
            if is_word(t, "STREAM")
                && parts
                    .get(1)
                    .is_some_and(|&i| tokens[i].token == Token::LParen) =>
        {
            &parts[2..parts.len() - 1]
        }
        _ => parts,
    };
    dotted_last(tokens, inner)
}

/// The value of the interval whose parts start at `sig[k]`, in microseconds, and the
/// position of its last token: `'10 seconds'`, `'10' SECOND`, `10 SECONDS`,
/// `1 HOUR 30 MINUTES`.
fn interval(tokens: &[TokenWithSpan], sig: &[usize], k: usize) -> Result<(i64, usize), ParseError> {
    let at = |j: usize| sig.get(j).map(|&i| &tokens[i]);
    let bad = |j: usize| {
        let span = at(j)
            .or(at(j.saturating_sub(1)))
            .map_or(Span::empty(), |t| t.span);
        ParseError::new("expected an interval such as INTERVAL 10 MINUTES", span)
    };
    let mut total = 0i64;
    let mut j = k;
    let mut last = None;
    loop {
        let negative = at(j).is_some_and(|t| t.token == Token::Minus);
        if negative {
            j += 1;
        }
        let sign = if negative { -1 } else { 1 };
        match at(j).map(|t| &t.token) {
            Some(Token::SingleQuotedString(s)) => {
                let unit = at(j + 1).and_then(|t| unit_micros(&t.token));
                match unit {
                    Some(u) => {
                        let n = number(s.trim()).ok_or_else(|| bad(j))?;
                        total += sign * n * u;
                        j += 2;
                    }
                    None => {
                        total += sign * string_interval(s).ok_or_else(|| bad(j))?;
                        j += 1;
                    }
                }
            }
            Some(Token::Number(n, _)) => {
                let u = at(j + 1)
                    .and_then(|t| unit_micros(&t.token))
                    .ok_or_else(|| bad(j + 1))?;
                total += sign * number(n).ok_or_else(|| bad(j))? * u;
                j += 2;
            }
            _ if last.is_some() && !negative => break,
            _ => return Err(bad(j)),
        }
        last = Some(j - 1);
        // Another `<n> <unit>` part follows only a number.
        let more = at(j)
            .is_some_and(|t| matches!(t.token, Token::Number(..) | Token::SingleQuotedString(_)));
        if !more {
            break;
        }
    }
    let last = last.ok_or_else(|| bad(k))?;
    Ok((total, last))
}

fn number(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

/// A duration written as Spark reads an interval string, in microseconds:
/// `'10 seconds'`, `'1 hour 30 minutes'`, `'interval 5 minutes'` (a month is 31 days).
pub fn duration_micros(s: &str) -> Option<i64> {
    let t = s.trim();
    let t = match t.get(..9) {
        Some(head) if head.eq_ignore_ascii_case("interval ") => &t[9..],
        _ => t,
    };
    string_interval(t)
}

/// `'10 seconds'`, `'1 hour 30 minutes'`.
fn string_interval(s: &str) -> Option<i64> {
    let words: Vec<&str> = s.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(2) {
        return None;
    }
    let mut total = 0;
    for pair in words.chunks(2) {
        total += number(pair[0])? * unit_of(pair[1])?;
    }
    Some(total)
}

fn unit_micros(token: &Token) -> Option<i64> {
    match token {
        Token::Word(w) if w.quote_style.is_none() => unit_of(&w.value),
        _ => None,
    }
}

fn unit_of(word: &str) -> Option<i64> {
    const SECOND: i64 = 1_000_000;
    const DAY: i64 = 86_400 * SECOND;
    let w = word.to_ascii_uppercase();
    let w = w.strip_suffix('S').unwrap_or(&w);
    Some(match w {
        "MICROSECOND" => 1,
        "MILLISECOND" => 1_000,
        "SECOND" => SECOND,
        "MINUTE" => 60 * SECOND,
        "HOUR" => 3_600 * SECOND,
        "DAY" => DAY,
        "WEEK" => 7 * DAY,
        "MONTH" => 31 * DAY,
        "YEAR" => 12 * 31 * DAY,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(sql: &str) -> (String, Found) {
        let dialect = crate::dialect::SparkSqlDialect;
        let tokens = crate::sqlparser::tokenizer::Tokenizer::new(&dialect, sql)
            .tokenize_with_location()
            .expect("tokens");
        let (tokens, found) = extract(tokens);
        let text = tokens
            .iter()
            .map(|t| t.token.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        (text.split_whitespace().collect::<Vec<_>>().join(" "), found)
    }

    #[test]
    fn a_column_with_an_alias_with_and_without_as() {
        let (text, found) = run(
            "SELECT * FROM STREAM(src) WATERMARK ts DELAY OF INTERVAL 10 SECONDS AS s GROUP BY 1",
        );
        assert_eq!(text, "SELECT * FROM STREAM ( src ) AS s GROUP BY 1");
        let w = &found.watermarks[0];
        assert_eq!((w.alias.as_str(), w.column.as_str()), ("s", "ts"));
        assert_eq!(w.delay_micros, 10_000_000);
        assert_eq!(w.delay_text, "INTERVAL 10 SECONDS");
        let (text, found) =
            run("SELECT * FROM STREAM(t) WATERMARK e.ts DELAY OF INTERVAL 3 MINUTES imp JOIN x");
        assert_eq!(text, "SELECT * FROM STREAM ( t ) imp JOIN x");
        assert_eq!(found.watermarks[0].delay_micros, 180_000_000);
        assert_eq!(found.watermarks[0].alias, "imp");
    }

    #[test]
    fn without_an_alias_the_item_is_named() {
        let (text, found) =
            run("SELECT * FROM STREAM(events) WATERMARK ts DELAY OF INTERVAL '1' MINUTE WHERE x");
        assert_eq!(text, "SELECT * FROM STREAM ( events ) AS events WHERE x");
        assert_eq!(found.watermarks[0].delay_micros, 60_000_000);
        let (text, _) =
            run("SELECT * FROM read_files('x') WATERMARK ts DELAY OF INTERVAL '30 seconds'");
        assert_eq!(text, "SELECT * FROM read_files ( 'x' ) AS __watermarked_1");
    }

    #[test]
    fn a_computed_event_time_becomes_a_column_of_the_item() {
        let (text, found) = run(
            "SELECT * FROM STREAM(raw) WATERMARK to_timestamp(s) AS t DELAY OF INTERVAL 1 HOUR 30 MINUTES r",
        );
        assert_eq!(
            text,
            "SELECT * FROM ( SELECT * , to_timestamp ( s ) AS `t` FROM STREAM ( raw ) ) r"
        );
        assert_eq!(found.watermarks[0].column, "t");
        assert_eq!(found.watermarks[0].delay_micros, 5_400_000_000);
    }

    #[test]
    fn an_unnamed_expression_and_a_negative_delay_are_errors() {
        let (_, found) =
            run("SELECT * FROM STREAM(raw) WATERMARK to_timestamp(s) DELAY OF INTERVAL 1 MINUTE r");
        assert!(
            found.errors[0]
                .message
                .starts_with("[REQUIRES_EXPLICIT_NAME_IN_WATERMARK_CLAUSE]")
        );
        let (_, found) =
            run("SELECT * FROM STREAM(raw) WATERMARK ts DELAY OF INTERVAL -1 MINUTE r");
        assert!(
            found.errors[0].message.contains("should not be negative"),
            "{:?}",
            found.errors
        );
    }

    #[test]
    fn a_column_named_watermark_is_left_alone() {
        let (text, found) = run("SELECT watermark, a FROM t WHERE watermark > 1");
        assert_eq!(text, "SELECT watermark , a FROM t WHERE watermark > 1");
        assert!(found.watermarks.is_empty() && found.errors.is_empty());
    }
}
