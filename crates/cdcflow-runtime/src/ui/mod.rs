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
    /// The address the page is served on.
    pub bound: std::net::SocketAddr,
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
    let host = request
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok());
    if !host_allowed(host, source.bound) {
        return plain(
            StatusCode::FORBIDDEN,
            "served on loopback, the page answers only to localhost, 127.0.0.1 or [::1]\n",
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

/// Whether a request naming `host` may be answered. Served on loopback, only under a
/// loopback name: another name that resolves to 127.0.0.1 is a web page of another
/// site reaching the tables through the browser (DNS rebinding).
fn host_allowed(host: Option<&str>, bound: std::net::SocketAddr) -> bool {
    if !bound.ip().is_loopback() {
        return true;
    }
    let Some(host) = host else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    };
    matches!(name, "localhost" | "127.0.0.1" | "[::1]") || name == bound.ip().to_string()
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
    fn only_loopback_names_are_answered_on_loopback() {
        let bound: std::net::SocketAddr = "127.0.0.1:8470".parse().unwrap();
        assert!(host_allowed(Some("127.0.0.1:8470"), bound));
        assert!(host_allowed(Some("localhost:8470"), bound));
        assert!(host_allowed(Some("[::1]:8470"), bound));
        assert!(!host_allowed(Some("evil.example:8470"), bound));
        assert!(!host_allowed(None, bound));
        let open: std::net::SocketAddr = "0.0.0.0:8470".parse().unwrap();
        assert!(host_allowed(Some("box.internal:8470"), open));
    }

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
