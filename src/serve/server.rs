//! The accept loop of the public port: bounded connections, limits on request headers and
//! bodies, timeouts against slow clients. A request to a directory host is answered by
//! [`crate::directory::http::handle`], every other by [`super::http::respond`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::http::{request_host, respond, too_large, Route};
use super::metrics::HttpMetrics;
use crate::directory::access::Authorizer;
use crate::index::Index;

/// Limits protecting the server from slow or abusive clients.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Concurrent connections; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// Bytes of request line and headers.
    pub max_header_bytes: usize,
    /// Number of request headers.
    pub max_headers: usize,
    /// Request body size (cards are read with GET; only directory queries have bodies).
    pub max_body_bytes: u64,
    /// Lifetime of one connection, however busy.
    pub max_connection_age: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            // Also how long an idle keep-alive connection stays open (hyper starts the timer
            // when it waits for the next request): above the 60 s proxies commonly reuse.
            header_read_timeout: Duration::from_secs(75),
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: 16 * 1024,
            max_connection_age: Duration::from_secs(600),
        }
    }
}

/// Serve the public port until the listener fails.
pub async fn serve_public(
    listener: TcpListener,
    index: Arc<Index>,
    metrics: Arc<HttpMetrics>,
    limits: Limits,
    authorizer: Option<Arc<Authorizer>>,
    draining: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut accept_backoff = Duration::from_millis(5);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return Ok(());
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                accept_backoff = Duration::from_millis(5);
                stream
            }
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(accept_backoff).await;
                accept_backoff = (accept_backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let index = index.clone();
        let metrics = metrics.clone();
        let authorizer = authorizer.clone();
        let draining = draining.clone();
        tokio::spawn(async move {
            metrics.connections.inc();
            let gauge = metrics.connections.clone();
            let svc = service_fn(move |req: hyper::Request<Incoming>| {
                let index = index.clone();
                let metrics = metrics.clone();
                let authorizer = authorizer.clone();
                let draining = draining.clone();
                async move {
                    let declared = req
                        .headers()
                        .get(::http::header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                    let host = request_host(req.uri(), req.headers());
                    let site = host.as_deref().and_then(|h| index.site(h));
                    let (route, resp) = if declared > limits.max_body_bytes {
                        (Route::TooLarge, too_large())
                    } else if let Some(site) = site {
                        let max = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
                        let jwks = index.jwks().map(|j| j.body.clone());
                        crate::directory::http::handle(site, authorizer, jwks, req, max).await
                    } else {
                        respond(
                            &index,
                            host.as_deref(),
                            req.method(),
                            req.uri(),
                            req.headers(),
                        )
                    };
                    metrics.observe(route, resp.status().as_u16());
                    let mut resp = resp;
                    if draining.load(Ordering::Acquire) {
                        // Shutting down: clients close this connection after the response.
                        resp.headers_mut().insert(
                            ::http::header::CONNECTION,
                            ::http::HeaderValue::from_static("close"),
                        );
                    }
                    Ok::<_, Infallible>(resp)
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .max_buf_size(limits.max_header_bytes.max(8192))
                .max_headers(limits.max_headers);
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            let _ = tokio::time::timeout(limits.max_connection_age, conn).await;
            gauge.dec();
            drop(permit);
        });
    }
}

/// Bind `workers` listening sockets on `addr` with `SO_REUSEPORT`, so the kernel spreads
/// connections over them. The first socket fixes the port when `addr` asks for any port.
pub fn bind_reuseport(
    addr: SocketAddr,
    workers: usize,
) -> std::io::Result<Vec<std::net::TcpListener>> {
    use socket2::{Domain, Socket, Type};
    // SO_REUSEPORT would let a second process share a port it should be refused: take the
    // port once without it first, so "address in use" is reported as usual.
    if addr.port() != 0 {
        drop(std::net::TcpListener::bind(addr)?);
    }
    let mut out: Vec<std::net::TcpListener> = Vec::with_capacity(workers.max(1));
    let mut bound = addr;
    for _ in 0..workers.max(1) {
        let socket = Socket::new(Domain::for_address(bound), Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&bound.into())?;
        socket.listen(1024)?;
        socket.set_nonblocking(true)?;
        let listener: std::net::TcpListener = socket.into();
        bound = listener.local_addr()?;
        out.push(listener);
    }
    Ok(out)
}

/// Serve the public port on one OS thread per listener, each with its own single-threaded
/// runtime (no work stealing, no cross-thread wake-ups on the hot path). Returns when a worker
/// fails; the index and metrics are shared.
pub async fn serve_public_per_core(
    listeners: Vec<std::net::TcpListener>,
    index: Arc<Index>,
    metrics: Arc<HttpMetrics>,
    limits: Limits,
    authorizer: Option<Arc<Authorizer>>,
    draining: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let (failed_tx, mut failed_rx) = tokio::sync::mpsc::unbounded_channel::<std::io::Error>();
    let per_worker = Limits {
        max_connections: (limits.max_connections / listeners.len().max(1)).max(1),
        ..limits
    };
    for (i, listener) in listeners.into_iter().enumerate() {
        let (index, metrics, failed) = (index.clone(), metrics.clone(), failed_tx.clone());
        let authorizer = authorizer.clone();
        let draining = draining.clone();
        std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = failed.send(e);
                        return;
                    }
                };
                let result = rt.block_on(async move {
                    let listener = TcpListener::from_std(listener)?;
                    serve_public(listener, index, metrics, per_worker, authorizer, draining).await
                });
                let _ = failed.send(
                    result
                        .err()
                        .unwrap_or_else(|| std::io::Error::other("HTTP worker stopped")),
                );
            })?;
    }
    drop(failed_tx);
    match failed_rx.recv().await {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
