//! `GET /v1/changes`: a directory's change feed over HTTP, as JSON pages or, with
//! `Accept: text/event-stream`, as Server-Sent Events.
//!
//! Data flow: the request's `since` (or `Last-Event-ID`) and `limit` are parsed here; the
//! directory's persisted log comes from [`crate::directory::sites::hosted::Hosted::feed`], the caller's namespaces
//! from [`Authorizer::visible`] in Kubernetes mode (asked about every namespace the log
//! names), and [`feed::page`] gives the changes, each upsert's card from the site's catalog.
//! A stream repeats that whenever [`crate::directory::sites::hosted::Hosted`] says sites or logs changed, sends a comment every
//! [`HEARTBEAT`], and ends when the server starts draining. Streams per process are bounded
//! (a semaphore; past it, 503).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER, VARY};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{json, value::RawValue, Value};
use tokio::sync::{watch, Semaphore};

use crate::crd::AccessMode;
use crate::directory::access::{Authorizer, Caller};
use crate::directory::feed::{self, Cursor, CursorCodec, CursorError, FeedError, FeedLog, Item};
use crate::directory::sites::site::Site;
use crate::directory::ApiError;
use crate::web::{cors, Body};

/// Changes per page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;
/// Most changes per page.
pub const MAX_LIMIT: usize = 1000;
/// Most bytes of cards one page (or one stream event batch) carries: past it the page ends
/// early, so a `limit=1000` page of large cards is not built (and held for a slow reader) at
/// a thousand cards' size.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;
/// Time between two comments on an idle stream (keeps proxies from closing it).
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// What the change feed needs besides the site: the logs, the bound on streams, and the
/// server's drain.
#[derive(Clone)]
pub struct Feeds {
    /// The persisted logs and the sites.
    pub hosted: Arc<crate::directory::sites::hosted::Hosted>,
    /// One permit per open stream.
    pub streams: Arc<Semaphore>,
    /// Streams per client: per caller in Kubernetes mode, per address in public mode.
    pub per_client: Arc<crate::web::PerKey<String>>,
    /// The address of the connection asking.
    pub client: std::net::IpAddr,
    /// Whether public-mode streams are counted per address (clients connect directly:
    /// `--max-connections-per-client` is set).
    pub count_addresses: bool,
    /// Turns true when the server starts draining.
    pub draining: watch::Receiver<bool>,
}

/// A parsed request.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// Where the client is (`None`: from the start), as it sent it: a cursor is read only
    /// once the log and the caller are known ([`CursorCodec::decode`]).
    pub since: Option<Since>,
    /// Most changes per page.
    pub limit: usize,
}

/// A cursor as a client sent it, and the parameter that carried it (named in errors).
#[derive(Debug, PartialEq, Eq)]
pub struct Since {
    /// `since` or `Last-Event-ID`.
    pub param: &'static str,
    /// The cursor's text.
    pub text: String,
}

/// Parse `since` and `limit` (a stream's `Last-Event-ID` stands for `since`).
pub fn request(
    params: &BTreeMap<String, Vec<String>>,
    last_event_id: Option<&str>,
) -> Result<Request, ApiError> {
    let mut out = Request {
        since: None,
        limit: DEFAULT_LIMIT,
    };
    for (key, values) in params {
        let [value] = values.as_slice() else {
            return Err(ApiError::invalid(format!("{key}: given more than once")));
        };
        match key.as_str() {
            "since" => {
                out.since = Some(Since {
                    param: "since",
                    text: value.clone(),
                })
            }
            "limit" => {
                out.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::invalid(format!(
                            "limit: must be an integer from 1 to {MAX_LIMIT}"
                        ))
                    })?
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "{other}: unknown parameter (known: since, limit)"
                )))
            }
        }
    }
    if let (None, Some(id)) = (&out.since, last_event_id.filter(|s| !s.trim().is_empty())) {
        out.since = Some(Since {
            param: "Last-Event-ID",
            text: id.to_string(),
        });
    }
    Ok(out)
}

/// The cursor `since` stands for in `log`, read with `codec`: 400 naming the parameter for
/// one this server did not give this caller, 410 for one of an earlier log.
pub fn cursor_of(since: &Since, codec: &CursorCodec, log: &FeedLog) -> Result<Cursor, ApiError> {
    codec.decode(&since.text, log).map_err(|e| match e {
        CursorError::Invalid(why) => ApiError::invalid(format!("{}: {why}", since.param)),
        CursorError::Expired => expired(),
    })
}

/// 410 `CURSOR_EXPIRED`.
fn expired() -> ApiError {
    ApiError {
        status: 410,
        code: "CURSOR_EXPIRED",
        message: "since: the cursor is older than the changes this directory keeps; list the \
                  directory again (GET /v1/agents) and follow the feed from its latest cursor"
            .into(),
    }
}

/// The JSON of an error: the registry API's `errorCode`/`message` and the feed's
/// `error.code`/`error.message`.
fn error_body(e: &ApiError) -> Value {
    json!({"errorCode": e.code, "message": e.message,
           "error": {"code": e.code, "message": e.message}})
}

fn rfc3339(secs: u64) -> String {
    jiff::Timestamp::from_second(i64::try_from(secs).unwrap_or(0))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// One change as JSON, with `cursor` (the text of the cursor after it). `seq` is shown in
/// public mode only: in Kubernetes mode the gaps between a caller's sequence numbers would
/// count the changes it may not see.
pub fn item(i: &Item, cursor: String, mode: AccessMode) -> Value {
    let (namespace, name) = feed::card_of(&i.identifier);
    let mut v = json!({
        "cursor": cursor,
        "type": if i.upsert { "upsert" } else { "delete" },
        "identifier": &*i.identifier,
        "namespace": namespace,
        "name": name,
    });
    if mode == AccessMode::Public {
        v["seq"] = json!(i.seq);
    }
    match (&i.entry, i.upsert) {
        (Some(e), true) => {
            v["contentHash"] = json!(e.placement.content_hash);
            v["updatedAt"] = json!(e.placement.updated_at);
            v["url"] = json!(e.placement.url);
            let card = std::str::from_utf8(&e.body)
                .ok()
                .and_then(|s| RawValue::from_string(s.to_string()).ok());
            v["card"] = json!(card);
            v["reachable"] = json!(e.placement.reachable_str());
            v["lifecycle"] = crate::directory::native::lifecycle_json(&e.placement);
            if let Some(o) = &e.origin {
                v["origin"] = origin_json(o);
            }
        }
        _ => v["updatedAt"] = json!(rfc3339(i.at)),
    }
    v
}

/// Where a federated entry came from, as the APIs show it.
pub fn origin_json(o: &crate::directory::federation::Origin) -> Value {
    json!({"upstream": o.upstream, "url": o.url, "fetchedAt": o.fetched_at,
           "verified": o.verified, "via": [o.via], "path": o.path})
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Who reads a feed, as far as its pages depend on it: everyone (public mode), or one caller
/// with the codec sealing its cursors (Kubernetes mode).
#[derive(Clone)]
struct Reader {
    caller: Option<Caller>,
    codec: CursorCodec,
}

/// The reader of `site`'s feed `log` holding `authorization`: 401 in Kubernetes mode without a
/// token the cluster accepts, 503 while the log has no cursor key yet (a log written by an
/// earlier version, until the lease holder gives it one).
async fn reader(
    site: &Site,
    log: &FeedLog,
    authorizer: Option<&Authorizer>,
    authorization: Option<&str>,
) -> Result<Reader, ApiError> {
    match site.mode {
        AccessMode::Public => Ok(Reader {
            caller: None,
            codec: CursorCodec::Plain,
        }),
        AccessMode::Kubernetes => {
            let authorizer = authorizer.ok_or_else(|| {
                ApiError::internal("this server cannot check Kubernetes identities")
            })?;
            let caller = authorizer.caller(authorization).await?;
            let key = log.cursor_key.clone().ok_or_else(|| {
                ApiError::unavailable("the change feed of this directory is being upgraded")
            })?;
            let codec = CursorCodec::Sealed {
                key,
                caller: caller.identity(),
            };
            Ok(Reader {
                caller: Some(caller),
                codec,
            })
        }
    }
}

/// One page of `log` after `since` for `reader`: in Kubernetes mode its visibility is asked
/// about every namespace the log names.
async fn next_page(
    site: &Site,
    log: &FeedLog,
    since: Option<&Cursor>,
    limit: usize,
    authorizer: Option<&Authorizer>,
    reader: &Reader,
) -> Result<feed::Page, ApiError> {
    let visible = match (&reader.caller, authorizer) {
        (Some(caller), Some(authorizer)) => {
            let namespaces = feed::namespaces(log, since.map_or(0, |c| c.seq));
            Some(authorizer.visible_to(caller, &namespaces).await?)
        }
        _ => None,
    };
    let lookup = |id: &str| site.catalog.get(id, None);
    let bound = feed::Bound {
        changes: limit,
        bytes: MAX_PAGE_BYTES,
    };
    feed::page(log, lookup, since, bound, visible.as_ref(), now()).map_err(|e| match e {
        FeedError::Expired => expired(),
    })
}

/// A page as the JSON answer: `{"changes": [...], "metadata": {"count", "nextCursor",
/// "latest", "registry"}}` (`registry`: this directory's identifier, which directories
/// federating it add to their entries' `via`); cursors written with `codec`.
pub fn page_json(page: &feed::Page, registry: &str, codec: &CursorCodec) -> Value {
    let mode = mode_of(codec);
    let changes: Vec<Value> = page
        .items
        .iter()
        .map(|i| item(i, codec.encode(&cursor_at(page, i.seq)), mode))
        .collect();
    json!({"changes": changes, "metadata": {
        "count": page.items.len(),
        "nextCursor": codec.encode(&page.next),
        "latest": codec.encode(&page.latest),
        "registry": registry,
    }})
}

fn mode_of(codec: &CursorCodec) -> AccessMode {
    match codec {
        CursorCodec::Plain => AccessMode::Public,
        CursorCodec::Sealed { .. } => AccessMode::Kubernetes,
    }
}

/// The cursor after the item at `seq` of `page`.
fn cursor_at(page: &feed::Page, seq: u64) -> Cursor {
    Cursor {
        seq,
        ..page.next.clone()
    }
}

fn json_response(status: u16, body: &Value, mode: AccessMode) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Body::from(Bytes::from(bytes)));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    cors(h);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if mode == AccessMode::Kubernetes {
        h.insert(VARY, HeaderValue::from_static("Authorization"));
    }
    if status == 503 || status == 429 {
        h.insert(RETRY_AFTER, HeaderValue::from_static("5"));
    }
    resp
}

fn error_response(e: &ApiError, mode: AccessMode) -> Response<Body> {
    let mut resp = json_response(e.status, &error_body(e), mode);
    if e.status == 401 {
        resp.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
    }
    resp
}

/// Whether the client asks for Server-Sent Events.
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim().starts_with("text/event-stream"))
        })
}

/// Answer `GET /v1/changes` on `site`.
pub async fn handle(
    site: Arc<Site>,
    feeds: &Feeds,
    authorizer: Option<Arc<Authorizer>>,
    params: &BTreeMap<String, Vec<String>>,
    headers: &HeaderMap,
) -> Response<Body> {
    let mode = site.mode;
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let req = match request(params, last_event_id) {
        Ok(r) => r,
        Err(e) => return error_response(&e, mode),
    };
    let authorization = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(log) = feeds.hosted.feed(&site.name) else {
        let e = ApiError::unavailable("the change feed of this directory is not recorded yet");
        return error_response(&e, mode);
    };
    // Checked before a stream starts, so a bad cursor or caller gets a plain error.
    let reader = match reader(&site, &log, authorizer.as_deref(), authorization).await {
        Ok(r) => r,
        Err(e) => return error_response(&e, mode),
    };
    let since = match req
        .since
        .as_ref()
        .map(|s| cursor_of(s, &reader.codec, &log))
    {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => return error_response(&e, mode),
    };
    let first = match next_page(
        &site,
        &log,
        since.as_ref(),
        req.limit,
        authorizer.as_deref(),
        &reader,
    )
    .await
    {
        Ok(p) => p,
        Err(e) => return error_response(&e, mode),
    };
    if !wants_stream(headers) {
        let body = page_json(&first, &site.info().identifier, &reader.codec);
        return json_response(200, &body, mode);
    }
    // What one client may hold of the process's streams: an authenticated caller's own in
    // Kubernetes mode, an address's in public mode.
    let client = match (&reader.caller, feeds.count_addresses) {
        (Some(c), _) => Some(format!("caller/{}", c.identity())),
        (None, true) => Some(format!("address/{}", feeds.client)),
        // Behind a proxy every stream comes from its few addresses: not counted by address.
        (None, false) => None,
    };
    let client_slot = match client.map(|c| feeds.per_client.take(c)) {
        None => None,
        Some(Some(slot)) => Some(slot),
        Some(None) => {
            let e = ApiError {
                status: 429,
                code: "TOO_MANY_STREAMS",
                message: "this client holds as many change streams as it may; close one first"
                    .into(),
            };
            return error_response(&e, mode);
        }
    };
    let Ok(permit) = feeds.streams.clone().try_acquire_owned() else {
        let e = ApiError::unavailable("too many change streams open on this server");
        return error_response(&e, mode);
    };
    let state = Stream {
        host: site.host.clone(),
        feeds: feeds.clone(),
        changes: feeds.hosted.changes(),
        authorizer,
        pending: events(&first, &reader.codec),
        reader,
        authorization: authorization.map(str::to_string),
        cursor: first.next.clone(),
        limit: req.limit,
        done: false,
        idle_at: None,
        _permit: (permit, client_slot),
    };
    let body = futures::stream::unfold(state, |mut s| async move {
        let chunk = s.next_chunk().await?;
        Some((chunk, s))
    });
    let mut resp = Response::new(Body::Stream(Box::pin(body)));
    let h = resp.headers_mut();
    cors(h);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if mode == AccessMode::Kubernetes {
        h.insert(VARY, HeaderValue::from_static("Authorization"));
    }
    resp
}

/// The SSE events of `page`: one per change, `id:` its cursor (written with `codec`).
fn events(page: &feed::Page, codec: &CursorCodec) -> Option<Bytes> {
    if page.items.is_empty() {
        return None;
    }
    let mut out = String::new();
    for i in &page.items {
        let cursor = codec.encode(&cursor_at(page, i.seq));
        let data = item(i, cursor.clone(), mode_of(codec));
        out.push_str(&format!(
            "id: {cursor}\nevent: {}\ndata: {}\n\n",
            if i.upsert { "upsert" } else { "delete" },
            data
        ));
    }
    Some(Bytes::from(out))
}

/// An open stream's state.
struct Stream {
    host: String,
    feeds: Feeds,
    changes: watch::Receiver<u64>,
    authorizer: Option<Arc<Authorizer>>,
    /// Who reads it; in Kubernetes mode its token is checked again for each page (a revoked
    /// token ends the stream), as for any request.
    reader: Reader,
    authorization: Option<String>,
    cursor: Cursor,
    /// Events computed and not yet sent.
    pending: Option<Bytes>,
    limit: usize,
    /// The stream ends after what is pending.
    done: bool,
    /// What its last page found nothing new in: the site's generation and the log's epoch and
    /// last change. A wake that changes neither (another directory's rebuild, another log)
    /// reads nothing; a heartbeat forgets it (so a caller's changed RBAC, or revoked token, is
    /// seen within one).
    idle_at: Option<(u64, String, u64)>,
    _permit: (
        tokio::sync::OwnedSemaphorePermit,
        Option<crate::web::KeySlot<String>>,
    ),
}

impl Stream {
    /// The next chunk: pending events, new changes, a heartbeat; `None` to end the stream
    /// (draining, the directory gone, its cursor expired — said in an `error` event first).
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(chunk) = self.pending.take() {
                return Some(chunk);
            }
            if self.done || *self.feeds.draining.borrow() {
                return None;
            }
            let site = self.feeds.hosted.site(&self.host)?;
            if site.mode != mode_of(&self.reader.codec) {
                // Opened under the other access mode: what it may see is decided anew.
                self.done = true;
                let e = ApiError::unavailable(
                    "the directory's access mode changed: reconnect (with a bearer token in \
                     Kubernetes mode)",
                );
                let data = error_body(&e);
                return Some(Bytes::from(format!("event: error\ndata: {data}\n\n")));
            }
            let log = self.feeds.hosted.feed(&site.name)?;
            let now_at = (site.generation, log.epoch.clone(), log.last_seq);
            if self.idle_at.as_ref() == Some(&now_at) {
                if let Some(heartbeat) = self.wait().await {
                    return heartbeat;
                }
                continue;
            }
            if let (Some(caller), Some(authorizer)) = (&mut self.reader.caller, &self.authorizer) {
                match authorizer.caller(self.authorization.as_deref()).await {
                    Ok(c) => *caller = c,
                    Err(e) => {
                        self.done = true;
                        let data = error_body(&e);
                        return Some(Bytes::from(format!("event: error\ndata: {data}\n\n")));
                    }
                }
            }
            let page = next_page(
                &site,
                &log,
                Some(&self.cursor),
                self.limit,
                self.authorizer.as_deref(),
                &self.reader,
            )
            .await;
            match page {
                Ok(p) => {
                    let moved = p.next != self.cursor;
                    self.cursor = p.next.clone();
                    self.pending = events(&p, &self.reader.codec);
                    if self.pending.is_some() || moved {
                        continue;
                    }
                    self.idle_at = Some(now_at);
                }
                Err(e) => {
                    self.done = true;
                    let data = error_body(&e);
                    return Some(Bytes::from(format!("event: error\ndata: {data}\n\n")));
                }
            }
            if let Some(heartbeat) = self.wait().await {
                return heartbeat;
            }
        }
    }

    /// Wait for the sites or logs to change; `Some` when the stream should send that instead: a
    /// heartbeat, or its end (draining).
    async fn wait(&mut self) -> Option<Option<Bytes>> {
        let mut draining = self.feeds.draining.clone();
        tokio::select! {
            _ = self.changes.changed() => None,
            _ = draining.wait_for(|d| *d) => Some(None),
            () = tokio::time::sleep(HEARTBEAT) => {
                self.idle_at = None;
                Some(Some(Bytes::from_static(b": heartbeat\n\n")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::directory::tests::params;

    #[test]
    fn parameters_name_what_is_wrong() {
        let r = request(&params(&[("since", "c1"), ("limit", "7")]), None).unwrap();
        assert_eq!(
            r,
            Request {
                since: Some(Since {
                    param: "since",
                    text: "c1".into()
                }),
                limit: 7
            }
        );
        // Last-Event-ID stands for `since` on a stream.
        let r = request(&params(&[]), Some("c2")).unwrap();
        assert_eq!(r.since.unwrap().param, "Last-Event-ID");
        for (p, needle) in [
            (params(&[("limit", "0")]), "limit: must be"),
            (params(&[("limit", "1001")]), "limit: must be"),
            (params(&[("after", "x")]), "after: unknown parameter"),
            (
                params(&[("limit", "1"), ("limit", "2")]),
                "limit: given more than once",
            ),
        ] {
            let e = request(&p, None).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.starts_with(needle), "{}", e.message);
        }
        // A cursor is read against the log: garbage is 400 naming its parameter.
        let log = FeedLog::new("e");
        for param in ["since", "Last-Event-ID"] {
            let since = Since {
                param,
                text: "garbage!".into(),
            };
            let e = cursor_of(&since, &CursorCodec::Plain, &log).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(
                e.message.starts_with(&format!("{param}: not a cursor")),
                "{}",
                e.message
            );
        }
        let body = error_body(&expired());
        assert_eq!(body["error"]["code"], "CURSOR_EXPIRED");
        assert_eq!(expired().status, 410);
    }
}
