//! The admin port: `/metrics` (Prometheus text), `/healthz` (the process runs), `/readyz` (the
//! index finished its first full sync, and whatever else the process adds as a readiness
//! check). Never exposed through the Ingress.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{header::CONTENT_TYPE, HeaderValue, Method, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// A readiness check: returns `Err(why)` while not ready.
pub type ReadyCheck = Arc<dyn Fn() -> Result<(), NotReady> + Send + Sync>;

/// Why a process is not ready, as `/readyz` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The card index has not synced with the cluster (or directory) yet.
    #[error("the card index has not finished its first sync")]
    NotSynced,
    /// Shutting down: the load balancer should send no more.
    #[error("draining: this process is shutting down")]
    Draining,
    /// The controllers failed for good.
    #[error("the controllers stopped with an error; giving up the lease")]
    ControllersFailed,
}

/// What the admin port reports.
pub struct Admin {
    /// Registry rendered at `/metrics`.
    pub registry: Registry,
    /// Every check must pass for `/readyz` to answer 200.
    pub ready: Vec<ReadyCheck>,
    /// Run before each `/metrics` scrape, to refresh gauges read from shared state.
    pub on_scrape: Vec<Arc<dyn Fn() + Send + Sync>>,
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn answer(admin: &Admin, method: &Method, path: &str) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET only\n".into(),
            "text/plain",
        );
    }
    match path {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/readyz" => {
            let failing: Vec<String> = admin
                .ready
                .iter()
                .filter_map(|c| c().err().map(|e| e.to_string()))
                .collect();
            if failing.is_empty() {
                text(StatusCode::OK, "ok\n".into(), "text/plain")
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {}\n", failing.join("; ")),
                    "text/plain",
                )
            }
        }
        "/metrics" => {
            admin.on_scrape.iter().for_each(|refresh| refresh());
            let mut out = String::new();
            match prometheus_client::encoding::text::encode(&mut out, &admin.registry) {
                Ok(()) => text(
                    StatusCode::OK,
                    out,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
                Err(e) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("{e}\n"),
                    "text/plain",
                ),
            }
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}

/// Serve the admin port until the listener fails.
pub async fn serve_admin(listener: TcpListener, admin: Arc<Admin>) -> std::io::Result<()> {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let admin = admin.clone();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let svc = service_fn(move |req: hyper::Request<Incoming>| {
                    let admin = admin.clone();
                    async move { Ok::<_, Infallible>(answer(&admin, req.method(), req.uri().path())) }
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10));
                let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
            },
            tracing::debug_span!("admin_connection"),
        ));
    }
}
