//! What the card server ([`crate::serve`]) and the registry ([`crate::directory`]) both need of
//! HTTP, below both: the response [`Body`], the bounded [`Route`] label of a request, CORS,
//! `If-None-Match`, preflights, and per-client slots ([`PerKey`]). Nothing here knows cards or
//! directories.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS, ALLOW,
};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;

/// The response body of every handler: whole (almost everything), or a stream of chunks (a
/// directory's change feed as Server-Sent Events).
pub enum Body {
    /// The whole body at once.
    Full(Full<Bytes>),
    /// Chunks as they come; the body ends with the stream.
    Stream(std::pin::Pin<Box<dyn futures::Stream<Item = Bytes> + Send>>),
    /// A body made by a library's service (the MCP transport's answers).
    Boxed(http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>),
}

impl Default for Body {
    fn default() -> Self {
        Body::Full(Full::default())
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body::Full(Full::new(b))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Body::Full(full) => std::pin::Pin::new(full).poll_frame(cx),
            Body::Stream(stream) => stream
                .as_mut()
                .poll_next(cx)
                .map(|chunk| chunk.map(|b| Ok(hyper::body::Frame::data(b)))),
            Body::Boxed(b) => std::pin::Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(full) => full.is_end_stream(),
            Body::Stream(_) => false,
            Body::Boxed(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Body::Full(full) => full.size_hint(),
            Body::Stream(_) => hyper::body::SizeHint::default(),
            Body::Boxed(b) => b.size_hint(),
        }
    }
}

/// Bounded route label of a request, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// A card.
    Card,
    /// The JWKS.
    Jwks,
    /// A host's did:web document.
    Did,
    /// A card's REST `extendedAgentCard` path (whatever the answer: the card, 401, the error).
    Extended,
    /// A CORS preflight.
    Preflight,
    /// Nothing at that host and path.
    NotFound,
    /// A method other than GET, HEAD, OPTIONS.
    MethodNotAllowed,
    /// A request too large to serve.
    TooLarge,
    /// A directory's registry API or manifest.
    Directory,
    /// A malformed request (400).
    BadRequest,
    /// Refused while the process answers as many requests as it may (503).
    Busy,
}

impl Route {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Card => "card",
            Route::Jwks => "jwks",
            Route::Did => "did",
            Route::Extended => "extended",
            Route::Preflight => "preflight",
            Route::NotFound => "not_found",
            Route::MethodNotAllowed => "method_not_allowed",
            Route::TooLarge => "too_large",
            Route::Directory => "directory",
            Route::BadRequest => "bad_request",
            Route::Busy => "busy",
        }
    }
}

/// CORS for browsers, the same on card and directory hosts: any origin may read, and the
/// `ETag` is readable to scripts (for their own conditional requests).
pub fn cors(h: &mut HeaderMap) {
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    h.insert(
        http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("ETag"),
    );
}

/// Whether an `If-None-Match` list names one of `ours` (quoted entity tags), or is `*`
/// (weak comparison, as RFC 9110 asks for GET).
pub fn if_none_match(value: &HeaderValue, ours: &[&str]) -> bool {
    if_none_match_with(value, |tag| ours.contains(&tag))
}

/// [`if_none_match`] with the current tags known by a test rather than listed: `ours` is
/// asked of each tag the client sent (quoted, without `W/`).
pub fn if_none_match_with(value: &HeaderValue, ours: impl Fn(&str) -> bool) -> bool {
    let Ok(list) = value.to_str() else {
        return false;
    };
    list.split(',').map(str::trim).any(|tag| {
        tag == "*" || {
            let t = tag.strip_prefix("W/").unwrap_or(tag);
            ours(t)
        }
    })
}

/// A CORS preflight answer allowing `methods` and the headers the browser asks for.
pub fn preflight_for(req: &HeaderMap, methods: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::default());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let h = resp.headers_mut();
    cors(h);
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
    let allow_headers = req
        .get(ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("*"));
    h.insert(ACCESS_CONTROL_ALLOW_HEADERS, allow_headers);
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
    h.insert(ALLOW, HeaderValue::from_static(methods));
    resp
}

/// Slots held per key (a client address, a caller), bounded: what one client may hold of a
/// shared resource (connections, change-feed streams).
pub struct PerKey<K> {
    limit: usize,
    held: Mutex<HashMap<K, usize>>,
}

/// One slot of a key, given back when dropped.
pub struct KeySlot<K: std::hash::Hash + Eq> {
    owner: Arc<PerKey<K>>,
    key: K,
}

impl<K: std::hash::Hash + Eq + Clone> PerKey<K> {
    /// At most `limit` slots per key (0: any number).
    pub fn new(limit: usize) -> Arc<PerKey<K>> {
        Arc::new(PerKey {
            limit,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more of `key`, unless it holds the limit already.
    pub fn take(self: &Arc<Self>, key: K) -> Option<KeySlot<K>> {
        if self.limit == 0 {
            // Nothing counted (its drop finds no count to lower).
            return Some(KeySlot {
                owner: self.clone(),
                key,
            });
        }
        let mut held = crate::locks::lock(&self.held);
        let n = held.entry(key.clone()).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(KeySlot {
            owner: self.clone(),
            key,
        })
    }
}

impl<K: std::hash::Hash + Eq> Drop for KeySlot<K> {
    fn drop(&mut self) {
        let mut held = crate::locks::lock(&self.owner.held);
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}
