//! HTTP for directory hosts: routes to the ARD manifest and registry API and the native API,
//! with the caching and CORS behaviour of the card server.
//!
//! [`answer`] is pure — a site snapshot, the request's method, path, query and body, and the
//! namespaces the caller may see give a status and a JSON body; [`cached_answer`] is the same
//! through the cache of rendered responses ([`super::cache`]: a repeated query of one snapshot
//! by one visibility class is answered with the bytes rendered the first time); [`handle`]
//! adds what needs I/O (reading the bounded body, the Kubernetes access checks) and the
//! headers: a strong `ETag` of the body (304 for a matching `If-None-Match` on GET/HEAD),
//! `Cache-Control` (`public` for public directories; `private` with `Vary: Authorization` in
//! Kubernetes mode; `no-store` for errors), CORS for browsers. The web pages, the change feed
//! and `/mcp` are answered afresh each time.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{
    ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_NONE_MATCH,
    RETRY_AFTER, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};

use super::access::Authorizer;
use super::ard::{self, FacetKey};
use super::cache::{Key, Rendered, ResponseCache};
use super::entry::Field;
use super::native;
use super::query::{Catalog, Visibility};
use super::token;
use super::ApiError;
use crate::crd::AccessMode;
use crate::directory::feed::changes::Feeds;
use crate::directory::sites::site::Site;
use crate::web::{cors, if_none_match, preflight_for, Body, Route};

const METHODS: &str = "GET, HEAD, POST, OPTIONS";

/// A status and JSON body.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// JSON body.
    pub body: Vec<u8>,
}

impl Answer {
    fn ok(v: &Value) -> Answer {
        Answer {
            status: 200,
            body: serde_json::to_vec(v).unwrap_or_default(),
        }
    }

    fn error(e: &ApiError) -> Answer {
        Answer {
            status: e.status,
            body: e.body(),
        }
    }
}

/// Query parameters, percent-decoded, repeated keys kept.
pub fn params(query: Option<&str>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        out.entry(k.into_owned()).or_default().push(v.into_owned());
    }
    out
}

fn no_params(params: &BTreeMap<String, Vec<String>>) -> Result<(), ApiError> {
    match params.keys().next() {
        Some(k) => Err(ApiError::invalid(format!("{k}: unknown parameter"))),
        None => Ok(()),
    }
}

/// A path segment, percent-decoded (`+` is a plus in a path).
fn percent_decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// Answer a request to `site` for `path` (query string `query`, body `body`) from a caller who
/// may see `visible`.
pub fn answer(
    site: &Site,
    method: &Method,
    path: &str,
    query: Option<&str>,
    body: &[u8],
    visible: Visibility<'_>,
) -> Answer {
    match route(site, method, path, query, body, visible) {
        Ok(v) => Answer::ok(&v),
        Err(e) => Answer::error(&e),
    }
}

/// [`answer`] through `cache`: `Ok` with the rendered 200 (kept for the next request with the
/// same [`Key`]), `Err` with any other answer (never kept).
pub fn cached_answer(
    cache: &ResponseCache,
    site: &Site,
    method: &Method,
    path: &str,
    query: Option<&str>,
    body: &Bytes,
    visible: Visibility<'_>,
) -> Result<Rendered, Answer> {
    let key = cache
        .is_enabled()
        .then(|| Key::new(site, method, path, query, body, visible))
        .flatten();
    if let Some(hit) = key.as_ref().and_then(|k| cache.get(k)) {
        return Ok(hit);
    }
    let a = answer(site, method, path, query, body, visible);
    if a.status != 200 {
        return Err(a);
    }
    let mut body = a.body;
    // What is kept is weighed by its length: hold no spare capacity beyond it.
    body.shrink_to_fit();
    let rendered = Rendered::new(Bytes::from(body));
    if let Some(key) = key {
        cache.insert(key, rendered.clone());
    }
    Ok(rendered)
}

fn route(
    site: &Site,
    method: &Method,
    path: &str,
    query: Option<&str>,
    body: &[u8],
    visible: Visibility<'_>,
) -> Result<Value, ApiError> {
    let params = params(query);
    let get = method == Method::GET || method == Method::HEAD;
    let post = method == Method::POST;
    if is_manifest_path(site, path) {
        if !get {
            return Err(method_error());
        }
        no_params(&params)?;
        return Ok(manifest(site, visible));
    }
    let Some(rest) = path.strip_prefix(site.prefix.as_str()) else {
        return Err(ApiError::not_found(format!("nothing at {path}")));
    };
    let catalog = &site.catalog;
    match (rest, get, post) {
        ("/search", _, true) => {
            no_params(&params)?;
            search(site, body, visible)
        }
        ("/explore", _, true) => {
            no_params(&params)?;
            explore(catalog, body, visible)
        }
        ("/agents", true, _) => list(catalog, &params, visible),
        ("/v1/agents", true, _) => {
            let r = native::request(&params, true)?;
            let page = catalog.list(&r.query, visible, r.after.as_deref(), r.limit);
            Ok(native::page(&page))
        }
        ("/v1/facets", true, _) => {
            let r = native::request(&params, false)?;
            let (counts, total) = catalog.facets_with_total(&r.query, visible, &Field::ALL);
            Ok(native::facets(&counts, total))
        }
        ("/search" | "/explore", true, _) => Err(method_error()),
        (other, true, _) => {
            no_params(&params)?;
            one_agent(catalog, other, visible)
                .unwrap_or_else(|| Err(ApiError::not_found(format!("nothing at {path}"))))
        }
        _ => Err(method_error()),
    }
}

/// Whether `path` is the AI Catalog / ARD manifest (at the host's root, or under the
/// directory's prefix).
fn is_manifest_path(site: &Site, path: &str) -> bool {
    let manifest_paths = ["/.well-known/ai-catalog.json", "/.well-known/ard.json"];
    manifest_paths.contains(&path)
        || path
            .strip_prefix(site.prefix.as_str())
            .is_some_and(|p| !site.prefix.is_empty() && manifest_paths.contains(&p))
}

/// The manifest of what the caller sees.
fn manifest(site: &Site, visible: Visibility<'_>) -> Value {
    // Retired cards' tombstones are for the APIs that ask for them, not for crawlers.
    let entries = site
        .catalog
        .entries()
        .iter()
        .filter(|e| visible.is_none_or(|v| v.contains(&e.placement.namespace)))
        .filter(|e| !e.placement.retired());
    ard::manifest(&site.info(), entries.map(|e| e.as_ref()))
}

/// `POST /search` (ARD): ranked catalog entries, paged by offset tokens.
fn search(site: &Site, body: &[u8], visible: Visibility<'_>) -> Result<Value, ApiError> {
    let s = ard::search_request(body)?;
    let ranked = site
        .catalog
        .search_page(&s.query, visible, s.offset, s.page_size);
    // The registry's base URL: `{source}/agents/{identifier}` retrieves an entry (v0.91).
    let source = site.info().base_url;
    let results: Vec<Value> = ranked
        .hits
        .iter()
        .map(|(e, score)| {
            let mut m = ard::catalog_entry(e);
            m.insert("score".into(), json!(score));
            m.insert("source".into(), json!(source));
            Value::Object(m)
        })
        .collect();
    let mut out = json!({"results": results});
    let end = s.offset.saturating_add(s.page_size);
    if ranked.total > end {
        out["pageToken"] = json!(token::encode_offset(end));
    }
    Ok(out)
}

/// `POST /explore` (ARD): facet buckets over what a query selects.
fn explore(catalog: &Catalog, body: &[u8], visible: Visibility<'_>) -> Result<Value, ApiError> {
    let x = ard::explore_request(body)?;
    let fields: Vec<Field> = x
        .facets
        .iter()
        .filter_map(|f| match f.key {
            FacetKey::Field(f) => Some(f),
            FacetKey::Type => None,
        })
        .collect();
    let (counts, total) = catalog.facets_with_total(&x.query, visible, &fields);
    let mut facets = serde_json::Map::new();
    for f in &x.facets {
        let buckets: Vec<(String, usize)> = match f.key {
            FacetKey::Type => vec![(ard::TYPE_A2A.to_string(), total)],
            FacetKey::Field(field) => counts.get(&field).cloned().unwrap_or_default(),
        };
        facets.insert(f.path.clone(), facet_result(&buckets, f.limit, f.min_count));
    }
    Ok(json!({"resultType": "facets", "facets": facets}))
}

/// One facet's buckets: those with at least `min_count`, the first `limit` shown, the rest
/// counted as `otherCount`.
fn facet_result(buckets: &[(String, usize)], limit: usize, min_count: usize) -> Value {
    let kept: Vec<&(String, usize)> = buckets
        .iter()
        .filter(|(_, c)| *c >= min_count && *c > 0)
        .collect();
    let shown: Vec<Value> = kept
        .iter()
        .take(limit)
        .map(|(v, c)| json!({"value": v, "count": c}))
        .collect();
    let other: usize = kept.iter().skip(limit).map(|(_, c)| c).sum();
    let mut result = json!({"buckets": shown});
    if other > 0 {
        result["otherCount"] = json!(other);
    }
    result
}

/// `GET /agents` (ARD): catalog entries filtered, ordered and paged.
fn list(
    catalog: &Catalog,
    params: &BTreeMap<String, Vec<String>>,
    visible: Visibility<'_>,
) -> Result<Value, ApiError> {
    let l = ard::list_request(params)?;
    // In identifier order only the page's entries are needed; another order needs all.
    let end = l.offset.saturating_add(l.page_size);
    let wanted = if l.order.is_some() { usize::MAX } else { end };
    let page = catalog.list(&l.query, visible, None, wanted);
    let mut items = page.items;
    if let Some((field, desc)) = &l.order {
        items.sort_by_cached_key(|e| {
            let key = match field.as_str() {
                "displayName" => e.display_name.to_lowercase(),
                "updatedAt" => e.placement.updated_at.clone(),
                _ => e.identifier.clone(),
            };
            (key, e.identifier.clone())
        });
        if *desc {
            items.reverse();
        }
    }
    let shown: Vec<Value> = items
        .iter()
        .skip(l.offset)
        .take(l.page_size)
        .map(|e| Value::Object(ard::catalog_entry(e)))
        .collect();
    let mut out = json!({"items": shown, "total": page.total});
    if page.total > end {
        out["pageToken"] = json!(token::encode_offset(end));
    }
    Ok(out)
}

/// `GET /agents/{identifier}` (ARD) or `GET /v1/agents/{namespace}/{name}` (native); `None`
/// when `path` is neither.
fn one_agent(
    catalog: &Catalog,
    path: &str,
    visible: Visibility<'_>,
) -> Option<Result<Value, ApiError>> {
    if let Some(id) = path.strip_prefix("/agents/") {
        let id = ard::canonical_identifier(&percent_decode(id));
        if !ard::is_identifier(&id) {
            return Some(Err(ApiError::invalid(format!(
                "identifier: {id:?} is not an ARD identifier (urn:air:<publisher>:<namespace>:<name>)"
            ))));
        }
        return Some(
            catalog
                .get(&id, visible)
                .map(|e| Value::Object(ard::catalog_entry(&e)))
                .ok_or_else(|| ApiError::not_found(format!("no agent {id}"))),
        );
    }
    let (ns, name) = path.strip_prefix("/v1/agents/")?.split_once('/')?;
    let (ns, name) = (percent_decode(ns), percent_decode(name));
    Some(
        catalog
            .get_card(&ns, &name, visible)
            .map(|e| native::item(&e))
            .ok_or_else(|| ApiError::not_found(format!("no agent {ns}/{name}"))),
    )
}

fn method_error() -> ApiError {
    ApiError {
        status: 405,
        code: "METHOD_NOT_ALLOWED",
        message: format!("method not allowed here (allowed: {METHODS})"),
    }
}

/// Whether a GET prefers a page: the browser's `Accept` names HTML.
fn wants_html(req: &HeaderMap) -> bool {
    req.get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"))
}

/// `/agents/{namespace}/{name}` (a card page; an ARD identifier has no `/`).
fn html_card_path(rest: &str) -> Option<(String, String)> {
    let (ns, name) = rest.strip_prefix("/agents/")?.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| (percent_decode(ns), percent_decode(name)))
}

/// A page or asset (`status` 200) or an error page, with the caching and validators of
/// [`response`] and the Content-Security-Policy.
fn page_response(
    answer: Answer,
    content_type: &'static str,
    method: &Method,
    req: &HeaderMap,
    mode: AccessMode,
) -> Response<Body> {
    let mut resp = response(answer, method, req, mode);
    let h = resp.headers_mut();
    if h.contains_key(http::header::CONTENT_TYPE) {
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
    }
    h.insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(super::html::CSP),
    );
    h.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    let vary = match mode {
        AccessMode::Public => "Accept",
        AccessMode::Kubernetes => "Accept, Authorization",
    };
    h.insert(VARY, HeaderValue::from_static(vary));
    resp
}

/// The HTTP response of `answer` for a request with `req` headers.
pub fn response(
    answer: Answer,
    method: &Method,
    req: &HeaderMap,
    mode: AccessMode,
) -> Response<Body> {
    if answer.status < 400 {
        let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
        let rendered = Rendered::new(Bytes::from(answer.body));
        return rendered_response(&rendered, status, method, req, mode);
    }
    let mut resp = Response::new(Body::default());
    let h = resp.headers_mut();
    cors(h);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if answer.status == 405 {
        h.insert(ALLOW, HeaderValue::from_static(METHODS));
    }
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if answer.status == 401 {
        h.insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
    }
    if answer.status == 503 {
        h.insert(RETRY_AFTER, HeaderValue::from_static("5"));
    }
    *resp.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(answer.body.len()));
    if method != Method::HEAD {
        *resp.body_mut() = Body::from(Bytes::from(answer.body));
    }
    resp
}

/// The response of a successful answer, rendered (or taken from the cache) with its ETag: 304
/// for a GET or HEAD whose `If-None-Match` names it, else `status` with the body (none for
/// HEAD). Nothing here reads or copies the body.
fn rendered_response(
    rendered: &Rendered,
    status: StatusCode,
    method: &Method,
    req: &HeaderMap,
    mode: AccessMode,
) -> Response<Body> {
    let mut resp = Response::new(Body::default());
    let h = resp.headers_mut();
    cors(h);
    match mode {
        AccessMode::Public => {
            h.insert(
                CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=30"),
            );
        }
        AccessMode::Kubernetes => {
            h.insert(
                CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=30"),
            );
            h.insert(VARY, HeaderValue::from_static("Authorization"));
        }
    }
    h.insert(ETAG, rendered.etag.clone());
    let get = method == Method::GET || method == Method::HEAD;
    let matched = get
        && req.get(IF_NONE_MATCH).is_some_and(|v| {
            rendered
                .etag
                .to_str()
                .is_ok_and(|ours| if_none_match(v, &[ours]))
        });
    if matched {
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        return resp;
    }
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(CONTENT_LENGTH, HeaderValue::from(rendered.body.len()));
    *resp.status_mut() = status;
    if method != Method::HEAD {
        *resp.body_mut() = Body::from(rendered.body.clone());
    }
    resp
}

/// Answer one request to a directory host for `path` (normalised: see
/// [`crate::serve::target`]): read the body (at most `max_body` bytes), check the caller in
/// Kubernetes mode, then [`cached_answer`] (through `cache`) and its response (or, for a
/// browser, the web page, which shows `jwks`).
#[allow(clippy::too_many_arguments)]
pub async fn handle<B>(
    site: Arc<Site>,
    feeds: &Feeds,
    authorizer: Option<Arc<Authorizer>>,
    jwks: impl FnOnce() -> Option<Bytes>,
    cache: &ResponseCache,
    req: http::Request<B>,
    path: &str,
    max_body: usize,
) -> (Route, Response<Body>)
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = req.into_parts();
    if parts.method == Method::OPTIONS {
        return (Route::Preflight, preflight_for(&parts.headers, METHODS));
    }
    let mode = site.mode;
    let get = parts.method == Method::GET || parts.method == Method::HEAD;
    let rest = path.strip_prefix(site.prefix.as_str()).unwrap_or(path);
    if let Some(resp) = get.then(|| asset(rest, &parts)).flatten() {
        return (Route::Directory, resp);
    }
    if rest == "/mcp" {
        // Read whole first: a body past the limit (chunked, too) is refused before the MCP
        // transport parses it, and so is a JSON-RPC batch (one request a POST, as MCP's
        // streamable HTTP transport has it since 2025-06-18).
        let bytes = match read_body(body, max_body).await {
            Ok(b) => b,
            Err(e) => return (Route::Directory, mcp_refusal(e.status, &e.message)),
        };
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            let why = "JSON-RPC batches are not accepted: send one request per POST";
            return (Route::Directory, mcp_refusal(400, why));
        }
        let req = http::Request::from_parts(parts, http_body_util::Full::new(bytes));
        let resp = mcp(site, authorizer.as_deref(), req).await;
        return (Route::Directory, resp);
    }
    if rest == "/v1/changes" && parts.method == Method::GET {
        let params = params(parts.uri.query());
        let resp = crate::directory::feed::changes::handle(
            site,
            feeds,
            authorizer,
            &params,
            &parts.headers,
        )
        .await;
        return (Route::Directory, resp);
    }
    if get {
        let view = governance_view(&site, authorizer.as_deref(), cache, &parts, (path, rest));
        if let Some(resp) = view.await {
            return (Route::Directory, resp);
        }
    }
    let html = get
        && wants_html(&parts.headers)
        && (rest == "/" || rest.is_empty() || html_card_path(rest).is_some());
    let fail = |e: ApiError| {
        (
            Route::Directory,
            response(Answer::error(&e), &parts.method, &parts.headers, mode),
        )
    };
    let bytes = if parts.method == Method::POST {
        match read_body(body, max_body).await {
            Ok(b) => b,
            Err(e) => return fail(e),
        }
    } else {
        Bytes::new()
    };
    let visible = match caller_visibility(&site, authorizer.as_deref(), &parts.headers).await {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let resp = if html {
        let answer = web_page(&site, rest, parts.uri.query(), visible.as_ref(), jwks());
        let html_type = "text/html; charset=utf-8";
        page_response(answer, html_type, &parts.method, &parts.headers, mode)
    } else {
        let answered = cached_answer(
            cache,
            &site,
            &parts.method,
            path,
            parts.uri.query(),
            &bytes,
            visible.as_ref(),
        );
        match answered {
            Ok(r) => rendered_response(&r, StatusCode::OK, &parts.method, &parts.headers, mode),
            Err(a) => response(a, &parts.method, &parts.headers, mode),
        }
    };
    (Route::Directory, with_manifest_link(resp))
}

/// The governance views ([`super::governance`]): a card's revisions (read from the API server
/// once per site snapshot and caller class, then from the response cache, so a flood of
/// requests costs the API server nothing more), and for approvers the cards waiting for an
/// approval (`?approval=` on `/v1/agents` or the web page, answered afresh). `None` for any
/// other request.
async fn governance_view(
    site: &Site,
    authorizer: Option<&Authorizer>,
    cache: &ResponseCache,
    parts: &http::request::Parts,
    (path, rest): (&str, &str),
) -> Option<Response<Body>> {
    let (method, headers) = (&parts.method, &parts.headers);
    if let Some((ns, name, n)) = super::governance::revisions_path(rest) {
        let visible = match caller_visibility(site, authorizer, headers).await {
            Ok(v) => v,
            Err(e) => return Some(response(Answer::error(&e), method, headers, site.mode)),
        };
        let query = parts.uri.query();
        let key = cache
            .is_enabled()
            .then(|| Key::new(site, method, path, query, &Bytes::new(), visible.as_ref()))
            .flatten();
        if let Some(hit) = key.as_ref().and_then(|k| cache.get(k)) {
            return Some(rendered_response(
                &hit,
                StatusCode::OK,
                method,
                headers,
                site.mode,
            ));
        }
        let found =
            super::governance::revisions(site, authorizer, visible.as_ref(), (&ns, &name, n)).await;
        return Some(match found {
            Ok(body) => {
                let rendered = Rendered::new(Bytes::from(body));
                if let Some(key) = key {
                    cache.insert(key, rendered.clone());
                }
                rendered_response(&rendered, StatusCode::OK, method, headers, site.mode)
            }
            Err(e) => response(Answer::error(&e), method, headers, site.mode),
        });
    }
    let top = rest == "/v1/agents" || rest == "/" || rest.is_empty();
    let params = params(parts.uri.query());
    if !top || !params.contains_key("approval") {
        return None;
    }
    let html = rest != "/v1/agents" && wants_html(headers);
    let auth = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let checked = match super::governance::approval_param(&params) {
        Ok(Some(state)) => super::governance::check_approver(authorizer, auth)
            .await
            .map(|()| state),
        Ok(None) => return None,
        Err(e) => Err(e),
    };
    // Only for approvers: never kept by a shared cache.
    let private = AccessMode::Kubernetes;
    Some(match (checked, html) {
        (Ok(state), false) => {
            let items = super::governance::waiting_of(site, &state);
            response(
                Answer::ok(&super::governance::waiting(&items)),
                method,
                headers,
                private,
            )
        }
        (Ok(state), true) => {
            let items = super::governance::waiting_of(site, &state);
            let answer = Answer {
                status: 200,
                body: super::html::waiting(site, &state, &items).into_bytes(),
            };
            page_response(answer, "text/html; charset=utf-8", method, headers, private)
        }
        (Err(e), _) => response(Answer::error(&e), method, headers, private),
    })
}

/// `/mcp`: the caller checked as for the APIs (401 without a token the cluster accepts, in
/// Kubernetes mode), then the MCP transport ([`super::mcp`]).
async fn mcp<B>(
    site: Arc<Site>,
    authorizer: Option<&Authorizer>,
    req: http::Request<B>,
) -> Response<Body>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mode = site.mode;
    let visible = match caller_visibility(&site, authorizer, req.headers()).await {
        Ok(v) => v,
        Err(e) => return response(Answer::error(&e), req.method(), req.headers(), mode),
    };
    let req = req.map(|b| {
        http_body_util::BodyExt::map_err(b, |e| -> Box<dyn std::error::Error + Send + Sync> {
            e.into()
        })
    });
    let caller = super::mcp::Caller { site, visible };
    let (head, body) = super::mcp::serve(caller, req).await.into_parts();
    let mut resp = Response::from_parts(head, Body::Boxed(body));
    cors(resp.headers_mut());
    resp
}

/// A JSON-RPC error answering an `/mcp` request refused before the MCP transport saw it.
fn mcp_refusal(status: u16, message: &str) -> Response<Body> {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32600, "message": message}});
    let mut resp = Response::new(Body::from(Bytes::from(body.to_string())));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let h = resp.headers_mut();
    cors(h);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// `Link: </.well-known/ard.json>; rel="ard"`: where the registry's ARD manifest is, on every
/// API answer and page (the relation v0.91 names for discovery; its primary path).
fn with_manifest_link(mut resp: Response<Body>) -> Response<Body> {
    resp.headers_mut().insert(
        http::header::LINK,
        HeaderValue::from_static("</.well-known/ard.json>; rel=\"ard\""),
    );
    resp
}

/// The web page's embedded assets (`<prefix>/assets/style.css`, `app.js`), when `rest` names
/// one.
fn asset(rest: &str, parts: &http::request::Parts) -> Option<Response<Body>> {
    let (content_type, text) = match rest.strip_prefix("/assets/")? {
        "style.css" => ("text/css; charset=utf-8", super::html::STYLE),
        "app.js" => ("text/javascript; charset=utf-8", super::html::SCRIPT),
        _ => return None,
    };
    let answer = Answer {
        status: 200,
        body: text.as_bytes().to_vec(),
    };
    Some(page_response(
        answer,
        content_type,
        &parts.method,
        &parts.headers,
        AccessMode::Public,
    ))
}

/// A request body of at most `max_body` bytes.
async fn read_body<B>(body: B, max_body: usize) -> Result<Bytes, ApiError>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, max_body).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) => Err(ApiError {
            status: 413,
            code: "INVALID_ARGUMENT",
            message: format!("request body: larger than {max_body} bytes or unreadable ({e})"),
        }),
    }
}

/// The namespaces the caller may see: every one in Public mode (`None`), those its RBAC
/// allows in Kubernetes mode (its bearer token checked).
async fn caller_visibility(
    site: &Site,
    authorizer: Option<&Authorizer>,
    headers: &HeaderMap,
) -> Result<Option<std::collections::HashSet<String>>, ApiError> {
    let auth = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    visibility(site.mode, authorizer, auth, &site.namespaces).await
}

/// Which of `namespaces` the holder of `authorization` may see in access `mode` (`None`:
/// every one, Public mode).
pub(super) async fn visibility(
    mode: AccessMode,
    authorizer: Option<&Authorizer>,
    authorization: Option<&str>,
    namespaces: &std::collections::BTreeSet<String>,
) -> Result<Option<std::collections::HashSet<String>>, ApiError> {
    match mode {
        AccessMode::Public => Ok(None),
        AccessMode::Kubernetes => {
            let authorizer = authorizer.ok_or_else(|| {
                ApiError::internal("this server cannot check Kubernetes identities")
            })?;
            authorizer
                .visible(authorization, namespaces)
                .await
                .map(Some)
        }
    }
}

/// The web page for a browser: the catalog, or one card's page.
fn web_page(
    site: &Site,
    rest: &str,
    query: Option<&str>,
    visible: Visibility<'_>,
    jwks: Option<Bytes>,
) -> Answer {
    let page = match html_card_path(rest) {
        Some((ns, name)) => match site.catalog.get_card(&ns, &name, visible) {
            Some(e) => Ok(super::html::card(site, &e, jwks.as_deref())),
            None => Err(ApiError::not_found(format!("no agent {ns}/{name}"))),
        },
        None => super::html::catalog(site, &params(query), visible),
    };
    match page {
        Ok(doc) => Answer {
            status: 200,
            body: doc.into_bytes(),
        },
        Err(e) => Answer {
            status: e.status,
            body: super::html::error(site, &e).into_bytes(),
        },
    }
}
