//! The statement layer: our pipeline statements on top of sqlparser's `Parser`,
//! which we drive token by token and hand expressions, types and queries to.

use crate::ast::*;
use crate::error::ParseError;
use crate::sqlparser::ast::{Expr, Ident, Value};
use crate::sqlparser::parser::{Parser, ParserError};
use crate::sqlparser::tokenizer::{Location, Span, Token, TokenWithSpan};
use crate::tokens::{is_word, tokenize};

/// The statements of one file and every syntax error found in it. Parsing goes on
/// after an error from the next `;`, cell boundary, or statement keyword at the start
/// of a line (a forgotten `;` must not hide the next statement), so one run reports
/// all broken statements.
#[derive(Debug, Default)]
pub struct ParsedFile {
    pub statements: Vec<Statement>,
    pub errors: Vec<ParseError>,
    /// Datasets whose definition broke after their name: a reference to one is not
    /// reported as unknown on top of the definition's own error.
    pub broken: Vec<String>,
    /// The WATERMARK clauses of the file's queries, taken out of them
    /// (`watermark.rs`); a query's own are those its span holds.
    pub watermarks: Vec<crate::watermark::Watermark>,
}

/// Parses the text of a flow file.
pub fn parse_statements(text: &str) -> ParsedFile {
    let (tokens, unended, found) = match tokenize(text) {
        Ok(t) => t,
        Err(e) => {
            return ParsedFile {
                errors: vec![e],
                ..ParsedFile::default()
            };
        }
    };
    let dialect = crate::dialect::SparkSqlDialect;
    let parser = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let mut p = StatementParser {
        p: parser,
        defining: None,
    };
    let mut out = ParsedFile {
        watermarks: found.watermarks,
        errors: found.errors,
        ..ParsedFile::default()
    };
    loop {
        while p.p.consume_token(&Token::SemiColon) {}
        if p.at_end() {
            break;
        }
        let start = p.p.index();
        p.defining = None;
        let parsed = p.statement();
        // A statement that ends where the next begins, without `;` (`tokens.rs`).
        if let Some(next) = unended.iter().find(|u| u.span == p.peek().span)
            && parsed.is_ok()
        {
            out.errors.push(ParseError::new(
                format!(
                    "expected ';' at the end of the statement, found '{}'",
                    next.word
                ),
                next.span,
            ));
        }
        match parsed.and_then(|s| match p.end_of_statement() {
            Ok(()) => Ok(s),
            // Only the `;` is missing before the next statement: keep this one, so
            // that nothing it defines is then reported as unknown.
            Err(e) if p.statement_starts_here() => {
                out.errors.push(e);
                Ok(s)
            }
            Err(e) => Err(e),
        }) {
            Ok(s) => out.statements.push(s),
            Err(mut e) => {
                // An error at a `;` standing in for a missing one names what is there.
                if let Some(next) = unended.iter().find(|u| u.span.start == e.span.start)
                    && let Some(head) = e.message.strip_suffix("found ;")
                {
                    e.message = format!("{head}found '{}'", next.word);
                }
                out.errors.push(e);
                out.broken.extend(p.defining.take());
                p.skip_statement(start);
            }
        }
    }
    out
}

type Result<T> = std::result::Result<T, ParseError>;

/// The AUTO CDC clauses after KEYS, by their first words.
const CLAUSES: [&[&str]; 8] = [
    &["SEQUENCE", "BY"],
    &["APPLY", "AS", "DELETE", "WHEN"],
    &["APPLY", "AS", "TRUNCATE", "WHEN"],
    &["IGNORE", "NULL", "UPDATES"],
    &["COLUMNS"],
    &["STORED", "AS", "SCD", "TYPE"],
    &["TRACK", "HISTORY", "ON"],
    &["WHERE"],
];

struct StatementParser<'a> {
    p: Parser<'a>,
    /// The dataset the statement being parsed defines, once its name is read.
    defining: Option<String>,
}

/// A clause that may appear once, remembered to report a repeat.
struct Seen(Vec<(&'static str, Span)>);

impl Seen {
    fn check(&mut self, clause: &'static str, span: Span) -> Result<()> {
        if let Some((_, first)) = self.0.iter().find(|(c, _)| *c == clause) {
            return Err(
                ParseError::new(format!("duplicate {clause} clause"), span).with_help(format!(
                    "{clause} is already given at line {}:{}; keep one",
                    first.start.line, first.start.column
                )),
            );
        }
        self.0.push((clause, span));
        Ok(())
    }
}

impl<'a> StatementParser<'a> {
    fn at_end(&self) -> bool {
        matches!(self.p.peek_token_ref().token, Token::EOF)
    }

    fn peek(&self) -> &TokenWithSpan {
        self.p.peek_token_ref()
    }

    fn peek_is(&self, word: &str) -> bool {
        is_word(&self.peek().token, word)
    }

    fn peek_nth_is(&self, n: usize, word: &str) -> bool {
        is_word(&self.p.peek_nth_token_ref(n).token, word)
    }

    /// Consumes `word` if it is next.
    fn word(&mut self, word: &str) -> bool {
        if self.peek_is(word) {
            self.p.next_token();
            true
        } else {
            false
        }
    }

    /// Consumes all `words` if they all come next, else nothing.
    fn words(&mut self, words: &[&str]) -> bool {
        if words
            .iter()
            .enumerate()
            .all(|(n, w)| self.peek_nth_is(n, w))
        {
            for _ in words {
                self.p.next_token();
            }
            true
        } else {
            false
        }
    }

    fn expect_words(&mut self, words: &[&str]) -> Result<()> {
        for w in words {
            if !self.word(w) {
                return Err(self.unexpected(&format!("expected {}", words.join(" "))));
            }
        }
        Ok(())
    }

    fn expect_token(&mut self, token: &Token) -> Result<()> {
        if self.p.consume_token(token) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("expected {token}")))
        }
    }

    fn unexpected(&self, what: &str) -> ParseError {
        let found = self.peek();
        let shown = match &found.token {
            Token::EOF => "end of file".to_string(),
            t => format!("'{t}'"),
        };
        ParseError::new(format!("{what}, found {shown}"), self.token_span(found))
    }

    /// A form of the dialect cdcflow does not take, named, at the next token.
    fn unsupported(&self, what: &str) -> ParseError {
        ParseError::new(what, self.token_span(self.peek()))
    }

    fn token_span(&self, t: &TokenWithSpan) -> Span {
        if t.span == Span::empty() || matches!(t.token, Token::EOF) {
            let end = self.last_end();
            return Span::new(end, Location::new(end.line, end.column + 1));
        }
        t.span
    }

    fn start(&self) -> Location {
        self.peek().span.start
    }

    /// The end of the last consumed token.
    fn last_end(&self) -> Location {
        self.p.get_current_token().span.end
    }

    fn span_from(&self, start: Location) -> Span {
        Span::new(start, self.last_end())
    }

    fn sql<T>(&mut self, r: std::result::Result<T, ParserError>) -> Result<T> {
        let fallback = self.token_span(self.peek());
        r.map_err(|e| ParseError::from_sqlparser(e, fallback))
    }

    /// Skips the rest of a broken statement that began at token `start`: up to the next
    /// `;`, or the next statement keyword that begins a line outside parentheses.
    fn skip_statement(&mut self, start: usize) {
        if self.p.index() == start {
            // The statement's first token was the mistake: step over it.
            self.p.next_token();
        }
        let mut depth = 0i64;
        loop {
            match &self.peek().token {
                Token::EOF => return,
                Token::SemiColon if depth <= 0 => return,
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ if depth <= 0 && self.statement_starts_here() => return,
                _ => {}
            }
            self.p.next_token();
        }
    }

    /// A statement keyword first on its line: where the next statement likely starts.
    fn statement_starts_here(&self) -> bool {
        let first_on_line = self.peek().span.start.line > self.last_end().line;
        first_on_line
            && (self.peek_is("CREATE")
                || self.peek_is("SET")
                || self.peek_is("USE")
                || (self.peek_is("APPLY") && self.peek_nth_is(1, "CHANGES")))
    }

    fn end_of_statement(&mut self) -> Result<()> {
        match &self.peek().token {
            Token::SemiColon | Token::EOF => Ok(()),
            Token::VerticalBarRightAngleBracket | Token::Pipe
                if matches!(self.p.peek_nth_token_ref(1).token, Token::Gt)
                    || self.peek().token == Token::VerticalBarRightAngleBracket =>
            {
                Err(self
                    .unsupported("pipe syntax (`|>`) is not supported")
                    .with_help("write the query as SELECT … FROM … WHERE …"))
            }
            _ => Err(self.unexpected("expected ';' at the end of the statement")),
        }
    }

    /// A query, where the dialect's others are named when they are what comes.
    fn query(&mut self) -> Result<Box<crate::sqlparser::ast::Query>> {
        if self.peek_is("FROM") {
            return Err(self
                .unsupported("FROM-first queries (and pipe syntax `|>`) are not supported")
                .with_help("write the query as SELECT … FROM …"));
        }
        let q = self.p.parse_query();
        self.sql(q)
    }

    fn statement(&mut self) -> Result<Statement> {
        let start = self.start();
        let stmt = if self.word("CREATE") {
            self.create(start)?
        } else if self.words(&["APPLY", "CHANGES", "INTO"]) {
            Statement::ApplyChanges(Box::new(self.auto_cdc(start, false, true)?))
        } else if self.word("SET") {
            Statement::Set(self.set(start)?)
        } else if self.word("USE") {
            Statement::Use(self.use_namespace(start)?)
        } else {
            return Err(self
                .unexpected("expected CREATE, APPLY CHANGES, SET or USE")
                .with_help("a flow file holds CREATE STREAMING TABLE, CREATE MATERIALIZED VIEW, CREATE VIEW, CREATE FLOW, APPLY CHANGES, SET and USE statements"));
        };
        Ok(stmt)
    }

    /// `SET key = value` / `SET key` (after `SET`): the key's and the value's tokens as
    /// written, up to the end of the statement.
    fn set(&mut self, start: Location) -> Result<SetConfig> {
        let key = self.raw_text(|t| matches!(t, Token::Eq));
        if key.is_empty() {
            return Err(self
                .unexpected("expected a configuration key")
                .with_help("write `SET key = value;`"));
        }
        let value = match self.p.consume_token(&Token::Eq) {
            true => Some(self.raw_text(|_| false)),
            false => None,
        };
        Ok(SetConfig {
            key,
            value,
            span: self.span_from(start),
        })
    }

    /// The tokens up to the end of the statement or to one `stop` accepts, as written
    /// (a space where the text had one).
    fn raw_text(&mut self, stop: impl Fn(&Token) -> bool) -> String {
        let mut text = String::new();
        let mut last_end: Option<Location> = None;
        loop {
            let t = self.peek().clone();
            if matches!(t.token, Token::SemiColon | Token::EOF) || stop(&t.token) {
                return text;
            }
            if last_end.is_some_and(|end| end != t.span.start) {
                text.push(' ');
            }
            text.push_str(&t.token.to_string());
            last_end = Some(t.span.end);
            self.p.next_token();
        }
    }

    /// `USE CATALOG c`, `USE SCHEMA s`, `USE DATABASE s`, `USE s` (after `USE`).
    fn use_namespace(&mut self, start: Location) -> Result<UseNamespace> {
        let kind = if self.word("CATALOG") {
            UseKind::Catalog
        } else {
            let _ = self.word("SCHEMA") || self.word("DATABASE");
            UseKind::Schema
        };
        let name = self.dataset_name()?;
        let most = match kind {
            UseKind::Catalog => 1,
            UseKind::Schema => 2,
        };
        if name.parts.len() > most {
            return Err(ParseError::new(
                format!(
                    "`{name}` has {} parts; a {} name has at most {most}",
                    name.parts.len(),
                    match kind {
                        UseKind::Catalog => "catalog",
                        UseKind::Schema => "schema",
                    }
                ),
                name.span,
            ));
        }
        Ok(UseNamespace {
            kind,
            name,
            span: self.span_from(start),
        })
    }

    fn create(&mut self, start: Location) -> Result<Statement> {
        let or_refresh = self.words(&["OR", "REFRESH"]) || self.words(&["OR", "REPLACE"]);
        let private = self.word("PRIVATE") | self.word("TEMPORARY");
        if self.word("FLOW") {
            return self.flow(start).map(Statement::CreateFlow);
        }
        let kind = if self.word("STREAMING") || self.word("INCREMENTAL") {
            if self.word("LIVE") && self.peek_is("VIEW") {
                self.p.next_token();
                DatasetKind::View
            } else {
                self.expect_words(&["TABLE"])?;
                DatasetKind::StreamingTable
            }
        } else if self.words(&["MATERIALIZED", "VIEW"]) || self.words(&["LIVE", "TABLE"]) {
            DatasetKind::MaterializedView
        } else if self.word("VIEW") || self.words(&["LIVE", "VIEW"]) {
            DatasetKind::View
        } else if self.peek_is("TABLE") {
            return Err(self
                .unexpected("expected STREAMING TABLE, MATERIALIZED VIEW, VIEW or FLOW")
                .with_help("a pipeline table is either a STREAMING TABLE (fed incrementally by flows) or a MATERIALIZED VIEW (recomputed from its query)"));
        } else {
            return Err(
                self.unexpected("expected STREAMING TABLE, MATERIALIZED VIEW, VIEW or FLOW")
            );
        };
        self.dataset(start, kind, or_refresh, private)
            .map(Statement::CreateDataset)
    }

    fn dataset_name(&mut self) -> Result<DatasetName> {
        let start = self.start();
        let mut parts = vec![self.ident()?];
        while self.p.consume_token(&Token::Period) {
            parts.push(self.ident()?);
        }
        Ok(DatasetName {
            parts,
            span: self.span_from(start),
        })
    }

    fn ident(&mut self) -> Result<Ident> {
        let t = self.peek().clone();
        match &t.token {
            Token::Word(w) => {
                self.p.next_token();
                Ok(Ident {
                    value: w.value.clone(),
                    quote_style: w.quote_style,
                    span: t.span,
                })
            }
            _ => Err(self.unexpected("expected a name")),
        }
    }

    fn string(&mut self) -> Result<String> {
        let t = self.peek().clone();
        match t.token {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => {
                self.p.next_token();
                Ok(s)
            }
            _ => Err(self.unexpected("expected a quoted string")),
        }
    }

    fn dataset(
        &mut self,
        start: Location,
        kind: DatasetKind,
        or_refresh: bool,
        private: bool,
    ) -> Result<CreateDataset> {
        let name = self.dataset_name()?;
        self.defining = Some(name.name().to_string());
        let mut d = CreateDataset {
            kind,
            or_refresh,
            private,
            name,
            columns: vec![],
            expectations: vec![],
            table_constraints: vec![],
            comment: None,
            partitioned_by: vec![],
            cluster_by: vec![],
            properties: vec![],
            location: None,
            query: None,
            span: Span::empty(),
        };
        if matches!(self.peek().token, Token::LParen) {
            self.table_elements(&mut d)?;
        }
        let mut seen = Seen(vec![]);
        loop {
            let clause_start = self.start();
            if self.word("COMMENT") {
                seen.check("COMMENT", self.span_from(clause_start))?;
                d.comment = Some(self.string()?);
            } else if self.words(&["PARTITIONED", "BY"]) {
                seen.check("PARTITIONED BY", self.span_from(clause_start))?;
                d.partitioned_by = self.paren_idents()?;
            } else if self.words(&["CLUSTER", "BY"]) {
                seen.check("CLUSTER BY", self.span_from(clause_start))?;
                if !(self.word("AUTO") || self.word("NONE")) {
                    d.cluster_by = self.paren_idents()?;
                }
            } else if self.word("TBLPROPERTIES") {
                seen.check("TBLPROPERTIES", self.span_from(clause_start))?;
                d.properties = self.properties()?;
            } else if self.word("USING") {
                seen.check("USING", self.span_from(clause_start))?;
                if !self.word("DELTA") {
                    return Err(self
                        .unexpected("expected DELTA")
                        .with_help("cdcflow stores every table as Delta Lake"));
                }
            } else if self.word("LOCATION") {
                seen.check("LOCATION", self.span_from(clause_start))?;
                d.location = Some(self.string()?);
            } else {
                break;
            }
        }
        // Databricks also takes the query without AS after the clauses.
        if self.word("AS") || self.peek_is("SELECT") || self.peek_is("WITH") {
            d.query = Some(self.query()?);
        } else if kind != DatasetKind::StreamingTable {
            return Err(self
                .unexpected("expected AS followed by a query")
                .with_help(format!("a {} is defined by its query", kind.noun())));
        }
        d.span = self.span_from(start);
        Ok(d)
    }

    fn table_elements(&mut self, d: &mut CreateDataset) -> Result<()> {
        self.expect_token(&Token::LParen)?;
        loop {
            let start = self.start();
            if self.word("CONSTRAINT") {
                let name = self.ident()?;
                if self.word("EXPECT") {
                    self.expect_token(&Token::LParen)?;
                    let e = self.p.parse_expr();
                    let condition = self.sql(e)?;
                    self.expect_token(&Token::RParen)?;
                    let on_violation = if self.words(&["ON", "VIOLATION"]) {
                        if self.words(&["DROP", "ROW"]) {
                            OnViolation::DropRow
                        } else if self.words(&["FAIL", "UPDATE"]) {
                            OnViolation::FailUpdate
                        } else {
                            return Err(self.unexpected("expected DROP ROW or FAIL UPDATE"));
                        }
                    } else {
                        OnViolation::Warn
                    };
                    d.expectations.push(Expectation {
                        name,
                        condition,
                        on_violation,
                        span: self.span_from(start),
                    });
                } else {
                    let body = self.balanced_text()?;
                    d.table_constraints
                        .push(format!("CONSTRAINT {name} {body}").trim().to_string());
                }
            } else if self.peek_is("PRIMARY") || self.peek_is("FOREIGN") {
                let body = self.balanced_text()?;
                d.table_constraints.push(body);
            } else {
                d.columns.push(self.column_def()?);
            }
            if self.p.consume_token(&Token::Comma) {
                continue;
            }
            self.expect_token(&Token::RParen)?;
            return Ok(());
        }
    }

    /// The tokens up to the next top-level ',' or ')', as text.
    fn balanced_text(&mut self) -> Result<String> {
        let mut depth = 0usize;
        let mut text = String::new();
        loop {
            let t = self.peek().clone();
            match t.token {
                Token::EOF => return Err(self.unexpected("expected ')'")),
                Token::Comma | Token::RParen if depth == 0 => return Ok(text.trim().to_string()),
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            if !text.is_empty()
                && !matches!(t.token, Token::RParen | Token::Comma)
                && !text.ends_with('(')
            {
                text.push(' ');
            }
            text.push_str(&t.token.to_string());
            self.p.next_token();
        }
    }

    fn column_def(&mut self) -> Result<ColumnDef> {
        let start = self.start();
        let name = self.ident()?;
        let data_type = self.data_type()?;
        let mut c = ColumnDef {
            name,
            data_type,
            not_null: false,
            comment: None,
            generated: None,
            identity: None,
            default: None,
            constraints: vec![],
            span: Span::empty(),
        };
        loop {
            if self.words(&["PRIMARY", "KEY"]) {
                let rely = if self.word("RELY") { " RELY" } else { "" };
                c.constraints.push(format!("PRIMARY KEY{rely}"));
            } else if self.words(&["FOREIGN", "KEY", "REFERENCES"]) || self.word("REFERENCES") {
                let table = self.dataset_name()?;
                let columns = match matches!(self.peek().token, Token::LParen) {
                    true => format!(
                        " ({})",
                        self.paren_idents()?
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    false => String::new(),
                };
                c.constraints.push(format!("REFERENCES {table}{columns}"));
            } else if self.words(&["NOT", "NULL"]) {
                c.not_null = true;
            } else if self.word("COMMENT") {
                c.comment = Some(self.string()?);
            } else if self.peek_is("GENERATED") {
                let at = self.start();
                self.word("GENERATED");
                let always = self.word("ALWAYS");
                if !always && !self.words(&["BY", "DEFAULT"]) {
                    return Err(self.unexpected("expected ALWAYS or BY DEFAULT"));
                }
                if !self.word("AS") {
                    return Err(self.unexpected("expected AS"));
                }
                if self.word("IDENTITY") {
                    c.identity = Some(self.identity_options(at, always)?);
                } else if always {
                    self.expect_token(&Token::LParen)?;
                    let e = self.p.parse_expr();
                    c.generated = Some(self.sql(e)?);
                    self.expect_token(&Token::RParen)?;
                } else {
                    return Err(self
                        .unexpected("expected IDENTITY")
                        .with_help("a column computed from others is GENERATED ALWAYS AS (expr)"));
                }
            } else if self.word("DEFAULT") {
                let e = self.p.parse_expr();
                c.default = Some(self.sql(e)?);
            } else {
                break;
            }
        }
        c.span = self.span_from(start);
        Ok(c)
    }

    /// A column's type, `MAP<key, value>` too, which sqlparser's Databricks dialect
    /// does not read, also inside `ARRAY<…>` and `STRUCT<…>`, read here for that (a
    /// `>>` closing two types is split in `spark_forms.rs`).
    fn data_type(&mut self) -> Result<crate::sqlparser::ast::DataType> {
        use crate::sqlparser::ast::{ArrayElemTypeDef, DataType, StructBracketKind, StructField};
        let angle = matches!(self.p.peek_nth_token_ref(1).token, Token::Lt);
        if angle && self.peek_is("ARRAY") {
            self.word("ARRAY");
            self.expect_token(&Token::Lt)?;
            let element = self.data_type()?;
            self.expect_token(&Token::Gt)?;
            return Ok(DataType::Array(ArrayElemTypeDef::AngleBracket(Box::new(
                element,
            ))));
        }
        if angle && self.peek_is("STRUCT") {
            self.word("STRUCT");
            self.expect_token(&Token::Lt)?;
            let mut fields = Vec::new();
            loop {
                let name = self.ident()?;
                let _ = self.p.consume_token(&Token::Colon);
                let field_type = self.data_type()?;
                fields.push(StructField {
                    field_name: Some(name),
                    field_type,
                    options: None,
                });
                if !self.p.consume_token(&Token::Comma) {
                    break;
                }
            }
            self.expect_token(&Token::Gt)?;
            return Ok(DataType::Struct(fields, StructBracketKind::AngleBrackets));
        }
        if self.peek_is("MAP") && matches!(self.p.peek_nth_token_ref(1).token, Token::Lt) {
            self.word("MAP");
            self.expect_token(&Token::Lt)?;
            let key = self.data_type()?;
            if !self.p.consume_token(&Token::Comma) {
                return Err(self
                    .unexpected("expected `,` and the value type: MAP takes a key and a value type")
                    .with_help("MAP<STRING, INT>"));
            }
            let value = self.data_type()?;
            self.expect_token(&Token::Gt)?;
            return Ok(DataType::Map(Box::new(key), Box::new(value)));
        }
        let dt = self.p.parse_data_type();
        self.sql(dt)
    }

    /// `[(START WITH n] [INCREMENT BY m)]` after `AS IDENTITY`; both default to 1.
    fn identity_options(&mut self, at: Location, always: bool) -> Result<Identity> {
        let (mut start, mut step) = (1, 1);
        if self.p.consume_token(&Token::LParen) {
            loop {
                if self.words(&["START", "WITH"]) {
                    start = self.signed_integer()?;
                } else if self.words(&["INCREMENT", "BY"]) {
                    step = self.signed_integer()?;
                } else {
                    break;
                }
            }
            self.expect_token(&Token::RParen)?;
        }
        Ok(Identity {
            always,
            start,
            step,
            span: self.span_from(at),
        })
    }

    fn signed_integer(&mut self) -> Result<i64> {
        let negative = self.p.consume_token(&Token::Minus);
        let token = self.peek().clone();
        match &token.token {
            Token::Number(n, _) => {
                let value: i64 = n
                    .parse()
                    .map_err(|_| self.unexpected("expected a BIGINT number"))?;
                self.p.next_token();
                Ok(if negative { -value } else { value })
            }
            _ => Err(self.unexpected("expected a number")),
        }
    }

    fn paren_idents(&mut self) -> Result<Vec<Ident>> {
        self.expect_token(&Token::LParen)?;
        let cols = self.idents()?;
        self.expect_token(&Token::RParen)?;
        Ok(cols)
    }

    fn idents(&mut self) -> Result<Vec<Ident>> {
        let mut cols = vec![self.ident()?];
        while self.p.consume_token(&Token::Comma) {
            cols.push(self.ident()?);
        }
        Ok(cols)
    }

    fn properties(&mut self) -> Result<Vec<TableProperty>> {
        self.expect_token(&Token::LParen)?;
        let mut props = vec![];
        loop {
            let start = self.start();
            let key = self.property_text()?;
            let _ = self.p.consume_token(&Token::Eq);
            let value = self.property_text()?;
            props.push(TableProperty {
                key,
                value,
                span: self.span_from(start),
            });
            if !self.p.consume_token(&Token::Comma) {
                break;
            }
        }
        self.expect_token(&Token::RParen)?;
        Ok(props)
    }

    /// A property key or value: a string, a number, or dotted words (`a.b.c`, `true`).
    fn property_text(&mut self) -> Result<String> {
        let t = self.peek().clone();
        match t.token {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => {
                self.p.next_token();
                Ok(s)
            }
            Token::Number(n, _) => {
                self.p.next_token();
                Ok(n)
            }
            Token::Minus => {
                self.p.next_token();
                match self.peek().token.clone() {
                    Token::Number(n, _) => {
                        self.p.next_token();
                        Ok(format!("-{n}"))
                    }
                    _ => Err(self.unexpected("expected a number")),
                }
            }
            Token::Word(_) => {
                let mut text = self.ident()?.value;
                while self.p.consume_token(&Token::Period) {
                    text.push('.');
                    text.push_str(&self.ident()?.value);
                }
                Ok(text)
            }
            _ => Err(self.unexpected("expected a property key or value")),
        }
    }

    fn flow(&mut self, start: Location) -> Result<CreateFlow> {
        let name = self.ident()?;
        let comment = if self.word("COMMENT") {
            Some(self.string()?)
        } else {
            None
        };
        self.expect_words(&["AS"])?;
        let body = if self.words(&["AUTO", "CDC"]) {
            let once = self.word("ONCE");
            self.expect_words(&["INTO"])?;
            FlowBody::AutoCdc(Box::new(self.auto_cdc(start, once, false)?))
        } else if self.word("INSERT") {
            let mut once = self.word("ONCE");
            self.expect_words(&["INTO"])?;
            once |= self.word("ONCE");
            let target = self.dataset_name()?;
            if !self.words(&["BY", "NAME"]) {
                return Err(self.unexpected("expected BY NAME").with_help(
                    "append flows match columns by name: INSERT INTO target BY NAME SELECT …",
                ));
            }
            if self.peek_is("REPLACE") {
                return Err(self
                    .unsupported("REPLACE USING and REPLACE WHERE flows (a Databricks Beta) are not supported")
                    .with_help("to keep the newest rows per key, use an AUTO CDC flow: KEYS (the REPLACE USING columns) SEQUENCE BY (its sequence)"));
            }
            let query = self.query()?;
            FlowBody::InsertInto(InsertInto {
                once,
                target,
                query,
            })
        } else {
            return Err(self.unexpected("expected AUTO CDC or INSERT after AS"));
        };
        Ok(CreateFlow {
            name,
            comment,
            body,
            span: self.span_from(start),
        })
    }

    fn column_selection(&mut self) -> Result<ColumnSelection> {
        if self.p.consume_token(&Token::Mul) {
            self.expect_words(&["EXCEPT"])?;
            return Ok(ColumnSelection::AllExcept(self.paren_idents()?));
        }
        if matches!(self.peek().token, Token::LParen) {
            return Ok(ColumnSelection::Only(self.paren_idents()?));
        }
        Ok(ColumnSelection::Only(self.idents()?))
    }

    fn expr(&mut self) -> Result<Expr> {
        let e = self.p.parse_expr();
        self.sql(e)
    }

    /// Everything after `INTO` of `AUTO CDC INTO` and `APPLY CHANGES INTO`.
    /// The error where an AUTO CDC clause was expected: a misspelt clause is reported
    /// at its misspelt word, and a clause swallowed by an incomplete expression before
    /// it at the clause.
    fn not_a_clause(&self) -> ParseError {
        let previous = self.p.get_current_token();
        let swallowed = CLAUSES.iter().find(|c| {
            is_word(&previous.token, c[0]) && c.get(1).is_none_or(|second| self.peek_is(second))
        });
        if let Some(clause) = swallowed {
            let shown = clause[..clause.len().min(2)].join(" ");
            return ParseError::new(
                format!("expected an expression, found the clause {shown}"),
                previous.span,
            )
            .with_help("the condition or expression before this clause is incomplete");
        }
        // The clause whose first words match longest; the next word is the mistake.
        let matched = CLAUSES
            .iter()
            .rev() // ties go to the first clause listed
            .map(|c| {
                let n = c
                    .iter()
                    .enumerate()
                    .take_while(|&(i, w)| self.peek_nth_is(i, w))
                    .count();
                (n, c)
            })
            .filter(|&(n, _)| n > 0)
            .max_by_key(|&(n, _)| n);
        if let Some((n, clause)) = matched {
            let wrong = self.p.peek_nth_token_ref(n);
            let found = match &wrong.token {
                Token::EOF => "end of file".to_string(),
                t => format!("'{t}'"),
            };
            return ParseError::new(
                format!("expected {}, found {found}", clause.join(" ")),
                self.token_span(wrong),
            );
        }
        self.unexpected("expected an AUTO CDC clause or ';'")
            .with_help(format!(
                "the clauses after KEYS: {}",
                CLAUSES.map(|c| c.join(" ")).join(", ")
            ))
    }

    /// The source after FROM: `STREAM(name)`, `STREAM name`, `name` or `(query)`.
    fn cdc_source(&mut self) -> Result<CdcSource> {
        let start = self.start();
        if self.p.consume_token(&Token::LParen) {
            let query = self.query()?;
            self.expect_token(&Token::RParen)
                .map_err(|e| e.with_help("the query after FROM ( ends with ) before KEYS"))?;
            return Ok(CdcSource::Query(Spanned::new(query, self.span_from(start))));
        }
        let streaming = self.word("STREAM");
        let name = if streaming {
            self.expect_token(&Token::LParen)?;
            let name = self.dataset_name()?;
            self.expect_token(&Token::RParen)?;
            name
        } else {
            self.dataset_name()?
        };
        Ok(CdcSource::Dataset(SourceRef { name, streaming }))
    }

    /// `SNAPSHOT (query) [WITH VERSION (query)]`, after FROM.
    fn snapshot_source(&mut self) -> Result<SnapshotSource> {
        let start = self.start();
        self.expect_words(&["SNAPSHOT"])?;
        self.expect_token(&Token::LParen)?;
        let query = self.query()?;
        self.expect_token(&Token::RParen)
            .map_err(|e| e.with_help("the query after FROM SNAPSHOT ( ends with )"))?;
        let query = Spanned::new(query, self.span_from(start));
        let version_start = self.start();
        let version = if self.words(&["WITH", "VERSION"]) {
            self.expect_token(&Token::LParen)?;
            let version = self.query()?;
            self.expect_token(&Token::RParen)
                .map_err(|e| e.with_help("the query after WITH VERSION ( ends with )"))?;
            Some(Spanned::new(version, self.span_from(version_start)))
        } else {
            None
        };
        Ok(SnapshotSource { query, version })
    }

    /// A snapshot flow takes KEYS, TRACK HISTORY and STORED AS: its changes are found
    /// by comparing snapshots, so it has no operations, sequence or column list.
    fn snapshot_clauses(&self, cdc: AutoCdc, has_sequence: bool) -> Result<AutoCdc> {
        let refused = [
            (
                cdc.legacy.then_some(cdc.span),
                "APPLY CHANGES",
                "write CREATE FLOW name AS AUTO CDC INTO target FROM SNAPSHOT (query) KEYS (…)",
            ),
            (
                cdc.once.then_some(cdc.span),
                "AUTO CDC ONCE",
                "a snapshot flow applies each snapshot once already; for one snapshot only, give WITH VERSION a query that gives one version",
            ),
            (
                cdc.filter.as_ref().map(|c| c.span),
                "WHERE",
                "filter the rows in the snapshot query",
            ),
            (
                has_sequence.then_some(cdc.sequence_by.span),
                "SEQUENCE BY",
                "snapshots are applied in version order: the version of each is the run's start time, or the row WITH VERSION (query) gives",
            ),
            (
                cdc.apply_as_delete.as_ref().map(|c| c.span),
                "APPLY AS DELETE WHEN",
                "a key missing from a snapshot is deleted",
            ),
            (
                cdc.apply_as_truncate.as_ref().map(|c| c.span),
                "APPLY AS TRUNCATE WHEN",
                "an empty snapshot deletes every key",
            ),
            (
                cdc.ignore_null_updates.as_ref().map(|c| c.span),
                "IGNORE NULL UPDATES",
                "a snapshot row is the key's whole new value; keep old values in the snapshot query (e.g. with COALESCE over the target)",
            ),
            (
                cdc.columns.as_ref().map(|c| c.span),
                "COLUMNS",
                "choose the columns in the snapshot query: FROM SNAPSHOT (SELECT a, b FROM …)",
            ),
        ];
        match refused.into_iter().find(|(span, ..)| span.is_some()) {
            Some((Some(span), clause, help)) => Err(ParseError::new(
                format!("{clause} is not accepted with FROM SNAPSHOT"),
                span,
            )
            .with_help(help)),
            _ => Ok(cdc),
        }
    }

    fn auto_cdc(&mut self, start: Location, once: bool, legacy: bool) -> Result<AutoCdc> {
        let target = self.dataset_name()?;
        self.expect_words(&["FROM"])?;
        // `FROM SNAPSHOT (query)`; a source named `snapshot` has no parenthesis after it.
        let source = if self.peek_is("SNAPSHOT")
            && matches!(self.p.peek_nth_token_ref(1).token, Token::LParen)
        {
            CdcSource::Snapshot(Box::new(self.snapshot_source()?))
        } else {
            self.cdc_source()?
        };
        let keys_start = self.start();
        if !self.word("KEYS") {
            return Err(self.unexpected("expected KEYS").with_help(
                "AUTO CDC takes FROM and KEYS first, then its other clauses in any order",
            ));
        }
        let keys = self.paren_idents()?;
        let keys = Spanned::new(keys, self.span_from(keys_start));

        let mut cdc = AutoCdc {
            once,
            target,
            source,
            keys,
            filter: None,
            ignore_null_updates: None,
            apply_as_delete: None,
            apply_as_truncate: None,
            sequence_by: Spanned::new(Expr::value(Value::Null), Span::empty()),
            columns: None,
            stored_as: None,
            stored_as_bitemporal: None,
            system_sequence_by: None,
            track_history: None,
            legacy,
            span: Span::empty(),
        };
        let mut seen = Seen(vec![]);
        let mut has_sequence = false;
        loop {
            let s = self.start();
            if self.word("WHERE") {
                seen.check("WHERE", self.span_from(s))?;
                let e = self.expr()?;
                cdc.filter = Some(Spanned::new(e, self.span_from(s)));
            } else if self.words(&["IGNORE", "NULL", "UPDATES"]) {
                seen.check("IGNORE NULL UPDATES", self.span_from(s))?;
                let on = if self.word("ON") {
                    Some(self.column_selection()?)
                } else {
                    None
                };
                cdc.ignore_null_updates = Some(Spanned::new(on, self.span_from(s)));
            } else if self.words(&["APPLY", "AS", "DELETE", "WHEN"]) {
                seen.check("APPLY AS DELETE", self.span_from(s))?;
                let e = self.expr()?;
                cdc.apply_as_delete = Some(Spanned::new(e, self.span_from(s)));
            } else if self.words(&["APPLY", "AS", "TRUNCATE", "WHEN"]) {
                seen.check("APPLY AS TRUNCATE", self.span_from(s))?;
                let e = self.expr()?;
                cdc.apply_as_truncate = Some(Spanned::new(e, self.span_from(s)));
            } else if self.words(&["SEQUENCE", "BY"]) {
                seen.check("SEQUENCE BY", self.span_from(s))?;
                let e = self.expr()?;
                cdc.sequence_by = Spanned::new(e, self.span_from(s));
                has_sequence = true;
            } else if self.word("COLUMNS") {
                seen.check("COLUMNS", self.span_from(s))?;
                let c = self.column_selection()?;
                cdc.columns = Some(Spanned::new(c, self.span_from(s)));
            } else if self.words(&["STORED", "AS"]) {
                seen.check("STORED AS", self.span_from(s))?;
                if self.word("BITEMPORAL") {
                    cdc.stored_as_bitemporal = Some(self.span_from(s));
                    continue;
                }
                self.expect_words(&["SCD", "TYPE"])?;
                let n = self.p.parse_literal_uint();
                let n = self.sql(n)?;
                cdc.stored_as = Some(Spanned::new(n, self.span_from(s)));
            } else if self.words(&["SYSTEM", "SEQUENCE", "BY"]) {
                seen.check("SYSTEM SEQUENCE BY", self.span_from(s))?;
                let e = self.expr()?;
                cdc.system_sequence_by = Some(Spanned::new(e, self.span_from(s)));
            } else if self.words(&["TRACK", "HISTORY", "ON"]) {
                seen.check("TRACK HISTORY", self.span_from(s))?;
                let c = self.column_selection()?;
                cdc.track_history = Some(Spanned::new(c, self.span_from(s)));
            } else if self.peek_is("KEYS") || self.peek_is("FROM") {
                return Err(self
                    .unexpected("expected an AUTO CDC clause")
                    .with_help("FROM and KEYS come first, once each"));
            } else if matches!(self.peek().token, Token::SemiColon | Token::EOF)
                || self.statement_starts_here()
            {
                break;
            } else {
                return Err(self.not_a_clause());
            }
        }
        cdc.span = self.span_from(start);
        if cdc.snapshot().is_some() {
            return self.snapshot_clauses(cdc, has_sequence);
        }
        if !has_sequence {
            return Err(ParseError::new("AUTO CDC requires a SEQUENCE BY clause", cdc.span)
                .with_help("add SEQUENCE BY <column> (or STRUCT(a, b)) giving the order of the changes per key"));
        }
        if !legacy && cdc.filter.is_some() {
            let span = cdc.filter.as_ref().map_or(cdc.span, |f| f.span);
            return Err(
                ParseError::new("WHERE is only accepted in APPLY CHANGES", span)
                    .with_help("filter the source in a view and read the view instead"),
            );
        }
        Ok(cdc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_every_broken_statement() {
        let f = parse_statements(
            "CREATE STREAMING TABLE a;\nCREATE FLOW f AS AUTO CDC INTO a FROM STREAM(b) KEYS (id);\nCREATE TABLE x;\nCREATE MATERIALIZED VIEW m AS SELECT 1;",
        );
        assert_eq!(f.statements.len(), 2);
        assert_eq!(f.errors.len(), 2);
        assert_eq!(
            f.errors[0].message,
            "AUTO CDC requires a SEQUENCE BY clause"
        );
        assert_eq!(f.errors[0].span.start.line, 2);
        assert_eq!(f.errors[1].span.start, Location::new(3, 8));
    }

    #[test]
    fn bitemporal_clauses_are_parsed_for_validation_to_name() {
        let f = parse_statements(
            "CREATE FLOW f AS AUTO CDC INTO a FROM STREAM(b) KEYS (id)\n SEQUENCE BY v SYSTEM SEQUENCE BY s STORED AS BITEMPORAL",
        );
        assert!(f.errors.is_empty(), "{:?}", f.errors);
        let text = f.statements[0].to_string();
        assert!(
            text.ends_with("SEQUENCE BY v STORED AS BITEMPORAL SYSTEM SEQUENCE BY s"),
            "{text}"
        );
        let again = parse_statements(&text);
        assert!(again.errors.is_empty() && again.statements[0].to_string() == text);
    }

    #[test]
    fn snapshot_flows_parse_and_print_again() {
        let f = parse_statements(
            "CREATE FLOW f AS AUTO CDC INTO t FROM SNAPSHOT (SELECT * FROM s)\n KEYS (id) STORED AS SCD TYPE 2 TRACK HISTORY ON (a);\n\
             CREATE FLOW g AS AUTO CDC INTO u FROM SNAPSHOT (SELECT * FROM s WHERE v = (SELECT version FROM current_snapshot_version()))\n\
             WITH VERSION (SELECT min(v) AS version FROM s) KEYS (id)",
        );
        assert!(f.errors.is_empty(), "{:?}", f.errors);
        for statement in &f.statements {
            let text = statement.to_string();
            assert!(!text.contains("SEQUENCE BY"), "{text}");
            let again = parse_statements(&text);
            assert!(again.errors.is_empty() && again.statements[0].to_string() == text);
        }
        assert!(
            f.statements[1]
                .to_string()
                .contains(" WITH VERSION (SELECT min(v)")
        );
    }

    #[test]
    fn snapshot_flows_refuse_change_clauses_at_the_clause() {
        let f = parse_statements(
            "CREATE FLOW f AS AUTO CDC INTO t FROM SNAPSHOT (SELECT * FROM s) KEYS (id)\n SEQUENCE BY v",
        );
        assert_eq!(
            f.errors[0].message,
            "SEQUENCE BY is not accepted with FROM SNAPSHOT"
        );
        assert_eq!(f.errors[0].span.start, Location::new(2, 2));
        // A source named `snapshot` is still a source.
        let f = parse_statements(
            "CREATE FLOW f AS AUTO CDC INTO t FROM STREAM(snapshot) KEYS (id) SEQUENCE BY v",
        );
        assert!(f.errors.is_empty(), "{:?}", f.errors);
    }

    #[test]
    fn duplicate_clause_is_an_error_at_the_second() {
        let f = parse_statements(
            "CREATE FLOW f AS AUTO CDC INTO a FROM STREAM(b) KEYS (id)\n SEQUENCE BY x\n SEQUENCE BY y",
        );
        assert_eq!(f.errors[0].message, "duplicate SEQUENCE BY clause");
        assert_eq!(f.errors[0].span.start, Location::new(3, 2));
    }
}
