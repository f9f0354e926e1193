//! `from_avro` over values encoded here by Avro's specification (zig-zag varints,
//! length-prefixed strings, a union's branch index first), read through a session as a
//! flow reads them; the registry is a stub REST server on loopback.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;

use datafusion::arrow::array::{BinaryArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;

/// Avro's `long` and `int`: zig-zag, then 7 bits a byte, low first.
fn long(n: i64) -> Vec<u8> {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = vec![];
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn string(s: &str) -> Vec<u8> {
    let mut out = long(s.len() as i64);
    out.extend_from_slice(s.as_bytes());
    out
}

/// A record of the `V1` schema: `id`, `name`, and `email` (a union with null).
fn v1(id: i64, name: &str, email: Option<&str>) -> Vec<u8> {
    let mut out = long(id);
    out.extend(string(name));
    match email {
        None => out.extend(long(0)),
        Some(e) => {
            out.extend(long(1));
            out.extend(string(e));
        }
    }
    out
}

const V1: &str = r#"{"type": "record", "name": "customer", "fields": [
  {"name": "id", "type": "long"},
  {"name": "name", "type": "string"},
  {"name": "email", "type": ["null", "string"], "default": null}]}"#;

/// V1 with a field the producer added later, with its default.
const V2: &str = r#"{"type": "record", "name": "customer", "fields": [
  {"name": "id", "type": "long"},
  {"name": "name", "type": "string"},
  {"name": "email", "type": ["null", "string"], "default": null},
  {"name": "tier", "type": "string", "default": "basic"}]}"#;

fn framed(id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// `sql`'s first column over a table `r` of one binary column `v`, each row as text.
async fn decoded(values: Vec<Option<Vec<u8>>>, sql: &str) -> Result<Vec<String>, String> {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Binary, true)]));
    let column = BinaryArray::from_iter(values.iter().map(|v| v.as_deref()));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(column)]).unwrap();
    let ctx = super::super::session_context();
    let table = MemTable::try_new(schema, vec![vec![batch]]).unwrap();
    ctx.register_table("r", Arc::new(table)).unwrap();
    let state = ctx.state();
    let mut statement = state
        .sql_to_statement(sql, &datafusion::config::Dialect::Databricks)
        .map_err(|e| e.to_string())?;
    if let datafusion::sql::parser::Statement::Statement(s) = &mut statement {
        super::super::syntax::rewrite_statement(s);
    }
    let plan = state
        .statement_to_plan(statement)
        .await
        .map_err(|e| e.to_string())?;
    let batches = ctx
        .execute_logical_plan(plan)
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut out = vec![];
    for b in batches {
        let f = ArrayFormatter::try_new(b.column(0).as_ref(), &FormatOptions::default()).unwrap();
        out.extend((0..b.num_rows()).map(|i| f.value(i).to_string()));
    }
    Ok(out)
}

fn call(options: &str) -> String {
    format!("SELECT from_avro(v, '{V1}'{options}) FROM r")
}

#[tokio::test]
async fn plain_records_decode_into_the_reader_schemas_struct() {
    let rows = decoded(
        vec![
            Some(v1(1, "ada", Some("a@x"))),
            None,
            Some(v1(-300, "bob", None)),
        ],
        &call(""),
    )
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            "{id: 1, name: ada, email: a@x}",
            "",
            "{id: -300, name: bob, email: }"
        ]
    );
    // Fields read by name, as a flow reads them.
    let names = decoded(
        vec![Some(v1(7, "cy", None))],
        &format!("SELECT c.name FROM (SELECT from_avro(v, '{V1}') AS c FROM r)"),
    )
    .await
    .unwrap();
    assert_eq!(names, ["cy"]);
}

#[tokio::test]
async fn a_schema_that_is_not_a_record_gives_its_value() {
    let rows = decoded(
        vec![Some(string("hello")), Some(string(""))],
        r#"SELECT from_avro(v, '"string"') FROM r"#,
    )
    .await
    .unwrap();
    assert_eq!(rows, ["hello", ""]);
    let rows = decoded(
        vec![Some(long(-5))],
        r#"SELECT from_avro(v, '{"type": "long"}') FROM r"#,
    )
    .await
    .unwrap();
    assert_eq!(rows, ["-5"]);
}

#[tokio::test]
async fn a_value_that_is_not_a_record_fails_the_query_or_is_null_when_permissive() {
    let mut truncated = v1(2, "truncated", Some("t@x"));
    truncated.truncate(6);
    let mut longer = v1(3, "longer", None);
    longer.extend_from_slice(&[9, 9, 9]);
    // Five zero bytes after the record: the framing of a next value, in plain mode.
    let mut padded = v1(5, "padded", None);
    padded.extend_from_slice(&[0; 5]);
    let values = vec![
        Some(v1(1, "ok", None)),
        Some(truncated),
        Some(longer),
        Some(v1(4, "fine", None)),
        Some(padded),
        Some(v1(6, "after", None)),
    ];
    let err = decoded(values.clone(), &call("")).await.unwrap_err();
    assert!(
        err.contains("value 2 of the batch (`\\x04\\x12trun`, 6 bytes) is not an Avro record")
            && err.contains("PERMISSIVE"),
        "{err}"
    );
    let rows = decoded(values, &call(", map('mode', 'PERMISSIVE')"))
        .await
        .unwrap();
    assert_eq!(
        rows,
        [
            "{id: 1, name: ok, email: }",
            "",
            "",
            "{id: 4, name: fine, email: }",
            "",
            "{id: 6, name: after, email: }"
        ]
    );
}

#[tokio::test]
async fn mistakes_in_the_call_are_named() {
    let err = decoded(
        vec![],
        "SELECT from_avro(v, '{\"type\": \"recrd\"}') FROM r",
    )
    .await
    .unwrap_err();
    assert!(err.contains("from_avro(): invalid Avro schema"), "{err}");
    let err = decoded(vec![], "SELECT from_avro(v, concat('a', 'b')) FROM r")
        .await
        .unwrap_err();
    assert!(err.contains("literal JSON string"), "{err}");
    let err = decoded(
        vec![Some(v1(1, "a", None))],
        &call(", map('mod', 'PERMISSIVE')"),
    )
    .await
    .unwrap_err();
    assert!(err.contains("unknown option `mod`"), "{err}");
}

/// A registry of the given schemas by id, answering Confluent's `GET /schemas/ids/{id}`
/// (404 with Confluent's error body for others); counts the requests it answered.
fn registry(schemas: Vec<(u32, &'static str)>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let id: Option<u32> = request
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.strip_prefix("/schemas/ids/"))
                .and_then(|id| id.parse().ok());
            let (status, body) = match schemas.iter().find(|(i, _)| Some(*i) == id) {
                Some((_, s)) => ("200 OK", serde_json::json!({ "schema": s }).to_string()),
                None => (
                    "404 Not Found",
                    r#"{"error_code":40403,"message":"Schema not found"}"#.to_string(),
                ),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (address, asked)
}

#[tokio::test]
async fn registry_framed_values_of_two_writer_schemas_resolve_to_the_reader_schema() {
    let (address, asked) = registry(vec![(11, V1), (12, V2)]);
    let mut newer = v1(2, "bo", Some("b@x"));
    newer.extend(string("gold"));
    let values = vec![
        Some(framed(11, &v1(1, "al", None))),
        Some(framed(12, &newer)),
        Some(framed(11, &v1(3, "cy", None))),
    ];
    // Read with the older schema: the field the producer added is skipped.
    let options = format!(", map('schemaRegistryAddress', '{address}')");
    let rows = decoded(values.clone(), &call(&options)).await.unwrap();
    assert_eq!(
        rows,
        [
            "{id: 1, name: al, email: }",
            "{id: 2, name: bo, email: b@x}",
            "{id: 3, name: cy, email: }"
        ]
    );
    // Read with the newer one: the older records take the field's default.
    let rows = decoded(
        values,
        &format!("SELECT from_avro(v, '{V2}'{options}) FROM r"),
    )
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            "{id: 1, name: al, email: , tier: basic}",
            "{id: 2, name: bo, email: b@x, tier: gold}",
            "{id: 3, name: cy, email: , tier: basic}"
        ]
    );
    // Each id was asked once, for both queries.
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_unknown_id_or_an_unframed_value_is_named() {
    let (address, _) = registry(vec![(11, V1)]);
    let options = format!(", map('schemaRegistryAddress', '{address}')");
    let err = decoded(vec![Some(framed(99, &v1(1, "a", None)))], &call(&options))
        .await
        .unwrap_err();
    assert!(
        err.contains("its schema id 99 is not in the registry at http://127.0.0.1:"),
        "{err}"
    );
    let err = decoded(vec![Some(v1(1, "a", None))], &call(&options))
        .await
        .unwrap_err();
    assert!(err.contains("schema registry's framing"), "{err}");
    let rows = decoded(
        vec![Some(v1(1, "a", None)), Some(framed(11, &v1(2, "b", None)))],
        &call(&format!(
            ", map('schemaRegistryAddress', '{address}', 'mode', 'PERMISSIVE')"
        )),
    )
    .await
    .unwrap();
    assert_eq!(rows, ["", "{id: 2, name: b, email: }"]);
}
