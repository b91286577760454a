//! Request → response for the public port: pure functions over the [`Index`], no I/O.
//!
//! Routing is by Host (port stripped, case-insensitive, trailing dot ignored) and path (see
//! [`Index::lookup`]). Conditional requests follow RFC 9110 §13: `If-None-Match` (weak
//! comparison, lists, `*`) takes precedence over `If-Modified-Since`; a match is a 304 with
//! the validators and caching headers but no body.

use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ALLOW, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::Full;

use crate::index::{Hit, Index, Published};

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

const ALLOWED: &str = "GET, HEAD, OPTIONS";
const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// Answer one request for `host` and `path` (its [`super::target::Target`], read once per
/// request).
pub fn respond(
    index: &Index,
    host: Option<&str>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> (Route, Response<Body>) {
    let hit = host.and_then(|h| index.lookup(h, path));
    match (method, hit) {
        (&Method::GET | &Method::HEAD, Some(hit)) => {
            let (route, doc) = match hit {
                Hit::Card(p) => (Route::Card, p),
                Hit::Jwks(p) => (Route::Jwks, p),
            };
            let head = method == Method::HEAD;
            match doc.lifecycle.as_deref() {
                Some(life) if life.gone_until.is_some() => {
                    (Route::Card, retired(life, host, path, head))
                }
                Some(life) => {
                    let mut resp = document(&doc, head, headers);
                    lifecycle_headers(resp.headers_mut(), life);
                    (route, resp)
                }
                None => (route, document(&doc, head, headers)),
            }
        }
        (&Method::OPTIONS, Some(_)) => (Route::Preflight, preflight(headers)),
        (&Method::GET | &Method::HEAD | &Method::OPTIONS, None) => (
            Route::NotFound,
            not_found(host, path, method == Method::HEAD),
        ),
        _ => (Route::MethodNotAllowed, method_not_allowed()),
    }
}

/// CORS for browsers, the same on card and directory hosts: any origin may read, and the
/// `ETag` is readable to scripts (for their own conditional requests).
pub(crate) fn cors(h: &mut HeaderMap) {
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    h.insert(
        http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("ETag"),
    );
}

fn document(doc: &Published, head: bool, req: &HeaderMap) -> Response<Body> {
    let gzip = doc.gzip.as_ref().filter(|_| accepts_gzip(req));
    let etag = if gzip.is_some() {
        &doc.etag_gzip
    } else {
        &doc.etag
    };
    let not_modified = match req.get(IF_NONE_MATCH) {
        Some(inm) => if_none_match_matches(inm, doc),
        None => req
            .get(IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .is_some_and(|since| doc.last_modified <= since),
    };
    let mut resp = Response::new(Body::default());
    // Room for every header below at once: no growing the map while filling it.
    *resp.headers_mut() = HeaderMap::with_capacity(12);
    let h = resp.headers_mut();
    h.insert(ETAG, etag.clone());
    h.insert(CACHE_CONTROL, doc.cache_control.clone());
    h.insert(LAST_MODIFIED, doc.last_modified_header.clone());
    h.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
    cors(h);
    h.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("ETag, Last-Modified"),
    );
    if not_modified {
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        return resp;
    }
    h.insert(CONTENT_TYPE, JSON);
    let body = match gzip {
        Some(z) => {
            h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            z.clone()
        }
        None => doc.body.clone(),
    };
    h.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    if !head {
        *resp.body_mut() = Body::from(body);
    }
    resp
}

/// RFC 9110 §13.1.2: `*`, or any listed tag equal to a current representation's tag under
/// weak comparison (the `W/` prefix ignored).
fn if_none_match_matches(value: &HeaderValue, doc: &Published) -> bool {
    // Both tags are quoted hex digests. One that were no visible ASCII could match no tag a
    // client sends (a value that is no visible ASCII matches nothing), which NUL stands for.
    fn tag(v: &HeaderValue) -> &str {
        v.to_str().unwrap_or("\0")
    }
    if_none_match(value, &[tag(&doc.etag), tag(&doc.etag_gzip)])
}

/// Whether an `If-None-Match` list names one of `ours` (quoted entity tags), or is `*`
/// (weak comparison, as RFC 9110 asks for GET).
pub(crate) fn if_none_match(value: &HeaderValue, ours: &[&str]) -> bool {
    let Ok(list) = value.to_str() else {
        return false;
    };
    list.split(',').map(str::trim).any(|tag| {
        tag == "*" || {
            let t = tag.strip_prefix("W/").unwrap_or(tag);
            ours.contains(&t)
        }
    })
}

/// Whether `Accept-Encoding` admits gzip (q > 0), explicitly or by `*`.
fn accepts_gzip(req: &HeaderMap) -> bool {
    let mut gzip_q: Option<bool> = None;
    let mut star_q: Option<bool> = None;
    for value in req.get_all(ACCEPT_ENCODING) {
        let Ok(s) = value.to_str() else { continue };
        for item in s.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let q_ok = parts
                .filter_map(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .or_else(|| p.trim().strip_prefix("Q="))
                })
                .next()
                .is_none_or(|q| q.trim().parse::<f32>().is_ok_and(|q| q > 0.0));
            match coding.as_str() {
                "gzip" | "x-gzip" => gzip_q = Some(q_ok),
                "*" => star_q = Some(q_ok),
                _ => {}
            }
        }
    }
    gzip_q.or(star_q).unwrap_or(false)
}

fn preflight(req: &HeaderMap) -> Response<Body> {
    preflight_for(req, ALLOWED)
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

/// A JSON error answer (`{"error": message}`), with no body for a HEAD request (`head`).
pub(crate) fn json_error(status: StatusCode, message: &str, head: bool) -> Response<Body> {
    let body = Bytes::from(serde_json::json!({"error": message}).to_string());
    let mut resp = Response::new(Body::default());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, JSON);
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    cors(h);
    if !head {
        *resp.body_mut() = Body::from(body);
    }
    resp
}

/// Add a deprecated card's `Deprecation`, `Sunset` and `Link` headers (readable to scripts).
fn lifecycle_headers(h: &mut HeaderMap, life: &crate::index::LifecycleHeaders) {
    for (name, value) in &life.headers {
        h.insert(name.clone(), value.clone());
    }
    h.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("ETag, Last-Modified, Deprecation, Sunset, Link"),
    );
}

/// A retired card: 410 Gone with its successor's `Link` until its retention ends, then 404.
fn retired(
    life: &crate::index::LifecycleHeaders,
    host: Option<&str>,
    path: &str,
    head: bool,
) -> Response<Body> {
    let gone = life
        .gone_until
        .is_some_and(|until| std::time::SystemTime::now() < until);
    if !gone {
        return not_found(host, path, head);
    }
    let mut resp = json_error(
        StatusCode::GONE,
        &format!("the agent at {}{path} is retired", host.unwrap_or_default()),
        head,
    );
    lifecycle_headers(resp.headers_mut(), life);
    resp
}

fn not_found(host: Option<&str>, path: &str, head: bool) -> Response<Body> {
    let message = match host {
        Some(h) => format!("no agent card document at {h}{path}"),
        None => "the request names no host".to_string(),
    };
    json_error(StatusCode::NOT_FOUND, &message, head)
}

/// 400 for a malformed request, saying `why`.
pub fn bad_request(why: &str) -> Response<Body> {
    json_error(
        StatusCode::BAD_REQUEST,
        &format!("bad request: {why}"),
        false,
    )
}

/// 503 while the process answers as many requests as it may: try again in a second.
pub fn busy() -> Response<Body> {
    let mut resp = json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many requests in flight: try again",
        false,
    );
    resp.headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

fn method_not_allowed() -> Response<Body> {
    let mut resp = json_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed: use GET or HEAD",
        false,
    );
    resp.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(ALLOWED));
    resp
}

/// The answer to a request whose headers or body exceed the limits.
pub fn too_large() -> Response<Body> {
    json_error(StatusCode::PAYLOAD_TOO_LARGE, "request too large", false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::CardEntry;
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    fn index() -> Index {
        let idx = Index::new();
        idx.upsert(CardEntry {
            source: "ns/a".into(),
            host: "agents.example.com".into(),
            prefix: String::new(),
            legacy: true,
            created: UNIX_EPOCH,
            content: Arc::new(Published::new(
                format!("{{\"name\":\"{}\"}}", "x".repeat(600)),
                UNIX_EPOCH + Duration::from_secs(1_700_000_000),
                120,
            )),
        });
        idx
    }

    fn get(
        idx: &Index,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (Route, Response<Body>) {
        let uri: http::Uri = path.parse().unwrap();
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let target = super::super::target::of(http::Version::HTTP_11, &uri, &h).unwrap();
        respond(idx, target.host.as_deref(), &method, &target.path, &h)
    }

    #[test]
    fn host_is_case_insensitive_without_port_or_trailing_dot() {
        let idx = index();
        for host in [
            "agents.example.com",
            "AGENTS.Example.com:8443",
            "agents.example.com.",
        ] {
            let (route, resp) = get(
                &idx,
                Method::GET,
                "/.well-known/agent-card.json",
                &[("host", host)],
            );
            assert_eq!(
                (route, resp.status()),
                (Route::Card, StatusCode::OK),
                "{host}"
            );
        }
    }

    #[test]
    fn if_none_match_handles_lists_star_and_weak_tags() {
        let idx = index();
        let (_, resp) = get(
            &idx,
            Method::GET,
            "/.well-known/agent-card.json",
            &[("host", "agents.example.com")],
        );
        let etag = resp.headers()[ETAG].to_str().unwrap().to_string();
        for inm in [
            etag.clone(),
            format!("\"nope\", {etag}"),
            format!("W/{etag}"),
            "*".to_string(),
        ] {
            let (_, r) = get(
                &idx,
                Method::GET,
                "/.well-known/agent-card.json",
                &[("host", "agents.example.com"), ("if-none-match", &inm)],
            );
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{inm}");
            assert_eq!(r.headers()[ETAG], etag.as_str());
        }
        let (_, r) = get(
            &idx,
            Method::GET,
            "/.well-known/agent-card.json",
            &[
                ("host", "agents.example.com"),
                ("if-none-match", "\"other\""),
            ],
        );
        assert_eq!(r.status(), StatusCode::OK);
        // If-None-Match wins over If-Modified-Since.
        let (_, r) = get(
            &idx,
            Method::GET,
            "/.well-known/agent-card.json",
            &[
                ("host", "agents.example.com"),
                ("if-none-match", "\"other\""),
                ("if-modified-since", "Sun, 06 Nov 2044 08:49:37 GMT"),
            ],
        );
        assert_eq!(r.status(), StatusCode::OK);
    }

    #[test]
    fn gzip_is_negotiated_with_q_values() {
        let idx = index();
        for (ae, gz) in [
            ("gzip", true),
            ("br, gzip;q=0.5", true),
            ("gzip;q=0", false),
            ("*", true),
            ("identity", false),
            ("*;q=0, gzip", true),
        ] {
            let (_, r) = get(
                &idx,
                Method::GET,
                "/.well-known/agent-card.json",
                &[("host", "agents.example.com"), ("accept-encoding", ae)],
            );
            assert_eq!(r.headers().get(CONTENT_ENCODING).is_some(), gz, "{ae}");
        }
    }
}
