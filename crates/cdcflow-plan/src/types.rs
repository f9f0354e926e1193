//! Databricks SQL types to Arrow types, and `schema => 'ddl'` strings to schemas.
//!
//! Databricks' `TIMESTAMP` is an instant with microsecond precision, stored in Delta as
//! microseconds since the epoch in UTC; `TIMESTAMP_NTZ` has no time zone. We map them
//! so, not to DataFusion's nanosecond default, since Delta tables only hold microseconds.

use std::sync::Arc;

use cdcflow_sql::sqlparser::ast::DataType as SqlType;
use cdcflow_sql::sqlparser::dialect::DatabricksDialect;
use cdcflow_sql::sqlparser::parser::Parser;
use cdcflow_sql::sqlparser::tokenizer::Token;
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};

mod ddl_type;

/// Converts a SQL type to Arrow, or says which type is not supported.
pub fn arrow_type(t: &SqlType) -> Result<DataType, String> {
    let text = t.to_string().to_ascii_uppercase();
    let base = text.split(['(', '<']).next().unwrap_or("").trim();
    Ok(match base {
        "STRING" | "VARCHAR" | "CHAR" | "TEXT" | "CHARACTER VARYING" => DataType::Utf8,
        "BIGINT" | "LONG" | "INT8" => DataType::Int64,
        "INT" | "INTEGER" | "INT4" => DataType::Int32,
        "SMALLINT" | "SHORT" | "INT2" => DataType::Int16,
        "TINYINT" | "BYTE" => DataType::Int8,
        "DOUBLE" | "DOUBLE PRECISION" | "FLOAT8" => DataType::Float64,
        "FLOAT" | "REAL" | "FLOAT4" => DataType::Float32,
        "BOOLEAN" | "BOOL" => DataType::Boolean,
        "DATE" => DataType::Date32,
        "TIMESTAMP" | "TIMESTAMP_LTZ" => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        }
        "TIMESTAMP_NTZ" => DataType::Timestamp(TimeUnit::Microsecond, None),
        "BINARY" | "VARBINARY" | "BYTEA" => DataType::Binary,
        "DECIMAL" | "DEC" | "NUMERIC" => {
            let (p, s) = decimal_args(&text);
            DataType::Decimal128(p, s)
        }
        _ => return nested_type(t),
    })
}

fn decimal_args(text: &str) -> (u8, i8) {
    let inside = text
        .split_once('(')
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(a, _)| a);
    let mut nums = inside
        .into_iter()
        .flat_map(|s| s.split(','))
        .filter_map(|n| n.trim().parse::<i64>().ok());
    let p = nums.next().unwrap_or(10).clamp(1, 38) as u8;
    // Within 0..=38, so the conversion cannot fail.
    let s = i8::try_from(nums.next().unwrap_or(0).clamp(0, i64::from(p))).unwrap_or(0);
    (p, s)
}

fn nested_type(t: &SqlType) -> Result<DataType, String> {
    use cdcflow_sql::sqlparser::ast::ArrayElemTypeDef;
    match t {
        SqlType::Array(ArrayElemTypeDef::AngleBracket(inner))
        | SqlType::Array(ArrayElemTypeDef::SquareBracket(inner, _))
        | SqlType::Array(ArrayElemTypeDef::Parenthesis(inner)) => Ok(DataType::List(Arc::new(
            Field::new("element", arrow_type(inner)?, true),
        ))),
        SqlType::Struct(fields, _) => {
            let fields: Result<Vec<Field>, String> = fields
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let name = f
                        .field_name
                        .as_ref()
                        .map_or_else(|| format!("c{i}"), |n| n.value.clone());
                    Ok(Field::new(name, arrow_type(&f.field_type)?, true))
                })
                .collect();
            Ok(DataType::Struct(Fields::from(fields?)))
        }
        SqlType::Map(k, v) => {
            let entries = Field::new(
                "key_value",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", arrow_type(k)?, false),
                    Field::new("value", arrow_type(v)?, true),
                ])),
                false,
            );
            Ok(DataType::Map(Arc::new(entries), false))
        }
        other => Err(format!("type {other} is not supported")),
    }
}

/// The Databricks name of an arrow type, quoted as Spark's messages quote types
/// (`"INT"`); arrow's own name for one it does not map.
pub fn sql_type_name(t: &DataType) -> String {
    format!("\"{}\"", sql_type(t))
}

/// The Databricks name of an arrow type (`BIGINT`, `STRUCT<a: INT, b: STRING>`);
/// arrow's own name for one it does not map.
pub fn sql_type(t: &DataType) -> String {
    match t {
        DataType::Boolean => "BOOLEAN".to_string(),
        DataType::Int8 => "TINYINT".to_string(),
        DataType::Int16 => "SMALLINT".to_string(),
        DataType::Int32 => "INT".to_string(),
        DataType::Int64 => "BIGINT".to_string(),
        DataType::Float32 => "FLOAT".to_string(),
        DataType::Float64 => "DOUBLE".to_string(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".to_string(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BINARY".to_string(),
        DataType::Date32 | DataType::Date64 => "DATE".to_string(),
        DataType::Timestamp(_, Some(_)) => "TIMESTAMP".to_string(),
        DataType::Timestamp(_, None) => "TIMESTAMP_NTZ".to_string(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("DECIMAL({p},{s})"),
        DataType::Struct(fields) => format!(
            "STRUCT<{}>",
            fields
                .iter()
                .map(|f| format!("{}: {}", f.name(), sql_type(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::List(f) | DataType::LargeList(f) | DataType::ListView(f) => {
            format!("ARRAY<{}>", sql_type(f.data_type()))
        }
        other => other.to_string(),
    }
}

/// Parses a schema string such as `id BIGINT NOT NULL, name STRING, ts TIMESTAMP`.
pub fn ddl_schema(ddl: &str) -> Result<Schema, String> {
    let dialect = DatabricksDialect {};
    let mut p = Parser::new(&dialect)
        .try_with_sql(ddl)
        .map_err(|e| e.to_string())?;
    let mut fields = Vec::new();
    loop {
        let name = p.parse_identifier().map_err(|e| e.to_string())?;
        // `name: TYPE` is accepted too, as in Spark's DDL strings.
        let _ = p.consume_token(&Token::Colon);
        let t = ddl_type::parse(&mut p)?;
        let not_null = p.parse_keywords(&[
            cdcflow_sql::sqlparser::keywords::Keyword::NOT,
            cdcflow_sql::sqlparser::keywords::Keyword::NULL,
        ]);
        let mut field = Field::new(name.value, t, !not_null);
        // `COMMENT '…'` describes the column (Spark's DDL strings allow it).
        if p.parse_keyword(cdcflow_sql::sqlparser::keywords::Keyword::COMMENT) {
            let comment = p.parse_literal_string().map_err(|e| e.to_string())?;
            field = field.with_metadata([("comment".to_string(), comment)].into());
        }
        fields.push(field);
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    if p.peek_token() != Token::EOF {
        return Err(format!("unexpected '{}' in schema", p.peek_token()));
    }
    Ok(Schema::new(fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_strings_become_schemas() {
        let s = ddl_schema("id BIGINT NOT NULL, name STRING, amount DECIMAL(12,2), ts TIMESTAMP, tags ARRAY<STRING>").unwrap();
        assert_eq!(s.field(0).data_type(), &DataType::Int64);
        assert!(!s.field(0).is_nullable());
        assert_eq!(s.field(2).data_type(), &DataType::Decimal128(12, 2));
        assert_eq!(
            s.field(3).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        assert!(matches!(s.field(4).data_type(), DataType::List(_)));
        assert!(ddl_schema("id BIGINT,").is_err());
        let s = ddl_schema("id BIGINT NOT NULL COMMENT 'the key', name STRING COMMENT \"who\"")
            .unwrap();
        assert_eq!(s.field(0).metadata()["comment"], "the key");
        assert!(!s.field(0).is_nullable());
        assert_eq!(s.field(1).metadata()["comment"], "who");
    }
}
