//! `from_avro(value, '<Avro schema as JSON>' [, options])`: a binary Avro value as the
//! value of the reader schema the flow writes (Spark's and Databricks' function; the
//! schema is a literal, since it fixes the result's type at planning, and `validate`
//! checks it without a registry).
//!
//! Options (a `map(…)` of strings):
//! - `mode`: `FAILFAST` (the default: a value that is not a record of its schema fails
//!   the flow, naming it) or `PERMISSIVE` (its result is null);
//! - `schemaRegistryAddress`: the values are in Confluent's schema-registry framing
//!   (what Confluent's `KafkaAvroSerializer`, Debezium's Avro converter and most
//!   producers write): each value names its writer schema by id, which the registry at
//!   this address is asked for once, and the value is read from its writer schema into
//!   the reader schema by Avro's resolution rules. So a producer that adds a field with a
//!   default, or drops one, keeps the flow's result type; the flow shows a new field
//!   when its reader schema names it;
//! - `confluent.schema.registry.basic.auth.user.info`: `user:password` for the
//!   registry's REST API;
//! - `compression` and `avroSchemaEvolutionMode` `none` are taken and have no effect (a
//!   single value carries no codec; the reader schema never changes during a run).
//!
//! docs/sources.md, "Avro and the schema registry".

mod decode;
mod registry;
mod schema;

use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use decode::{Mode, Writers};
use registry::Registry;
use schema::ReaderSchema;

pub(super) fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(FromAvro {
        // Volatile for the reason from_json is: never copied into pushed-down filters,
        // which would decode every value once more per copy.
        signature: Signature::user_defined(Volatility::Volatile),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FromAvro {
    signature: Signature,
}

/// The reader schema of a literal schema argument.
fn reader_schema(arg: Option<&ScalarValue>) -> Result<ReaderSchema> {
    let text = match arg {
        Some(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
        ) => s,
        _ => {
            return plan_err!(
                "from_avro() takes its Avro schema as a literal JSON string: \
                 from_avro(value, '{{\"type\": \"record\", \"name\": \"r\", \"fields\": [...]}}')"
            );
        }
    };
    match ReaderSchema::parse(text) {
        Ok(s) => Ok(s),
        Err(e) => plan_err!("from_avro(): invalid Avro schema: {e}"),
    }
}

/// What the options map asks.
struct Options {
    mode: Mode,
    registry: Option<Registry>,
}

fn options(arg: Option<&ColumnarValue>) -> Result<Options> {
    let mut out = Options {
        mode: Mode::FailFast,
        registry: None,
    };
    let entries = super::options::entries("from_avro", arg)?;
    let (mut address, mut user_info) = (None, None);
    for (key, value) in &entries {
        let (key, value) = (key.as_str(), value.as_deref());
        match (key.to_ascii_lowercase().as_str(), value) {
            ("mode", Some(m)) if m.eq_ignore_ascii_case("failfast") => out.mode = Mode::FailFast,
            ("mode", Some(m)) if m.eq_ignore_ascii_case("permissive") => {
                out.mode = Mode::Permissive
            }
            ("schemaregistryaddress", Some(a)) => {
                address = Some(a.trim_end_matches('/').to_string())
            }
            ("confluent.schema.registry.basic.auth.user.info", Some(u)) => {
                user_info = Some(u.to_string())
            }
            ("compression", _) => {}
            ("avroschemaevolutionmode", Some(m)) if m.eq_ignore_ascii_case("none") => {}
            ("mode", _) => {
                return exec_err!(
                    "from_avro(): option mode is FAILFAST or PERMISSIVE, not {value:?}"
                );
            }
            ("avroschemaevolutionmode", _) => {
                return exec_err!(
                    "from_avro(): avroSchemaEvolutionMode {value:?} is not supported: the reader \
                     schema is the one the flow writes, and a writer schema the registry gained \
                     is read into it"
                );
            }
            _ => {
                return exec_err!(
                    "from_avro(): unknown option `{key}` (known: mode, schemaRegistryAddress, \
                     confluent.schema.registry.basic.auth.user.info, compression, \
                     avroSchemaEvolutionMode)"
                );
            }
        }
    }
    match (address, user_info) {
        (Some(address), user_info) => out.registry = Some(Registry { address, user_info }),
        (None, Some(_)) => {
            return exec_err!(
                "from_avro(): a registry login without schemaRegistryAddress: name the registry too"
            );
        }
        (None, None) => {}
    }
    Ok(out)
}

impl ScalarUDFImpl for FromAvro {
    fn name(&self) -> &str {
        "from_avro"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        if !(2..=3).contains(&args.len()) {
            return plan_err!(
                "from_avro() takes 2 or 3 arguments (value, schema [, options]), not {}",
                args.len()
            );
        }
        let mut types = vec![DataType::Binary, DataType::Utf8];
        types.extend(args.get(2).cloned());
        Ok(types)
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        plan_err!("from_avro() needs its schema argument to know its type")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let reader = reader_schema(args.scalar_arguments.get(1).copied().flatten())?;
        let data_type = match reader.arrow_type() {
            Ok(t) => t,
            Err(e) => return plan_err!("from_avro(): invalid Avro schema: {e}"),
        };
        Ok(Arc::new(Field::new(self.name(), data_type, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let schema_arg = match &args.args[1] {
            ColumnarValue::Scalar(s) => Some(s),
            ColumnarValue::Array(_) => None,
        };
        let reader = reader_schema(schema_arg)?;
        let options = options(args.args.get(2))?;
        let values = args.args[0].to_array(args.number_rows)?;
        let values = cast(&values, &DataType::Binary)?;
        let writers = match &options.registry {
            Some(r) => Writers::Registry(r),
            None => Writers::Plain,
        };
        let out = decode::decode(
            values.as_binary::<i32>(),
            &reader,
            writers,
            options.mode,
            args.return_field.data_type(),
        )?;
        super::columnar(out, &args.args)
    }
}

#[cfg(test)]
mod tests;
