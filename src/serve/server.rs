//! The accept loop of the public port: bounded connections, limits on request headers and
//! bodies, timeouts against slow clients. A request to a directory host is answered by
//! [`crate::directory::http::handle`], a card's extended route by [`super::extended::answer`]
//! (after the caller's token is checked), every other by [`super::http::answer`].
//!
//! Shutdown ([`Shutdown`]) has two steps. Draining: every response asks the client to close its
//! connection, and `/readyz` answers 503. Closing, at the end of the drain period: the accept
//! loop takes what waits in the kernel's accept queue, closes the listener, lets requests in
//! flight finish (idle keep-alive connections are closed), and returns once every connection
//! is done (bounded), so no request the server accepted is cut by the exit.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::conn::{ClientSlot, HeadGuard, HeadVerdict, PerClient};
use super::http::{answer, bad_request, busy, too_large, Body, Route};
use super::metrics::HttpMetrics;
use super::target::{self, Target};
use crate::directory::access::Authorizer;
use crate::directory::cache::ResponseCache;
use crate::directory::feed::changes::Feeds;
use crate::index::Hit;
use crate::serve::Content;

/// Drain before exiting: `/readyz` turns 503 at once (load balancers stop sending), responses
/// ask clients to close their connections, and requests keep being answered for `seconds`
/// while `serving` (the servers' future) runs; an error of the servers ends it early.
pub async fn drain<F>(
    shutdown: &Shutdown,
    seconds: u64,
    serving: &mut std::pin::Pin<&mut F>,
) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    shutdown.drain();
    tracing::info!(seconds, "shutting down: draining");
    tokio::select! {
        r = serving.as_mut() => return r,
        () = tokio::time::sleep(std::time::Duration::from_secs(seconds)) => {}
    }
    // Stop accepting; the requests in flight finish before the servers return (bounded).
    shutdown.close();
    match tokio::time::timeout(std::time::Duration::from_secs(15), serving.as_mut()).await {
        Ok(r) => r?,
        Err(_) => tracing::warn!("connections still open after closing; exiting anyway"),
    }
    tracing::info!("drained");
    Ok(())
}

/// The shutdown of the public port: draining first, then closing (see the module doc).
pub struct Shutdown {
    draining: AtomicBool,
    /// The same as `draining`, for those who wait for it (change-feed streams).
    drain_signal: tokio::sync::watch::Sender<bool>,
    closing: tokio::sync::watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            draining: AtomicBool::new(false),
            drain_signal: tokio::sync::watch::channel(false).0,
            closing: tokio::sync::watch::channel(false).0,
        }
    }
}

impl Shutdown {
    /// Start draining: responses ask clients to close, readiness turns false, change-feed
    /// streams end.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.drain_signal.send_replace(true);
    }

    /// A receiver that turns true when draining starts.
    pub fn draining(&self) -> tokio::sync::watch::Receiver<bool> {
        self.drain_signal.subscribe()
    }

    /// Whether draining has started.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Stop accepting and finish what was accepted.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Resolves once [`Shutdown::close`] was called.
    fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closing.subscribe();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }
}

/// How long closing waits for the connections in flight.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// Limits protecting the server from slow or abusive clients.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Concurrent connections; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// How long a keep-alive connection may stay idle: before its first request, or since its
    /// last response.
    pub header_read_timeout: Duration,
    /// Bytes of request line and headers. (The number of request headers is bounded by
    /// hyper's default, 100: a bound of our own would make hyper fill its header arrays for
    /// every request it parses.)
    pub max_header_bytes: usize,
    /// Request body size (cards are read with GET; only directory queries have bodies).
    pub max_body_bytes: u64,
    /// Lifetime of one connection, however busy.
    pub max_connection_age: Duration,
    /// How long a response write may wait for a client that does not read: a slow reader
    /// loses its connection instead of holding a slot and a buffer.
    pub write_timeout: Duration,
    /// How long a request head that has started may take to arrive in full (a client sending
    /// it a header at a time holds its connection no longer).
    pub head_timeout: Duration,
    /// How long a request body may take to arrive in full once its head has (a body is read
    /// whole before the request takes one of the slots of `max_concurrent_requests`, so a
    /// client trickling one holds a slot of the bodies' own bound, and for this long at most).
    pub body_timeout: Duration,
    /// Connections one client address may hold at once (0: any number).
    pub max_connections_per_client: usize,
    /// Requests answered at once by the process; past it, 503 with `Retry-After`. (An
    /// HTTP/1.1 connection carries one request at a time.) Request bodies being received
    /// have a bound of the same size of their own: a slow body never holds a request slot.
    pub max_concurrent_requests: usize,
    /// Change-feed streams (`GET /v1/changes` as Server-Sent Events) open at once; past it,
    /// 503 with `Retry-After`.
    pub max_feed_streams: usize,
    /// Change-feed streams one client holds at once (a caller in Kubernetes mode; an address in
    /// public mode when `max_connections_per_client` is set; 0: any number); past it, 429.
    pub max_feed_streams_per_client: usize,
    /// Bytes of rendered directory responses kept for repeated queries (0: none kept).
    pub directory_cache_bytes: u64,
    /// Threads answering the public port, each with its own listening socket and event loop
    /// (0: one per available core).
    pub workers: usize,
}

/// The flags setting [`Limits`], shared by `run` and `serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServerFlags {
    /// Most concurrent client connections.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Seconds an idle keep-alive connection stays open waiting for its next request (also
    /// the most a client waits between opening a connection and starting a request).
    #[arg(long, default_value_t = 75)]
    pub header_read_timeout: u64,
    /// Seconds a request head that has started may take to arrive in full.
    #[arg(long, default_value_t = 10)]
    pub head_timeout: u64,
    /// Seconds a request body (directory queries, MCP) may take to arrive in full once its
    /// head has; a slower one is answered 408 and its connection closed.
    #[arg(long, default_value_t = 10)]
    pub body_timeout: u64,
    /// Seconds a response write may wait for a client that does not read before the
    /// connection is closed.
    #[arg(long, default_value_t = 30)]
    pub write_timeout: u64,
    /// Most connections one client address holds at once (0, the default: any number); more
    /// are closed at once. Set it only where clients connect directly: behind an Ingress or a
    /// load balancer every request comes from the proxy's few addresses.
    #[arg(long, default_value_t = 0)]
    pub max_connections_per_client: usize,
    /// Most requests answered at once by the process; past it, 503 with `Retry-After`.
    #[arg(long, default_value_t = 4096)]
    pub max_concurrent_requests: usize,
    /// Most change-feed streams (Server-Sent Events) open at once on this process.
    #[arg(long, default_value_t = 1000)]
    pub max_feed_streams: usize,
    /// Most change-feed streams one client holds at once on this process (0: any number): per
    /// caller in Kubernetes access mode; per client address in public mode only where clients
    /// connect directly (`--max-connections-per-client` set: behind a proxy every stream comes
    /// from the proxy's few addresses).
    #[arg(long, default_value_t = 100)]
    pub max_feed_streams_per_client: usize,
    /// Bytes of rendered directory responses kept, so that a repeated query (same directory
    /// snapshot, same caller visibility, same parameters) is answered without running it again;
    /// 0 keeps none. Hits and misses: `agentcard_directory_cache_{hits,misses}_total`.
    #[arg(long, default_value_t = crate::directory::cache::DEFAULT_BYTES)]
    pub directory_cache_bytes: u64,
    /// Threads answering the public port, each with its own listening socket (the kernel
    /// spreads connections over them) and event loop, as nginx's `worker_processes`; 0, the
    /// default, is one per core the process may use (its CPU quota included).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
}

impl ServerFlags {
    /// The limits these flags set.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            header_read_timeout: Duration::from_secs(self.header_read_timeout.max(1)),
            head_timeout: Duration::from_secs(self.head_timeout.max(1)),
            body_timeout: Duration::from_secs(self.body_timeout.max(1)),
            write_timeout: Duration::from_secs(self.write_timeout.max(1)),
            max_connections_per_client: self.max_connections_per_client,
            max_concurrent_requests: self.max_concurrent_requests.max(1),
            max_feed_streams: self.max_feed_streams,
            max_feed_streams_per_client: self.max_feed_streams_per_client,
            directory_cache_bytes: self.directory_cache_bytes,
            workers: self.workers,
            ..Limits::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            // Also how long an idle keep-alive connection stays open (hyper starts the timer
            // when it waits for the next request): above the 60 s proxies commonly reuse.
            header_read_timeout: Duration::from_secs(75),
            max_header_bytes: 16 * 1024,
            max_body_bytes: 16 * 1024,
            max_connection_age: Duration::from_secs(600),
            write_timeout: Duration::from_secs(30),
            head_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections_per_client: 0,
            max_concurrent_requests: 4096,
            max_feed_streams: 1000,
            max_feed_streams_per_client: 100,
            directory_cache_bytes: crate::directory::cache::DEFAULT_BYTES,
            workers: 0,
        }
    }
}

/// Serve the public port until the listener fails, or until `shutdown` closes it and the
/// connections it accepted are done.
pub async fn serve_public(
    listener: TcpListener,
    content: Content,
    metrics: Arc<HttpMetrics>,
    limits: Limits,
    callers: Callers,
    shutdown: Arc<Shutdown>,
    guards: Guards,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut accept_backoff = Duration::from_millis(5);
    let closed = shutdown.closed();
    tokio::pin!(closed);
    let mut closing = false;
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return Ok(());
        };
        let accepted = if closing {
            // What waits in the accept queue is served; then the listener closes.
            match futures::FutureExt::now_or_never(listener.accept()) {
                Some(Ok(accepted)) => Ok(accepted),
                _ => break,
            }
        } else {
            tokio::select! {
                r = listener.accept() => r,
                () = &mut closed => {
                    closing = true;
                    drop(permit);
                    continue;
                }
            }
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                accept_backoff = Duration::from_millis(5);
                accepted
            }
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(accept_backoff).await;
                accept_backoff = (accept_backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        // A client at its share of connections gets no more (closed at once).
        let Some(client_slot) = guards.per_client.take(peer.ip()) else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        // A connection from before closing that is idle after a request when it comes is closed
        // then; a new one, and one taken from the accept queue while closing, serves its
        // request (its response says close).
        let close_when_idle = (!closing).then(|| shutdown.closed());
        let shared = Shared {
            content: content.clone(),
            metrics: metrics.clone(),
            authorizer: callers.authorizer.clone(),
            bearer: callers.bearer.clone(),
            draining: shutdown.clone(),
            limits,
            in_flight: guards.in_flight.clone(),
            bodies: guards.bodies.clone(),
            cache: guards.cache.clone(),
            verdicts: crate::serve::conn::Verdicts::default(),
            feeds: Feeds {
                hosted: content.directories.clone(),
                streams: guards.streams.clone(),
                per_client: guards.streams_per_client.clone(),
                client: peer.ip(),
                count_addresses: limits.max_connections_per_client > 0,
                draining: shutdown.draining(),
            },
        };
        // A debug span: off at the default level, so a connection costs no span then.
        tokio::spawn(tracing::Instrument::instrument(
            serve_connection(stream, shared, close_when_idle, (permit, client_slot)),
            tracing::debug_span!("connection", %peer),
        ));
    }
    drop(listener);
    // Every connection holds a slot: all of them back means all are done.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(CLOSE_GRACE, slots.acquire_many(all)).await;
    Ok(())
}

/// What every listener of the process shares: the bounds on clients, and the directories'
/// cache of rendered responses.
#[derive(Clone)]
pub struct Guards {
    /// Connections per client address.
    pub per_client: Arc<PerClient>,
    /// Requests answered at once.
    pub in_flight: Arc<Semaphore>,
    /// Request bodies being received at once (apart from `in_flight`: see [`receive`]).
    pub bodies: Arc<Semaphore>,
    /// Change-feed streams open at once.
    pub streams: Arc<Semaphore>,
    /// Change-feed streams per client.
    pub streams_per_client: Arc<super::conn::PerKey<String>>,
    /// Rendered directory responses.
    pub cache: Arc<ResponseCache>,
}

impl Guards {
    /// The bounds of `limits`, and `cache`.
    pub fn new(limits: &Limits, cache: Arc<ResponseCache>) -> Guards {
        Guards {
            per_client: PerClient::new(limits.max_connections_per_client),
            in_flight: Arc::new(Semaphore::new(limits.max_concurrent_requests.max(1))),
            bodies: Arc::new(Semaphore::new(limits.max_concurrent_requests.max(1))),
            streams: Arc::new(Semaphore::new(limits.max_feed_streams)),
            streams_per_client: super::conn::PerKey::new(limits.max_feed_streams_per_client),
            cache,
        }
    }
}

/// What a connection of the public port and its requests share.
#[derive(Clone)]
struct Shared {
    content: Content,
    metrics: Arc<HttpMetrics>,
    authorizer: Option<Arc<Authorizer>>,
    /// Checks the callers of cards' extended cards.
    bearer: Option<Arc<crate::bearer::Bearer>>,
    draining: Arc<Shutdown>,
    limits: Limits,
    in_flight: Arc<Semaphore>,
    bodies: Arc<Semaphore>,
    /// Rendered directory responses.
    cache: Arc<ResponseCache>,
    /// What the connection layer found in each request head.
    verdicts: crate::serve::conn::Verdicts,
    /// What directories' change feeds are answered from.
    feeds: Feeds,
}

/// Serve one connection until it ends, its age limit passes, or (when `close_when_idle`
/// resolves) it is idle after a request; then give its slot back.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    shared: Shared,
    close_when_idle: Option<impl std::future::Future<Output = ()>>,
    slots: (tokio::sync::OwnedSemaphorePermit, ClientSlot),
) {
    let limits = shared.limits;
    let verdicts = shared.verdicts.clone();
    shared.metrics.connections.inc();
    let gauge = shared.metrics.connections.clone();
    // One reference count per request, not one per field.
    let shared = Arc::new(shared);
    // Requests this connection has received: one that has had none yet is not idle but about
    // to send (it connected to be served), so closing lets it.
    let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = received.clone();
    let svc = service_fn(move |req: hyper::Request<Incoming>| {
        counted.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(answer_request(req, &shared).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The keep-alive and head timeouts are the guard's (one timer per connection): hyper's
    // header timer would add a timer per request.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(limits.max_header_bytes.max(8192));
    let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
    stream.set_write_timeout(Some(limits.write_timeout));
    let stream = HeadGuard::new(
        Box::pin(stream),
        limits.head_timeout,
        limits.header_read_timeout,
        verdicts,
    );
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    let serve = async move {
        tokio::pin!(conn);
        match close_when_idle {
            Some(closed) => {
                tokio::select! {
                    _ = conn.as_mut() => {}
                    () = closed => {
                        if received.load(Ordering::Relaxed) > 0 {
                            conn.as_mut().graceful_shutdown();
                        }
                        let _ = conn.await;
                    }
                }
            }
            None => {
                let _ = conn.await;
            }
        }
    };
    let _ = tokio::time::timeout(limits.max_connection_age, serve).await;
    gauge.dec();
    drop(slots);
}

/// One request: malformed (400), its body received ([`receive`]: too large, too slow, or
/// past the bound on bodies being received), over the process's concurrency (503), a
/// directory host's, or a card's; counted; marked `Connection: close` while draining.
async fn answer_request(req: hyper::Request<Incoming>, shared: &Shared) -> hyper::Response<Body> {
    let (route, mut resp) = match admit(&req, shared) {
        Err(refused) => *refused,
        Ok(target) => match receive(req, shared).await {
            Err(refused) => refused,
            Ok(req) => match shared.in_flight.clone().try_acquire_owned() {
                Err(_) => (Route::Busy, busy()),
                Ok(_request_slot) => dispatch(req, &target, shared).await,
            },
        },
    };
    shared.metrics.observe(route, resp.status().as_u16());
    if shared.draining.is_draining() {
        // Shutting down: clients close this connection after the response.
        resp.headers_mut().insert(
            ::http::header::CONNECTION,
            ::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// The request's target; or the answer that refuses it.
fn admit(
    req: &hyper::Request<Incoming>,
    shared: &Shared,
) -> Result<Target, Box<(Route, hyper::Response<Body>)>> {
    if shared.verdicts.next() == HeadVerdict::Fragment {
        return Err(Box::new((
            Route::BadRequest,
            bad_request("a request-target carries no fragment"),
        )));
    }
    target::of(req.version(), req.uri(), req.headers())
        .map_err(|why| Box::new((Route::BadRequest, bad_request(why))))
}

/// A request whose body is here in full: read before the request takes a slot among those
/// answered at once, so a client sending its body slowly holds none of them. A body declared
/// larger than the limit is refused before it is read (413), so is one that grows past it
/// (chunked); one that has not arrived within [`Limits::body_timeout`] gets 408 (its
/// connection closes). Bodies being received have their own bound (503 past it), which
/// requests without a body (every card, most directory queries) never wait for.
async fn receive(
    req: hyper::Request<Incoming>,
    shared: &Shared,
) -> Result<hyper::Request<Full<Bytes>>, (Route, hyper::Response<Body>)> {
    use http_body_util::BodyExt;
    let limits = &shared.limits;
    let (parts, body) = req.into_parts();
    if hyper::body::Body::is_end_stream(&body) {
        return Ok(hyper::Request::from_parts(parts, Full::new(Bytes::new())));
    }
    let declared = parts
        .headers
        .get(::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if declared > limits.max_body_bytes {
        return Err((Route::TooLarge, too_large()));
    }
    let Ok(_body_slot) = shared.bodies.clone().try_acquire_owned() else {
        return Err((Route::Busy, busy()));
    };
    let max = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
    let read = http_body_util::Limited::new(body, max).collect();
    match tokio::time::timeout(limits.body_timeout, read).await {
        Err(_) => Err((Route::BadRequest, body_too_slow(limits.body_timeout))),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err((Route::TooLarge, too_large()))
        }
        Ok(Err(_)) => Err((
            Route::BadRequest,
            bad_request("the request body is malformed"),
        )),
        Ok(Ok(collected)) => Ok(hyper::Request::from_parts(
            parts,
            Full::new(collected.to_bytes()),
        )),
    }
}

/// 408 for a body that did not arrive in time; the connection closes after it.
fn body_too_slow(within: Duration) -> hyper::Response<Body> {
    let mut resp = super::http::json_error(
        ::http::StatusCode::REQUEST_TIMEOUT,
        &format!(
            "the request body did not arrive within {} s",
            within.as_secs()
        ),
        false,
    );
    resp.headers_mut().insert(
        ::http::header::CONNECTION,
        ::http::HeaderValue::from_static("close"),
    );
    resp
}

/// Route an admitted request whose body is here: a directory host's, or a card's.
async fn dispatch(
    req: hyper::Request<Full<Bytes>>,
    target: &Target,
    shared: &Shared,
) -> (Route, hyper::Response<Body>) {
    let limits = &shared.limits;
    let host = target.host.as_deref();
    if let Some(site) = host.and_then(|h| shared.content.directories.site(h)) {
        if target.path == crate::contract::PATH_DID {
            let did = host.and_then(|h| {
                super::http::did_document(&shared.content.cards, h, req.method(), req.headers())
            });
            if let Some(answer) = did {
                return answer;
            }
        }
        let max = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
        let cards = &shared.content.cards;
        let jwks = || cards.jwks().map(|j| j.body.clone());
        let authorizer = shared.authorizer.clone();
        let feeds = &shared.feeds;
        shared.cache.sync(&shared.content.directories);
        return crate::directory::http::handle(
            site,
            feeds,
            authorizer,
            jwks,
            &shared.cache,
            req,
            &target.path,
            max,
        )
        .await;
    }
    let hit = host.and_then(|h| shared.content.cards.lookup(h, &target.path));
    if let Some(Hit::Extended(route)) = &hit {
        let bearer = shared.bearer.as_deref();
        return super::extended::answer(route, bearer, req.method(), req.headers(), host).await;
    }
    answer(hit, host, req.method(), &target.path, req.headers())
}

/// Who checks the callers of the public port: Kubernetes-mode directories' (a TokenReview and
/// access reviews) and cards' extended cards' (a card's `spec.extendedCard.auth`).
#[derive(Clone, Default)]
pub struct Callers {
    /// Kubernetes-mode directories' callers.
    pub authorizer: Option<Arc<Authorizer>>,
    /// Extended cards' callers.
    pub bearer: Option<Arc<crate::bearer::Bearer>>,
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
/// fails, or once every worker has closed on shutdown; the index, metrics and `cache` are
/// shared.
pub async fn serve_public_per_core(
    listeners: Vec<std::net::TcpListener>,
    content: Content,
    metrics: Arc<HttpMetrics>,
    limits: Limits,
    callers: Callers,
    shutdown: Arc<Shutdown>,
    cache: Arc<ResponseCache>,
) -> std::io::Result<()> {
    let (failed_tx, mut failed_rx) = tokio::sync::mpsc::unbounded_channel::<std::io::Error>();
    let per_worker = Limits {
        max_connections: (limits.max_connections / listeners.len().max(1)).max(1),
        ..limits
    };
    // Per-client and concurrency bounds are the process's, across its listeners.
    let guards = Guards::new(&limits, cache);
    for (i, listener) in listeners.into_iter().enumerate() {
        let (content, metrics, failed) = (content.clone(), metrics.clone(), failed_tx.clone());
        let callers = callers.clone();
        let shutdown = shutdown.clone();
        let guards = guards.clone();
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
                let span = tracing::info_span!("http_worker", worker = i);
                let result = rt.block_on(tracing::Instrument::instrument(
                    async move {
                        let listener = TcpListener::from_std(listener)?;
                        serve_public(
                            listener, content, metrics, per_worker, callers, shutdown, guards,
                        )
                        .await
                    },
                    span,
                ));
                // A worker ends without an error only when the shutdown closed it.
                if let Err(e) = result {
                    let _ = failed.send(e);
                }
            })?;
    }
    drop(failed_tx);
    match failed_rx.recv().await {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
