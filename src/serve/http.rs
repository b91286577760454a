//! Request → response for the public port: pure functions over the [`Index`], no I/O.
//!
//! Routing is by Host (port stripped, case-insensitive, trailing dot ignored) and path (see
//! [`Index::lookup`]). Conditional requests follow RFC 9110 §13: `If-None-Match` (weak
//! comparison, lists, `*`) takes precedence over `If-Modified-Since`; a match is a 304 with
//! the validators and caching headers but no body.

use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, ACCESS_CONTROL_EXPOSE_HEADERS, ALLOW, CACHE_CONTROL, CONTENT_ENCODING,
    CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};

use crate::index::{Hit, Index, Published};
pub(crate) use crate::web::cors;
use crate::web::if_none_match_with;
pub use crate::web::{preflight_for, Body, Route};

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
    answer(hit, host, method, path, headers)
}

/// Answer one request that resolved to `hit`. A card's extended route is answered here only
/// without a token check ([`super::extended::answer_unchecked`]: the error when the card has
/// no extended card, 401 otherwise); the server checks tokens first ([`super::extended`]).
pub fn answer(
    hit: Option<Hit>,
    host: Option<&str>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> (Route, Response<Body>) {
    match (method, hit) {
        (_, Some(Hit::Extended(x))) => super::extended::answer_unchecked(&x, method, host),
        (&Method::GET | &Method::HEAD, Some(hit)) => {
            let (route, doc) = match hit {
                Hit::Card(p) => (Route::Card, p),
                Hit::Jwks(p) => (Route::Jwks, p),
                Hit::Did(p) => (Route::Did, p),
                Hit::Extended(_) => return (Route::NotFound, not_found(host, path, false)),
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

/// A directory host's did:web document (its signing keys, as on card hosts), or `None` when
/// no ES256 key is published.
pub fn did_document(
    index: &Index,
    host: &str,
    method: &Method,
    headers: &HeaderMap,
) -> Option<(Route, Response<Body>)> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return None;
    }
    let doc = index.did(host)?;
    Some((Route::Did, document(&doc, method == Method::HEAD, headers)))
}

pub(crate) fn document(doc: &Published, head: bool, req: &HeaderMap) -> Response<Body> {
    let gzip = accepts_gzip(req).then(|| doc.gzip()).flatten();
    let etag = gzip.map_or(&doc.etag, |z| &z.etag);
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
    h.insert(LAST_MODIFIED, doc.last_modified_header());
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
            z.body.clone()
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
    if_none_match_with(value, |tag| doc.has_tag(tag))
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

/// A JSON error answer (`{"error": message}`), with no body for a HEAD request (`head`).
pub(crate) fn json_error(status: StatusCode, message: &str, head: bool) -> Response<Body> {
    json_answer(status, &serde_json::json!({"error": message}), head)
}

/// A JSON answer with `body`, not cached (`no-store`), with CORS; no body for a HEAD request.
pub(crate) fn json_answer(
    status: StatusCode,
    body: &serde_json::Value,
    head: bool,
) -> Response<Body> {
    let body = Bytes::from(body.to_string());
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

pub(crate) fn method_not_allowed() -> Response<Body> {
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
            extended: None,
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
