//! The endpoint of `cdcflow run --continuous --metrics-addr`: Prometheus scrapes
//! `GET /metrics`. Served by hyper, with bounds on what a client can hold, so that idle
//! or slow clients can neither stop the endpoint nor take the file descriptors the flows
//! need: at most [`MAX_CONNECTIONS`] at once (more are closed as soon as they are
//! accepted), each with [`HEADER_READ_TIMEOUT`] to send a request, idle or not, and
//! [`CONNECTION_LIFETIME`] in all. `cdcflow ui` serves its page the same way
//! ([`serve_with`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::metrics::Metrics;

/// Connections served at once; a scrape needs one.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a client may take to send a request's headers, counted from when the
/// connection opens or its last response was sent: the idle timeout.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection lives, busy or not (a client that never reads its response).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// The pause after a failed accept (out of file descriptors, say) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// Serves `metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Mutex<Metrics>>) {
    serve_with(listener, "metrics endpoint", move |request| {
        let response = respond(&request, &metrics);
        async move { response }
    })
    .await;
}

/// Serves `handler`'s responses on `listener`, within the bounds above, until the task
/// is dropped; `what` names the endpoint in its warnings.
pub async fn serve_with<H, F>(listener: TcpListener, what: &'static str, handler: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<String>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut failing = false;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Once per run of failures: the endpoint keeps accepting once it can.
                if !failing {
                    tracing::warn!(error = %e, "{what}: cannot accept connections");
                }
                failing = true;
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        failing = false;
        // Over the limit: dropped here, which closes it.
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let response = handler(request);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            // A connection's errors (a client gone, a timeout) concern that client alone.
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
            drop(slot);
        });
    }
}

fn respond<B>(request: &Request<B>, metrics: &Mutex<Metrics>) -> Response<String> {
    let read = request.method() == Method::GET || request.method() == Method::HEAD;
    let (status, body) = match request.uri().path() {
        "/metrics" if read => (
            StatusCode::OK,
            metrics
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .render(),
        ),
        "/metrics" => (
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET /metrics\n".to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "the metrics are at /metrics\n".to_string(),
        ),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_TEXT));
    response
}
