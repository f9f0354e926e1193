//! The writer schemas of Confluent-framed records, asked of a schema registry by id
//! (`GET /schemas/ids/{id}`, Confluent's REST API, which Karapace, Redpanda and Apicurio's
//! compatibility API answer too). A registry never changes the schema behind an id, so
//! each is asked once per process, whatever the number of flows, batches or sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};

/// How to reach a registry: its address and the login of its REST API, if any.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Registry {
    /// `http://host:port` or `https://…`, without a trailing slash.
    pub address: String,
    /// `user:password` (Confluent's `basic.auth.user.info`), sent as HTTP basic auth.
    pub user_info: Option<String>,
}

/// Schemas already fetched, by registry address and id.
type Known = Mutex<HashMap<(String, u32), Option<Arc<String>>>>;

fn known() -> &'static Known {
    static KNOWN: OnceLock<Known> = OnceLock::new();
    KNOWN.get_or_init(Default::default)
}

/// What the registry answers for one id (other fields, such as `references`, are
/// ignored: a schema with references is refused below since its named types are
/// elsewhere).
#[derive(serde::Deserialize)]
struct SchemaById {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<serde_json::Value>,
}

impl Registry {
    /// The Avro schema (JSON text) registered under `id`; `None` when the registry
    /// answers that it has none (HTTP 404). Any other failure is an error: the registry
    /// is down or refuses us, which no value is to blame for.
    pub fn schema(&self, id: u32) -> Result<Option<Arc<String>>> {
        let key = (self.address.clone(), id);
        if let Some(s) = known().lock().ok().and_then(|k| k.get(&key).cloned()) {
            return Ok(s);
        }
        let schema = self.fetch(id)?.map(Arc::new);
        // A missing id is kept for the process too; a new process asks again.
        if let Ok(mut k) = known().lock() {
            k.insert(key, schema.clone());
        }
        Ok(schema)
    }

    /// Whether the registry has a schema of `id`.
    pub fn has(&self, id: u32) -> Result<bool> {
        Ok(self.schema(id)?.is_some())
    }

    fn fetch(&self, id: u32) -> Result<Option<String>> {
        let url = format!("{}/schemas/ids/{id}", self.address);
        let fail = |why: String| {
            DataFusionError::Execution(format!(
                "from_avro(): the schema registry at {} did not give schema id {id}: {why}",
                self.address
            ))
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = agent
            .get(&url)
            .header("Accept", "application/vnd.schemaregistry.v1+json");
        if let Some(user_info) = &self.user_info {
            use base64::Engine as _;
            let token = base64::engine::general_purpose::STANDARD.encode(user_info);
            request = request.header("Authorization", format!("Basic {token}"));
        }
        let mut response = request.call().map_err(|e| fail(e.to_string()))?;
        let status = response.status();
        let body = response
            .body_mut()
            .read_to_string()
            .map_err(|e| fail(e.to_string()))?;
        if status.as_u16() == 404 {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(fail(format!("HTTP {status}: {}", body.trim())));
        }
        let answer: SchemaById =
            serde_json::from_str(&body).map_err(|e| fail(format!("unreadable answer: {e}")))?;
        match answer.schema_type.as_deref() {
            None | Some("AVRO") => {}
            Some(other) => return Err(fail(format!("it is a {other} schema, not Avro"))),
        }
        if !answer.references.is_empty() {
            return Err(fail(
                "it refers to other registered schemas (schema references are not supported yet)"
                    .into(),
            ));
        }
        Ok(Some(answer.schema))
    }
}
