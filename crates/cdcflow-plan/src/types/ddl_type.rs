//! Types in `schema => 'ddl'` strings, in Spark's DDL syntax. sqlparser's Databricks
//! dialect reads scalar types but not `MAP<K, V>`, nor a `MAP` nested in `ARRAY<…>` or
//! `STRUCT<…>`; the nested types are read here, the scalars left to sqlparser.

use std::sync::Arc;

use cdcflow_sql::sqlparser::keywords::Keyword;
use cdcflow_sql::sqlparser::parser::Parser;
use cdcflow_sql::sqlparser::tokenizer::Token;
use datafusion::arrow::datatypes::{DataType, Field, Fields};

use super::arrow_type;

/// Reads one type at `p`'s position.
pub(super) fn parse(p: &mut Parser<'_>) -> Result<DataType, String> {
    let mut reader = Reader {
        p,
        pending_gt: false,
    };
    let t = reader.parse_type()?;
    if reader.pending_gt {
        return Err("unexpected '>' in schema".into());
    }
    Ok(t)
}

struct Reader<'p, 'a> {
    p: &'p mut Parser<'a>,
    /// The second half of a `>>` token (`ARRAY<MAP<STRING, INT>>`), not yet consumed.
    pending_gt: bool,
}

impl Reader<'_, '_> {
    fn parse_type(&mut self) -> Result<DataType, String> {
        let word = match &self.p.peek_token().token {
            Token::Word(w) => w.value.to_ascii_uppercase(),
            _ => String::new(),
        };
        if self.p.peek_nth_token(1).token != Token::Lt {
            return self.scalar();
        }
        let nested = match word.as_str() {
            "ARRAY" => {
                self.open();
                let element = self.parse_type()?;
                DataType::List(Arc::new(Field::new("element", element, true)))
            }
            "MAP" => {
                self.open();
                let key = self.parse_type()?;
                if self.pending_gt || !self.p.consume_token(&Token::Comma) {
                    return Err("MAP takes a key and a value type: MAP<STRING, BIGINT>".into());
                }
                let value = self.parse_type()?;
                let entries = Field::new(
                    "key_value",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", key, false),
                        Field::new("value", value, true),
                    ])),
                    false,
                );
                DataType::Map(Arc::new(entries), false)
            }
            "STRUCT" => {
                self.open();
                DataType::Struct(Fields::from(self.struct_fields()?))
            }
            _ => return self.scalar(),
        };
        self.close()?;
        Ok(nested)
    }

    fn scalar(&mut self) -> Result<DataType, String> {
        let t = self.p.parse_data_type().map_err(|e| e.to_string())?;
        arrow_type(&t)
    }

    /// Consumes the type's name and its `<`.
    fn open(&mut self) {
        self.p.next_token();
        self.p.next_token();
    }

    fn close(&mut self) -> Result<(), String> {
        if std::mem::take(&mut self.pending_gt) {
            return Ok(());
        }
        match self.p.next_token().token {
            Token::Gt => Ok(()),
            Token::ShiftRight => {
                self.pending_gt = true;
                Ok(())
            }
            other => Err(format!("expected '>' in schema, found '{other}'")),
        }
    }

    /// `name[:] type [NOT NULL] [COMMENT '…'], …` up to the closing `>`.
    fn struct_fields(&mut self) -> Result<Vec<Field>, String> {
        let mut fields = Vec::new();
        if self.p.peek_token().token == Token::Gt {
            return Ok(fields);
        }
        loop {
            let name = self.p.parse_identifier().map_err(|e| e.to_string())?;
            let _ = self.p.consume_token(&Token::Colon);
            let t = self.parse_type()?;
            let not_null =
                !self.pending_gt && self.p.parse_keywords(&[Keyword::NOT, Keyword::NULL]);
            if !self.pending_gt && self.p.parse_keyword(Keyword::COMMENT) {
                self.p.parse_literal_string().map_err(|e| e.to_string())?;
            }
            fields.push(Field::new(name.value, t, !not_null));
            if self.pending_gt || !self.p.consume_token(&Token::Comma) {
                return Ok(fields);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ddl_schema;
    use super::*;

    fn type_of(ddl: &str) -> DataType {
        ddl_schema(ddl)
            .expect("parses")
            .field(0)
            .data_type()
            .clone()
    }

    fn map(key: DataType, value: DataType) -> DataType {
        DataType::Map(
            Arc::new(Field::new(
                "key_value",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", key, false),
                    Field::new("value", value, true),
                ])),
                false,
            )),
            false,
        )
    }

    #[test]
    fn maps_nest_in_arrays_and_structs_and_hold_them() {
        assert_eq!(
            type_of("m MAP<STRING, BIGINT>"),
            map(DataType::Utf8, DataType::Int64)
        );
        let list = |t| DataType::List(Arc::new(Field::new("element", t, true)));
        assert_eq!(
            type_of("a ARRAY<MAP<STRING,INT>>"),
            list(map(DataType::Utf8, DataType::Int32))
        );
        assert_eq!(
            type_of("m MAP<STRING, ARRAY<INT>>"),
            map(DataType::Utf8, list(DataType::Int32))
        );
        let s = type_of("s STRUCT<tags: MAP<STRING, STRING> NOT NULL, n INT COMMENT 'count'>");
        assert_eq!(
            s,
            DataType::Struct(Fields::from(vec![
                Field::new("tags", map(DataType::Utf8, DataType::Utf8), false),
                Field::new("n", DataType::Int32, true),
            ]))
        );
        let schema =
            ddl_schema("id BIGINT, attrs MAP<STRING, DECIMAL(10,2)>, ok BOOLEAN").expect("parses");
        assert_eq!(schema.fields().len(), 3);
        assert!(ddl_schema("m MAP<STRING>").is_err());
        assert!(ddl_schema("a ARRAY<INT>>").is_err());
    }
}
