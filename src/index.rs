//! The in-memory index of published cards, shared by the HTTP handlers of every replica.
//!
//! Feeds (a watch on the published ConfigMaps, or a directory of files) write into it;
//! request handlers read from it. Everything a response needs is computed once per card
//! version when it is inserted — ETag, header values — so serving is a lookup and a clone of
//! reference-counted bytes; the gzip body is made on the first request that accepts it and
//! kept (most of 100,000 cards are never asked for gzip: an encoding made ahead for each was
//! a twentieth of the operator's memory). The lock is a plain `RwLock` held only for map
//! operations, never across an `.await`. Until a feed completes its first full sync the index
//! reports not ready, and after that it keeps the last known cards whatever happens to the feed.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::HeaderValue;

use crate::contract::{content_hash, PATH_CARD, PATH_DID, PATH_JWKS, PATH_LEGACY};

/// One version of a served document with everything its responses need, computed once. Held
/// per card for as long as it is served (100,000 of them in a large cluster), so what can be
/// shared or made on demand is: the gzip body and its ETag wait for the first request that
/// accepts gzip, `Cache-Control` values are shared between documents ([`cache_control`]) and
/// `Last-Modified` is formatted per response ([`Published::last_modified_header`]).
#[derive(Debug)]
pub struct Published {
    /// The exact bytes served.
    pub body: Bytes,
    /// The gzip encoding of `body` and its ETag, when it is smaller, made once on first use
    /// ([`Published::gzip`]).
    gzip: OnceLock<Option<Box<Gzipped>>>,
    /// Strong ETag of `body` (quoted).
    pub etag: HeaderValue,
    /// Modification time, whole seconds (HTTP dates have no finer resolution).
    pub last_modified: SystemTime,
    /// `Cache-Control` header value (shared: [`cache_control`]).
    pub cache_control: HeaderValue,
    /// A deprecated or retired card's headers and 410 period (`None` while active).
    pub lifecycle: Option<Box<LifecycleHeaders>>,
}

/// The gzip representation of a [`Published`] body.
#[derive(Debug)]
pub struct Gzipped {
    /// The compressed bytes.
    pub body: Bytes,
    /// Its strong ETag: the body's, `-gz` appended inside the quotes.
    pub etag: HeaderValue,
}

/// The `Cache-Control` value for `max_age` seconds, shared or private, as one value every
/// document with the same policy shares (a clone is a reference count, not a copy): of
/// 100,000 cards most use one of a few ages. Ages from a tenant's spec are clamped to a day
/// by their callers (at most 2 × 86,401 values); the JWKS's comes from the operator's own
/// ConfigMap.
pub fn cache_control(private: bool, max_age: u32) -> HeaderValue {
    static VALUES: OnceLock<std::sync::Mutex<HashMap<(bool, u32), HeaderValue>>> = OnceLock::new();
    let mut values = crate::locks::lock(VALUES.get_or_init(Default::default));
    values
        .entry((private, max_age))
        .or_insert_with(|| {
            let scope = if private { "private" } else { "public" };
            header(&format!("{scope}, max-age={max_age}"))
        })
        .clone()
}

/// What a deprecated or retired card's responses carry, formatted once.
#[derive(Debug, Default)]
pub struct LifecycleHeaders {
    /// `Deprecation` (RFC 9745: `@<unix seconds>`), `Sunset` (RFC 8594: an HTTP date) and
    /// `Link: <successor>; rel="successor-version"`, each when known.
    pub headers: Vec<(http::HeaderName, HeaderValue)>,
    /// Retired: until when the URL answers 410 Gone (then 404).
    pub gone_until: Option<SystemTime>,
}

/// A date or date-time (RFC 3339) as a time, whole seconds; a bare date is its midnight UTC.
pub fn rfc3339(text: &str) -> Option<SystemTime> {
    let ts = text.parse::<jiff::Timestamp>().ok().or_else(|| {
        let date: jiff::civil::Date = text.parse().ok()?;
        date.to_zoned(jiff::tz::TimeZone::UTC)
            .ok()
            .map(|z| z.timestamp())
    })?;
    let secs = u64::try_from(ts.as_second()).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

impl LifecycleHeaders {
    /// The headers of `life` (the lifecycle the operator resolved for the card).
    pub fn of(life: &crate::crd::ServedLifecycle) -> Self {
        let mut headers = Vec::new();
        let since = rfc3339(&life.since).unwrap_or(UNIX_EPOCH);
        let secs = since
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        if life.state == crate::crd::LifecycleState::Deprecated {
            headers.push((
                http::HeaderName::from_static("deprecation"),
                header(&format!("@{secs}")),
            ));
            if let Some(at) = life.sunset.as_deref().and_then(rfc3339) {
                headers.push((
                    http::HeaderName::from_static("sunset"),
                    header(&httpdate::fmt_http_date(at)),
                ));
            }
        }
        let target = life.successor_url.as_ref().or(life.successor.as_ref());
        if let Some(url) = target.filter(|u| !u.contains(['<', '>', '\r', '\n'])) {
            headers.push((
                http::header::LINK,
                header(&format!("<{url}>; rel=\"successor-version\"")),
            ));
        }
        LifecycleHeaders {
            headers: headers.into_iter().filter(|(_, v)| !v.is_empty()).collect(),
            gone_until: life.gone_until.as_deref().and_then(rfc3339),
        }
    }
}

impl Published {
    /// The same document with a deprecated or retired card's headers.
    pub fn with_lifecycle(mut self, life: Option<&crate::crd::ServedLifecycle>) -> Self {
        self.lifecycle = life.map(|l| Box::new(LifecycleHeaders::of(l)));
        self
    }

    /// The same document cached by its caller alone (`Cache-Control: private`): what only an
    /// authenticated caller may read, never kept by a shared cache.
    pub fn private(mut self, max_age: u32) -> Self {
        self.cache_control = cache_control(true, max_age);
        self
    }

    /// The gzip encoding of the body and its ETag, when it is smaller: compressed by the first
    /// caller, then shared.
    pub fn gzip(&self) -> Option<&Gzipped> {
        self.gzip
            .get_or_init(|| {
                let z = gzip(&self.body).filter(|z| z.len() < self.body.len())?;
                Some(Box::new(Gzipped {
                    body: Bytes::from(z),
                    etag: header(&format!("\"{}-gz\"", self.hash())),
                }))
            })
            .as_deref()
    }

    /// Whether `tag` (quoted, without `W/`) names this document: its body, or the gzip
    /// encoding of its body (whether or not that encoding is made yet: a client may hold the
    /// tag from another replica, or from before a restart).
    pub fn has_tag(&self, tag: &str) -> bool {
        let ours = self.etag.as_bytes();
        let tag = tag.as_bytes();
        tag == ours
            || (ours.len() >= 2
                && tag.len() == ours.len() + 3
                && tag[..ours.len() - 1] == ours[..ours.len() - 1]
                && &tag[ours.len() - 1..] == b"-gz\"")
    }

    /// The content hash of the body (what its ETag quotes).
    pub fn hash(&self) -> &str {
        self.etag.to_str().unwrap_or_default().trim_matches('"')
    }

    /// The `Last-Modified` header value, formatted for each response (29 bytes a card saved
    /// for a few nanoseconds a request).
    pub fn last_modified_header(&self) -> HeaderValue {
        header(&httpdate::fmt_http_date(self.last_modified))
    }

    /// Prepare `body` for serving: hash, format headers (gzip waits for its first request).
    pub fn new(body: impl Into<Bytes>, last_modified: SystemTime, max_age: u32) -> Self {
        let body: Bytes = body.into();
        let hash = content_hash(&body);
        let secs = last_modified
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        Published {
            body,
            gzip: OnceLock::new(),
            etag: header(&format!("\"{hash}\"")),
            last_modified: UNIX_EPOCH + Duration::from_secs(secs),
            cache_control: cache_control(false, max_age),
            lifecycle: None,
        }
    }
}

fn header(s: &str) -> HeaderValue {
    // Our own ASCII formatting: always a valid header value.
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(body).ok()?;
    let mut z = enc.finish().ok()?;
    // Kept as long as the card is served: without the growth slack.
    z.shrink_to_fit();
    Some(z)
}

/// A card as the index knows it: where it is served and what is served. Its source and host
/// are shared with the index's maps (and the feed's own key for the card): one copy each.
#[derive(Debug, Clone)]
pub struct CardEntry {
    /// Identity of the source (`namespace/name` of a ConfigMap, or a file name).
    pub source: Arc<str>,
    /// Host it is served for (lower case, no port).
    pub host: Arc<str>,
    /// Path prefix before `/.well-known/...` (empty, or `/a/b` without trailing slash).
    pub prefix: String,
    /// Also serve the legacy `/.well-known/agent.json`.
    pub legacy: bool,
    /// Creation time of the source: the older claim on a host and prefix wins.
    pub created: SystemTime,
    /// The served document.
    pub content: Arc<Published>,
    /// The REST `extendedAgentCard` path the operator answers for this card, if any.
    pub extended: Option<Arc<ExtendedRoute>>,
}

/// What the card server answers on a card's REST `extendedAgentCard` path
/// (`status.served.extendedPath`, decided by the operator).
#[derive(Debug)]
pub struct ExtendedRoute {
    /// The full path (`<backend path>/extendedAgentCard`).
    pub path: String,
    /// Who may have the extended card (`spec.extendedCard.auth`; one naming no one refuses
    /// everyone); `None` when the card has none published: every caller gets the A2A
    /// `ExtendedAgentCardNotConfiguredError`.
    pub auth: Option<Arc<crate::crd::ExtendedAuth>>,
    /// The extended card's confirmed bytes (cached privately), `None` until confirmed.
    pub content: Option<Arc<Published>>,
}

/// What a request resolves to.
#[derive(Debug, Clone)]
pub enum Hit {
    /// A card (at the current or legacy path).
    Card(Arc<Published>),
    /// The JWKS.
    Jwks(Arc<Published>),
    /// The host's did:web document.
    Did(Arc<Published>),
    /// A card's REST `extendedAgentCard` path (answered after the caller's token is checked).
    Extended(Arc<ExtendedRoute>),
}

#[derive(Default)]
struct State {
    by_source: HashMap<Arc<str>, Arc<CardEntry>>,
    /// Per host, entries by longest prefix first, then oldest first.
    by_host: HashMap<Arc<str>, Vec<Arc<CardEntry>>>,
    jwks: Option<Arc<Published>>,
}

impl State {
    /// Per-host order: longest prefix first (most specific route), then oldest claim.
    fn order(a: &Arc<CardEntry>, b: &Arc<CardEntry>) -> std::cmp::Ordering {
        b.prefix
            .len()
            .cmp(&a.prefix.len())
            .then(a.created.cmp(&b.created))
            .then(a.source.cmp(&b.source))
    }

    /// Drop `source` from its host's list (the list of one host, not the whole index).
    fn unlink(&mut self, entry: &CardEntry) {
        if let Some(list) = self.by_host.get_mut(&entry.host) {
            list.retain(|e| e.source != entry.source);
            if list.is_empty() {
                self.by_host.remove(&entry.host);
            }
        }
    }

    fn link(&mut self, entry: Arc<CardEntry>) {
        // Most hosts serve one card: room for one until a second comes.
        let list = self
            .by_host
            .entry(entry.host.clone())
            .or_insert_with(|| Vec::with_capacity(1));
        list.push(entry);
        list.sort_by(Self::order);
    }
}

/// The shared index. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct Index {
    state: RwLock<State>,
    ready: AtomicBool,
    /// Wakes [`Index::wait_ready`] when the first full sync is done.
    synced: tokio::sync::Notify,
    /// The host whose cards answer requests for a host with none of its own (`serve
    /// --fallback-host`: an agent serving its card by whatever name or address it is reached).
    fallback_host: Option<String>,
}

impl Index {
    /// An empty index, not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index, not ready, answering a host with no card of its own as `host`.
    pub fn with_fallback_host(host: &str) -> Self {
        Self {
            fallback_host: Some(host.to_ascii_lowercase()),
            ..Self::default()
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than refusing to serve; recover the guard.
        crate::locks::write(&self.state)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        crate::locks::read(&self.state)
    }

    /// Insert or replace the card from `entry.source`.
    pub fn upsert(&self, entry: CardEntry) {
        let entry = Arc::new(entry);
        let mut st = self.write();
        if let Some(old) = st.by_source.insert(entry.source.clone(), entry.clone()) {
            st.unlink(&old);
        }
        st.link(entry);
    }

    /// Remove the card from `source`, if any.
    pub fn remove(&self, source: &str) {
        let mut st = self.write();
        if let Some(e) = st.by_source.remove(source) {
            st.unlink(&e);
        }
    }

    /// Set (or clear) the JWKS served on every card host.
    pub fn set_jwks(&self, jwks: Option<Published>) {
        self.write().jwks = jwks.map(Arc::new);
    }

    /// The current JWKS.
    pub fn jwks(&self) -> Option<Arc<Published>> {
        self.read().jwks.clone()
    }

    /// The card entry from `source`, if any.
    pub fn entry(&self, source: &str) -> Option<Arc<CardEntry>> {
        self.read().by_source.get(source).cloned()
    }

    /// Every card entry (for listings and tests).
    pub fn entries(&self) -> Vec<Arc<CardEntry>> {
        self.read().by_source.values().cloned().collect()
    }

    /// The number of cards.
    pub fn len(&self) -> usize {
        self.read().by_source.len()
    }

    /// Whether the index holds no card.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Mark the first full sync done.
    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Release);
        self.synced.notify_waiters();
    }

    /// Return once the first full sync is done (at once if it is).
    pub async fn wait_ready(&self) {
        loop {
            // Registered before the check, so a sync finishing in between still wakes it.
            let synced = self.synced.notified();
            tokio::pin!(synced);
            synced.as_mut().enable();
            if self.is_ready() {
                return;
            }
            synced.await;
        }
    }

    /// Whether the first full sync is done.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The did:web document of `host`: its ES256 signing keys, from the JWKS, with the JWKS's
    /// caching headers; `None` when no ES256 key is published.
    pub fn did(&self, host: &str) -> Option<Published> {
        let jwks = self.jwks()?;
        let keys = crate::a2a::Jwks::from_slice(&jwks.body).ok()?;
        let doc = crate::a2a::did::did_document(host, &keys)?;
        let body = serde_json::to_vec(&doc).ok()?;
        let mut published = Published::new(body, jwks.last_modified, 0);
        published.cache_control = jwks.cache_control.clone();
        Some(published)
    }

    /// Resolve a request for `host` (lower case, no port) and `path`.
    pub fn lookup(&self, host: &str, path: &str) -> Option<Hit> {
        if path == PATH_DID {
            // At the root of every host that serves a card.
            let serves = self.read().by_host.contains_key(host);
            return serves
                .then(|| self.did(host))
                .flatten()
                .map(|d| Hit::Did(Arc::new(d)));
        }
        let st = self.read();
        let entries = st.by_host.get(host).or_else(|| {
            let fallback = self.fallback_host.as_deref()?;
            st.by_host.get(fallback)
        })?;
        for e in entries {
            if let Some(x) = e.extended.as_ref().filter(|x| x.path == path) {
                return Some(Hit::Extended(x.clone()));
            }
            let Some(rest) = path.strip_prefix(e.prefix.as_str()) else {
                continue;
            };
            if rest == PATH_CARD || (e.legacy && rest == PATH_LEGACY) {
                return Some(Hit::Card(e.content.clone()));
            }
            if rest == PATH_JWKS {
                return st.jwks.clone().map(Hit::Jwks);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(
        source: &str,
        host: &str,
        prefix: &str,
        legacy: bool,
        created: u64,
        body: &str,
    ) -> CardEntry {
        CardEntry {
            source: source.into(),
            host: host.into(),
            prefix: prefix.into(),
            legacy,
            created: UNIX_EPOCH + Duration::from_secs(created),
            content: Arc::new(Published::new(body.to_string(), UNIX_EPOCH, 300)),
            extended: None,
        }
    }

    fn body(hit: Option<Hit>) -> Option<String> {
        match hit? {
            Hit::Card(p) | Hit::Jwks(p) | Hit::Did(p) => {
                Some(String::from_utf8_lossy(&p.body).into_owned())
            }
            Hit::Extended(x) => Some(format!("extended {}", x.path)),
        }
    }

    #[tokio::test]
    async fn waiting_for_the_first_sync_ends_when_it_is_done() {
        let index = Arc::new(Index::new());
        let waiter = tokio::spawn({
            let index = index.clone();
            async move { index.wait_ready().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "not ready before the first sync");
        index.mark_ready();
        waiter.await.unwrap();
        // Once ready, at once.
        index.wait_ready().await;
    }

    #[test]
    fn routes_by_host_prefix_and_legacy_flag() {
        let idx = Index::new();
        idx.upsert(entry("a/root", "h.example", "", false, 1, "root"));
        idx.upsert(entry("a/team", "h.example", "/team", true, 1, "team"));
        idx.set_jwks(Some(Published::new("jwks", UNIX_EPOCH, 300)));
        assert_eq!(
            body(idx.lookup("h.example", "/.well-known/agent-card.json")).as_deref(),
            Some("root")
        );
        assert_eq!(
            body(idx.lookup("h.example", "/team/.well-known/agent-card.json")).as_deref(),
            Some("team")
        );
        assert_eq!(
            body(idx.lookup("h.example", "/team/.well-known/agent.json")).as_deref(),
            Some("team")
        );
        assert_eq!(
            body(idx.lookup("h.example", "/.well-known/agent.json")),
            None
        );
        assert_eq!(
            body(idx.lookup("h.example", "/.well-known/jwks.json")).as_deref(),
            Some("jwks")
        );
        assert_eq!(
            body(idx.lookup("other.example", "/.well-known/jwks.json")),
            None
        );
        idx.remove("a/team");
        assert_eq!(
            body(idx.lookup("h.example", "/team/.well-known/agent-card.json")),
            None
        );
    }

    #[test]
    fn a_fallback_host_answers_hosts_without_cards_of_their_own() {
        let idx = Index::with_fallback_host("Agent.Example");
        idx.upsert(entry("agent", "agent.example", "", false, 1, "agent"));
        idx.upsert(entry("other", "other.example", "", false, 1, "other"));
        let card = "/.well-known/agent-card.json";
        assert_eq!(
            body(idx.lookup("198.51.100.7", card)).as_deref(),
            Some("agent")
        );
        assert_eq!(
            body(idx.lookup("echo.team.svc", card)).as_deref(),
            Some("agent")
        );
        assert_eq!(
            body(idx.lookup("other.example", card)).as_deref(),
            Some("other")
        );
        assert_eq!(body(idx.lookup("198.51.100.7", "/a2a")), None);
        idx.remove("agent");
        assert_eq!(body(idx.lookup("198.51.100.7", card)), None);
        assert_eq!(
            body(Index::new().lookup("198.51.100.7", card)),
            None,
            "no fallback unless asked"
        );
    }

    #[test]
    fn the_older_claim_on_a_host_and_prefix_wins() {
        let idx = Index::new();
        idx.upsert(entry("b/new", "h.example", "", false, 20, "new"));
        idx.upsert(entry("a/old", "h.example", "", false, 10, "old"));
        assert_eq!(
            body(idx.lookup("h.example", "/.well-known/agent-card.json")).as_deref(),
            Some("old")
        );
        idx.remove("a/old");
        assert_eq!(
            body(idx.lookup("h.example", "/.well-known/agent-card.json")).as_deref(),
            Some("new")
        );
    }

    #[test]
    fn moving_a_card_to_another_host_leaves_nothing_behind() {
        let idx = Index::new();
        idx.upsert(entry("a/x", "one.example", "", false, 1, "x"));
        idx.upsert(entry("a/x", "two.example", "", false, 1, "x"));
        assert!(idx
            .lookup("one.example", "/.well-known/agent-card.json")
            .is_none());
        assert!(idx
            .lookup("two.example", "/.well-known/agent-card.json")
            .is_some());
    }

    #[test]
    fn etags_depend_only_on_bytes_and_gzip_is_computed_once() {
        let a = Published::new("x".repeat(1000), UNIX_EPOCH, 300);
        let b = Published::new("x".repeat(1000), SystemTime::now(), 60);
        assert_eq!(a.etag, b.etag);
        assert_eq!(a.hash(), content_hash("x".repeat(1000).as_bytes()));
        assert!(a.gzip.get().is_none(), "gzip waits for its first request");
        // The gzip tag is known before the gzip body is made (a client may hold it from
        // another replica); nothing else is ours.
        let gz_tag = format!("\"{}-gz\"", a.hash());
        assert!(a.has_tag(&gz_tag) && a.has_tag(&format!("\"{}\"", a.hash())));
        for other in [
            "\"\"",
            "\"-gz\"",
            a.hash(),
            "\"x-gz\"",
            &gz_tag[..gz_tag.len() - 1],
        ] {
            assert!(!a.has_tag(other), "{other} is not ours");
        }
        let z = a.gzip().map(|z| (z.body.clone(), z.etag.clone()));
        assert!(z.as_ref().is_some_and(|(z, _)| z.len() < 1000));
        assert_eq!(
            z.as_ref().map(|(_, t)| t.to_str().unwrap_or_default()),
            Some(&*gz_tag)
        );
        // The same bytes (one allocation) to every later request.
        assert_eq!(
            a.gzip().map(|g| g.body.as_ptr()),
            z.as_ref().map(|(g, _)| g.as_ptr())
        );
        let tiny = Published::new("{}", UNIX_EPOCH, 60);
        assert!(tiny.gzip().is_none(), "no gzip when it is not smaller");
        assert_eq!(b.cache_control, "public, max-age=60");
        assert_eq!(a.last_modified_header(), "Thu, 01 Jan 1970 00:00:00 GMT");
        // One Cache-Control value per policy, shared by every document that has it.
        assert_eq!(
            tiny.cache_control.as_bytes().as_ptr(),
            b.cache_control.as_bytes().as_ptr()
        );
        assert_eq!(
            Published::new("{}", UNIX_EPOCH, 60)
                .private(60)
                .cache_control,
            "private, max-age=60"
        );
    }
}
