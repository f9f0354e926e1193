//! `cdcflow ui`: a local web page of the pipeline, served by the binary itself: its
//! graph, each flow's runs and lag, each table's schema, history and rows, and
//! `validate`'s diagnostics on the graph. The page's files are built into the binary
//! (no Node at run time); the page asks the JSON endpoints of [`api`] and polls them,
//! so it follows a `run --continuous` in another process. Read-only: only GET, and
//! nothing of pipeline.yaml is sent but names (no connection, no secret).

mod api;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

const INDEX: &str = include_str!("page/index.html");
const APP: &str = include_str!("page/app.js");
const STYLE: &str = include_str!("page/style.css");

/// Where the page's data comes from.
#[derive(Debug, Clone)]
pub struct UiSource {
    /// The pipeline folder, loaded again for each request so that edits show.
    pub root: PathBuf,
    /// `--conf` values.
    pub overrides: BTreeMap<String, String>,
}

/// Serves the page on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, source: UiSource) {
    let source = Arc::new(source);
    crate::metrics_http::serve_with(listener, "ui", move |request| {
        let source = Arc::clone(&source);
        async move { respond(&request, &source).await }
    })
    .await;
}

async fn respond<B>(request: &Request<B>, source: &UiSource) -> Response<String> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "the page is read-only: GET only\n",
        );
    }
    let name = query_value(request.uri().query(), "name");
    let (content_type, body) = match request.uri().path() {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX.to_string()),
        "/app.js" => ("text/javascript; charset=utf-8", APP.to_string()),
        "/style.css" => ("text/css; charset=utf-8", STYLE.to_string()),
        "/api/pipeline" => json(&api::pipeline(source).await),
        "/api/status" => json(&api::status(source).await),
        "/api/flow" => json(&api::flow(source, name.as_deref().unwrap_or_default()).await),
        "/api/table" => json(&api::table(source, name.as_deref().unwrap_or_default()).await),
        _ => return plain(StatusCode::NOT_FOUND, "no such page\n"),
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // The page runs only its own script and reaches only this server.
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn json(value: &serde_json::Value) -> (&'static str, String) {
    ("application/json", value.to_string())
}

fn plain(status: StatusCode, text: &str) -> Response<String> {
    let mut response = Response::new(text.to_string());
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The value of `key` in a URL's query, percent-decoded.
fn query_value(query: Option<&str>, key: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| {
            percent_encoding::percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_decoded() {
        assert_eq!(
            query_value(Some("name=a%20b&x=1"), "name").as_deref(),
            Some("a b")
        );
        assert_eq!(query_value(Some("x=1"), "name"), None);
        assert_eq!(query_value(None, "name"), None);
    }
}
