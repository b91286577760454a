//! Federation on every replica: each directory's upstreams (`spec.upstreams`) read on their
//! refresh period, into the process's [`Federation`].
//!
//! Data flow: [`spawn`] watches the AgentDirectories and keeps one sync task per directory
//! and upstream (restarted when its spec changes). A task reads its upstream —
//! `kind: AgentDirectory` by following the upstream directory's change feed from its cursor
//! (nothing changed costs one request), `kind: ARD` by paging `GET /agents` (the first page
//! asked with `If-None-Match`: nothing changed costs one request), each card inline or from its
//! URL on the upstream's own origin — and turns each card into an entry with its
//! [`Origin`], refusing what is not a card, too large, signed by no trusted key, read back
//! from this directory itself, or past `maxEntries`. It then hands the entries that pass the
//! `include` filters to the [`Federation`] (which wakes the site rebuild). An upstream that
//! cannot be read, or answers garbage, changes nothing listed: its last good entries stay for
//! `keepSeconds`, and the status says why.
//!
//! Safety: requests go only to the URLs the AgentDirectory names (a cluster-scoped object,
//! written by cluster admins) and, for ARD cards, to URLs on the same origin; redirects to
//! another origin are refused; every response is read within a size limit and a timeout.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use kube::ResourceExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::a2a::jws::verify_card;
use crate::a2a::{AgentCard as A2aCard, Jwks};
use crate::contract::content_hash;
use crate::crd::agentdirectory::{Upstream, UpstreamKind};
use crate::crd::{AgentDirectory, LifecycleState, ServedLifecycle};
use crate::directory::ard::TYPE_A2A;
use crate::directory::entry::{Entry, Placement};
use crate::directory::federation::{Federation, Origin, Synced};
use crate::directory::feed::card_of;
use crate::directory::native;
use crate::directory::query::Catalog;
use crate::hub::Hubs;
use crate::process::AbortOnDrop;

/// Most bytes of one response (a feed page, an ARD page, a JWKS).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Most bytes of one card.
pub const MAX_CARD_BYTES: usize = 256 * 1024;
/// Time for one request.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Changes asked for per feed page.
const FEED_PAGE: usize = 1000;
/// Most pages read in one refresh.
const MAX_PAGES: usize = 1000;

/// Start syncing every directory's upstreams; stops when the handle is dropped. `secrets`
/// reads trusted JWKS Secrets (the operator's namespace).
pub fn spawn(
    hubs: Arc<Hubs>,
    federation: Arc<Federation>,
    secrets: kube::Api<k8s_openapi::api::core::v1::Secret>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(manage(hubs, federation, secrets)))
}

/// The identifier a directory's entries carry in other directories' `via` (its registry's
/// own identifier, as its manifest says).
pub fn registry_identifier(host: &str, name: &str) -> String {
    format!("urn:air:{host}:agentcard-operator:{name}")
}

fn own_identifier(d: &AgentDirectory) -> String {
    let host = d
        .status
        .as_ref()
        .and_then(|s| s.served.as_ref())
        .map_or_else(
            || d.spec.publish.host.to_ascii_lowercase(),
            |r| r.host.clone(),
        );
    registry_identifier(&host, &d.name_any())
}

/// One sync task per directory and upstream, in step with the AgentDirectories.
async fn manage(
    hubs: Arc<Hubs>,
    federation: Arc<Federation>,
    secrets: kube::Api<k8s_openapi::api::core::v1::Secret>,
) {
    let mut events = hubs.directories.subscribe();
    let store = hubs.directories.store();
    let mut running: HashMap<(String, String), (String, AbortOnDrop)> = HashMap::new();
    loop {
        let mut want: HashMap<(String, String), (String, Upstream, String)> = HashMap::new();
        let mut dirs = HashSet::new();
        for d in store.state() {
            if d.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = d.name_any();
            let own = own_identifier(&d);
            let names: HashSet<String> = d.spec.upstreams.iter().map(|u| u.name.clone()).collect();
            federation.retain(&name, &names);
            dirs.insert(name.clone());
            for u in &d.spec.upstreams {
                let digest = serde_json::to_string(&(u, &own)).unwrap_or_default();
                want.insert(
                    (name.clone(), u.name.clone()),
                    (digest, u.clone(), own.clone()),
                );
            }
        }
        federation.retain_directories(&dirs);
        running.retain(|k, (digest, _)| want.get(k).is_some_and(|w| &w.0 == digest));
        for (key, (digest, up, own)) in want {
            if running.contains_key(&key) {
                continue;
            }
            let reader = Reader::new(up, own).with_secrets(secrets.clone());
            let task = tokio::spawn(sync(federation.clone(), key.0.clone(), reader));
            running.insert(key, (digest, AbortOnDrop(task)));
        }
        if events.next().await.is_none() {
            return;
        }
    }
}

/// What an upstream's spec lets its clients connect to: its address ranges (`allowAddresses`)
/// and whether plain HTTP is accepted (`allowHttp`). Wrong ranges are an error naming them.
fn net_policy(up: &Upstream) -> Result<crate::net::Allowed, String> {
    up.allow_addresses
        .iter()
        .enumerate()
        .map(|(i, c)| {
            c.trim()
                .parse::<ipnet::IpNet>()
                .map_err(|_| format!("allowAddresses[{i}]: {c:?} is not a CIDR range"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(crate::net::Allowed)
}

/// Whether `url` may be read for `up`: `https://` (or `http://` with `allowHttp`), and a host
/// that is a name (checked as it resolves, by the client's resolver) or an address `allowed`
/// permits (an address is connected to without resolving).
fn check_url(up: &Upstream, allowed: &crate::net::Allowed, url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("{}: {e}", cut(url)))?;
    match parsed.scheme() {
        "https" => {}
        "http" if up.allow_http => {}
        "http" => {
            return Err(format!(
                "{}: http:// is accepted only with allowHttp: true",
                cut(url)
            ))
        }
        other => return Err(format!("{}: scheme {other} is not http(s)", cut(url))),
    }
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(a)) => Some(std::net::IpAddr::V4(a)),
        Some(url::Host::Ipv6(a)) => Some(std::net::IpAddr::V6(a)),
        Some(url::Host::Domain(_)) => None,
        None => return Err(format!("{}: no host", cut(url))),
    };
    if let Some(ip) = ip.filter(|ip| !allowed.permits(*ip)) {
        return Err(format!(
            "{}: {ip} is not an address this directory may connect to; name its range in \
             allowAddresses to reach it",
            cut(url)
        ));
    }
    Ok(())
}

/// Most bytes of an upstream's text (an error, a URL, an identifier) kept in status and logs.
pub const MAX_TEXT: usize = 1024;

/// `text` cut to [`MAX_TEXT`] bytes (on a character boundary), marked when cut.
pub fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_TEXT {
        return text.into();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}

/// An HTTP client for `base`: timeouts, no proxy, redirects only within its origin, and a
/// resolver that connects only to the addresses `allowed` permits.
fn client(base: &url::Url, allowed: crate::net::Allowed) -> Result<reqwest::Client, String> {
    let origin = base.origin();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > 5 {
            attempt.error("more than 5 redirects")
        } else if attempt.url().origin() != origin {
            let to = attempt.url().to_string();
            attempt.error(format!(
                "a redirect to another origin ({to}) is not followed"
            ))
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .dns_resolver(crate::net::guard(allowed))
        .redirect(policy)
        .timeout(TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .map_err(|e| format!("building the HTTP client: {e}"))
}

/// An error and its causes, one line (reqwest's own text leaves the cause out).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// An answer read within [`MAX_RESPONSE_BYTES`]: `None` for 304.
struct Got {
    status: u16,
    etag: Option<String>,
    body: Bytes,
}

async fn get(
    http: &reqwest::Client,
    url: &str,
    etag: Option<&str>,
    max: usize,
) -> Result<Got, String> {
    let mut req = http
        .get(url)
        .header(http::header::ACCEPT, "application/json");
    if let Some(tag) = etag {
        req = req.header(http::header::IF_NONE_MATCH, tag);
    }
    let mut resp = req
        .send()
        .await
        .map_err(|e| format!("{url}: {}", chain(&e)))?;
    let status = resp.status().as_u16();
    let tag = resp
        .headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(format!("{url}: the answer is larger than {max} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("{url}: {}", chain(&e)))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > max {
            return Err(format!("{url}: the answer is larger than {max} bytes"));
        }
    }
    Ok(Got {
        status,
        etag: tag,
        body: Bytes::from(body),
    })
}

/// Most bytes of an identifier taken from an upstream.
pub const MAX_IDENTIFIER: usize = 512;

/// Whether `id` is an ARD identifier ([`crate::directory::ard::is_identifier`], the
/// `urn:ai:` alias taken for `urn:air:`) of at most [`MAX_IDENTIFIER`] bytes: what else an
/// upstream sends is neither kept nor logged whole.
pub fn valid_identifier(id: &str) -> bool {
    use crate::directory::ard::{canonical_identifier, is_identifier};
    id.len() <= MAX_IDENTIFIER && is_identifier(&canonical_identifier(id))
}

/// One entry read from an upstream, or why it is refused.
#[derive(Clone)]
enum Read {
    Entry(Arc<Entry>),
    Refused(String),
}

/// What a sync task keeps between refreshes.
#[derive(Default)]
struct State {
    /// The upstream's entries, by identifier.
    items: BTreeMap<String, Read>,
    /// Feed cursor (`kind: AgentDirectory`).
    cursor: Option<String>,
    /// ETag of the first ARD page, and of each card URL with its bytes.
    first_page: Option<String>,
    cards: HashMap<String, (String, Bytes)>,
    /// The trusted keys and their ETag.
    jwks: Option<(Option<String>, Arc<Jwks>)>,
    /// The upstream's base URL and the client for it, built at the first refresh (its
    /// connections are reused by the next ones).
    http: Option<(url::Url, reqwest::Client)>,
    /// Entries of the last read not kept (past `maxEntries`, or with an identifier that is
    /// none), and why the first was not.
    dropped: usize,
    first_dropped: Option<String>,
}

impl State {
    /// Whether `items` (the set being read) may take an entry of identifier `id`: a valid
    /// identifier, and room under `max` (one already held is always replaced). Counts and
    /// says why when not.
    fn admits(
        dropped: &mut (usize, Option<String>),
        items: &BTreeMap<String, Read>,
        id: &str,
        max: usize,
    ) -> bool {
        let why = if !valid_identifier(id) {
            format!(
                "{}: not an ARD identifier (urn:air:..., at most {MAX_IDENTIFIER} bytes)",
                cut(id)
            )
        } else if items.len() >= max && !items.contains_key(id) {
            format!("{id}: past maxEntries ({max}): not kept")
        } else {
            return true;
        };
        dropped.0 += 1;
        dropped.1.get_or_insert(why);
        false
    }
}

/// The most entries kept of `up` (`maxEntries`, default 10,000).
fn max_entries(up: &Upstream) -> usize {
    usize::try_from(up.max_entries.unwrap_or(10_000)).unwrap_or(10_000)
}

/// One upstream's reader: what it keeps between refreshes.
pub struct Reader {
    up: Upstream,
    own: String,
    state: State,
    secrets: Option<kube::Api<k8s_openapi::api::core::v1::Secret>>,
}

impl Reader {
    /// A reader of `up` for the directory whose registry identifier is `own`.
    pub fn new(up: Upstream, own: String) -> Reader {
        Reader {
            up,
            own,
            state: State::default(),
            secrets: None,
        }
    }

    /// Read `trust.jwks` Secrets with `secrets`.
    pub fn with_secrets(mut self, secrets: kube::Api<k8s_openapi::api::core::v1::Secret>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Read what changed upstream; the entries to list, how many were refused, the first
    /// refusal.
    pub async fn refresh(&mut self) -> Result<(Vec<Arc<Entry>>, usize, Option<String>), String> {
        if let Some(r) = &self.up.trust.jwks {
            self.state.jwks = Some((None, Arc::new(secret_jwks(self.secrets.as_ref(), r).await?)));
        }
        refresh_once(&self.up, &self.own, &mut self.state).await?;
        Ok(select(&self.up, &self.state))
    }
}

/// Keep `dir`'s upstream `up` synced into `fed` until aborted.
async fn sync(fed: Arc<Federation>, dir: String, mut reader: Reader) {
    let up = &reader.up;
    let refresh =
        Duration::from_secs(u64::try_from(up.refresh_seconds.unwrap_or(60)).unwrap_or(60));
    let keep =
        Duration::from_secs(u64::try_from(up.keep_seconds.unwrap_or(86_400)).unwrap_or(86_400));
    let name = up.name.clone();
    let mut failures = 0u32;
    loop {
        let result = reader.refresh().await;
        let mut synced = fed.synced(&dir, &name).unwrap_or_default();
        match result {
            Ok((entries, refused, first)) => {
                synced = Synced {
                    entries: Arc::new(entries),
                    refused,
                    first_refusal: first,
                    last_sync: Some(jiff::Timestamp::now().to_string()),
                    last_ok: Some(Instant::now()),
                    reachable: true,
                    error: None,
                };
                failures = 0;
            }
            Err(e) => {
                let e = cut(&e).into_owned();
                tracing::warn!(directory = %dir, upstream = %name, error = %e, "upstream not read");
                synced.reachable = false;
                synced.error = Some(e);
                if synced.last_ok.is_none_or(|t| t.elapsed() > keep) {
                    synced.entries = Arc::default();
                }
                failures = failures.saturating_add(1);
            }
        }
        fed.set(&dir, &name, synced);
        let wait = match failures {
            0 => refresh,
            n => refresh.min(Duration::from_secs(1u64 << n.min(5))),
        };
        tokio::time::sleep(wait).await;
    }
}

/// The JWKS of a `trust.jwks` Secret.
async fn secret_jwks(
    secrets: Option<&kube::Api<k8s_openapi::api::core::v1::Secret>>,
    r: &crate::crd::agentdirectory::SecretKeyRef,
) -> Result<Jwks, String> {
    let api = secrets.ok_or("trust.jwks: this process cannot read Secrets")?;
    let key = r.key.as_deref().unwrap_or("jwks.json");
    let secret = api
        .get(&r.name)
        .await
        .map_err(|e| format!("trust.jwks: reading Secret {}: {e}", r.name))?;
    let bytes = secret
        .data
        .and_then(|d| d.get(key).cloned())
        .ok_or_else(|| format!("trust.jwks: Secret {} has no key {key}", r.name))?;
    Jwks::from_slice(&bytes.0)
        .map_err(|e| format!("trust.jwks: Secret {}/{key}: not a JWKS: {e}", r.name))
}

async fn refresh_once(up: &Upstream, own: &str, state: &mut State) -> Result<(), String> {
    let allowed = net_policy(up)?;
    check_url(up, &allowed, &up.url).map_err(|e| format!("url: {e}"))?;
    if let Some(jwks_url) = &up.trust.jwks_url {
        check_url(up, &allowed, jwks_url).map_err(|e| format!("trust.jwksUrl: {e}"))?;
    }
    let (base, http) = match &state.http {
        Some(built) => built.clone(),
        None => {
            let base = url::Url::parse(&up.url).map_err(|e| format!("url: {e}"))?;
            let built = (base.clone(), client(&base, allowed.clone())?);
            state.http = Some(built.clone());
            built
        }
    };
    if let Some(jwks_url) = &up.trust.jwks_url {
        let held = state.jwks.as_ref().and_then(|(tag, _)| tag.clone());
        let got = get(&http, jwks_url, held.as_deref(), MAX_RESPONSE_BYTES).await?;
        match got.status {
            304 if state.jwks.is_some() => {}
            200 => {
                let jwks = Jwks::from_slice(&got.body)
                    .map_err(|e| format!("{jwks_url}: not a JWKS: {e}"))?;
                state.jwks = Some((got.etag, Arc::new(jwks)));
            }
            s => return Err(format!("{jwks_url}: HTTP {s}")),
        }
    }
    match up.kind {
        UpstreamKind::AgentDirectory => read_feed(&http, up, own, state).await,
        UpstreamKind::Ard => read_ard(&http, &base, up, state).await,
    }
}

/// A change as an upstream directory's feed gives it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FeedChange {
    #[serde(rename = "type")]
    kind: String,
    identifier: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    card: Option<Box<RawValue>>,
    #[serde(default)]
    origin: Option<FeedOrigin>,
    #[serde(default)]
    reachable: Option<String>,
    #[serde(default)]
    lifecycle: Option<Value>,
}

/// What an upstream says of an entry besides its card: where the card is, when it changed,
/// whether its agent is reachable, its lifecycle (shown as the upstream says, with its origin).
#[derive(Default)]
struct Said {
    url: Option<String>,
    updated_at: Option<String>,
    reachable: Option<bool>,
    lifecycle: Option<Box<ServedLifecycle>>,
}

/// `"true"` / `"false"` (anything else: not known).
fn reachable_of(v: Option<&str>) -> Option<bool> {
    match v {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    }
}

/// A deprecated or retired lifecycle as the native API and the feed write it.
fn lifecycle_of(v: Option<&Value>) -> Option<Box<ServedLifecycle>> {
    let l: ServedLifecycle = serde_json::from_value(v?.clone()).ok()?;
    (l.state != LifecycleState::Active).then(|| Box::new(l))
}

/// The same from an ARD entry's flattened `metadata` (`lifecycle`, `lifecycleSince`, ...).
fn ard_lifecycle(meta: &serde_json::Map<String, Value>) -> Option<Box<ServedLifecycle>> {
    let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
    let l = json!({"state": text("lifecycle")?, "since": text("lifecycleSince").unwrap_or_default(),
        "message": text("lifecycleMessage"), "sunset": text("sunset"), "successor": text("successor"),
        "successorUrl": text("successorUrl"), "goneUntil": text("goneUntil")});
    lifecycle_of(Some(&l))
}

#[derive(Deserialize)]
struct FeedOrigin {
    #[serde(default)]
    via: Vec<String>,
}

#[derive(Deserialize)]
struct FeedPage {
    changes: Vec<FeedChange>,
    metadata: FeedMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FeedMeta {
    next_cursor: String,
    #[serde(default)]
    registry: Option<String>,
}

/// Follow the upstream directory's change feed from the cursor until a page is empty; from
/// the start again (into a fresh set) when the cursor expired.
async fn read_feed(
    http: &reqwest::Client,
    up: &Upstream,
    own: &str,
    state: &mut State,
) -> Result<(), String> {
    let base = up.url.trim_end_matches('/');
    let mut fresh: Option<BTreeMap<String, Read>> = None;
    for _ in 0..MAX_PAGES {
        let url = match &state.cursor {
            Some(c) => format!("{base}/v1/changes?limit={FEED_PAGE}&since={c}"),
            None => format!("{base}/v1/changes?limit={FEED_PAGE}"),
        };
        let got = get(http, &url, None, MAX_RESPONSE_BYTES).await?;
        if got.status == 410 && state.cursor.is_some() {
            // Expired: read everything again, and replace the set only once it is read.
            state.cursor = None;
            fresh = Some(BTreeMap::new());
            (state.dropped, state.first_dropped) = (0, None);
            continue;
        }
        if got.status != 200 {
            return Err(format!("{url}: HTTP {}", got.status));
        }
        let page: FeedPage = serde_json::from_slice(&got.body)
            .map_err(|e| format!("{url}: not a change feed page: {e}"))?;
        let items = fresh.as_mut().unwrap_or(&mut state.items);
        let mut dropped = (0, None);
        let registry = page
            .metadata
            .registry
            .clone()
            .unwrap_or_else(|| up.url.clone());
        let empty = page.changes.is_empty();
        for c in page.changes {
            match c.kind.as_str() {
                "delete" => {
                    items.remove(&c.identifier);
                }
                "upsert" if !State::admits(&mut dropped, items, &c.identifier, max_entries(up)) => {
                }
                "upsert" => {
                    let mut via = c.origin.map(|o| o.via).unwrap_or_default();
                    via.push(registry.clone());
                    let read = if via.iter().any(|v| v == own) {
                        Read::Refused(format!(
                            "{}: this directory's own entry, read back",
                            c.identifier
                        ))
                    } else {
                        let bytes = c.card.map(|r| Bytes::from(r.get().to_string()));
                        let said = Said {
                            url: c.url,
                            updated_at: c.updated_at,
                            reachable: reachable_of(c.reachable.as_deref()),
                            lifecycle: lifecycle_of(c.lifecycle.as_ref()),
                        };
                        entry_of(
                            up,
                            &c.identifier,
                            bytes,
                            (&c.namespace, &c.name),
                            (said, format!("{base}/v1/changes")),
                            via,
                            state.jwks.as_ref().map(|j| &*j.1),
                        )
                    };
                    items.insert(c.identifier, read);
                }
                _ => {}
            }
        }
        state.dropped += dropped.0;
        if state.first_dropped.is_none() {
            state.first_dropped = dropped.1;
        }
        state.cursor = Some(page.metadata.next_cursor);
        if empty {
            if let Some(set) = fresh {
                state.items = set;
            }
            return Ok(());
        }
    }
    if fresh.is_some() {
        // A re-read from the start that did not end: the next refresh starts it again (going
        // on from its cursor into the old set would miss the deletes it had passed).
        state.cursor = None;
    }
    Err(format!(
        "{base}: more than {MAX_PAGES} pages in one refresh"
    ))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArdPage {
    items: Vec<ArdEntry>,
    #[serde(default)]
    page_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArdEntry {
    identifier: String,
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    data: Option<Box<RawValue>>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    metadata: serde_json::Map<String, Value>,
}

impl ArdEntry {
    /// What the entry says besides its card, the card at `url`.
    fn said(&self, url: Option<String>) -> Said {
        Said {
            url,
            updated_at: self.updated_at.clone(),
            reachable: reachable_of(self.metadata.get("reachable").and_then(Value::as_str)),
            lifecycle: ard_lifecycle(&self.metadata),
        }
    }
}

/// Page the ARD registry's `GET /agents`; nothing when its first page is unchanged.
async fn read_ard(
    http: &reqwest::Client,
    base: &url::Url,
    up: &Upstream,
    state: &mut State,
) -> Result<(), String> {
    let root = up.url.trim_end_matches('/');
    let mut token: Option<String> = None;
    let mut items = BTreeMap::new();
    let mut dropped = (0, None);
    let mut listed_urls: HashSet<String> = HashSet::new();
    for page_no in 0..MAX_PAGES {
        let mut url = format!("{root}/agents?pageSize=100");
        if let Some(t) = &token {
            url.push_str("&pageToken=");
            url.push_str(&url::form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>());
        }
        let etag = if page_no == 0 {
            state.first_page.clone()
        } else {
            None
        };
        let got = get(http, &url, etag.as_deref(), MAX_RESPONSE_BYTES).await?;
        if got.status == 304 && page_no == 0 && etag.is_some() {
            return Ok(());
        }
        if got.status != 200 {
            return Err(format!("{url}: HTTP {}", got.status));
        }
        if page_no == 0 {
            state.first_page = got.etag.clone();
        }
        let page: ArdPage = serde_json::from_slice(&got.body)
            .map_err(|e| format!("{url}: not an ARD list response: {e}"))?;
        for e in page.items {
            if !State::admits(&mut dropped, &items, &e.identifier, max_entries(up)) {
                continue;
            }
            let read = ard_entry(http, (base, &url), up, &e, state).await;
            if let Some(u) = e.url.as_ref().filter(|_| e.data.is_none()) {
                listed_urls.insert(u.clone());
            }
            items.insert(e.identifier, read);
        }
        match page.page_token.filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t),
            None => {
                state.items = items;
                (state.dropped, state.first_dropped) = dropped;
                // Only the cards of what is listed keep their ETag and bytes.
                state.cards.retain(|u, _| listed_urls.contains(u));
                return Ok(());
            }
        }
    }
    Err(format!(
        "{root}: more than {MAX_PAGES} pages in one refresh"
    ))
}

/// One ARD entry: its card inline, or read from its URL on the upstream's origin.
async fn ard_entry(
    http: &reqwest::Client,
    (base, page_url): (&url::Url, &str),
    up: &Upstream,
    e: &ArdEntry,
    state: &mut State,
) -> Read {
    if e.kind != TYPE_A2A {
        return Read::Refused(format!(
            "{}: type {:?} is not an A2A Agent Card",
            e.identifier, e.kind
        ));
    }
    let (namespace, name) = card_of(&e.identifier);
    let via = vec![up.url.clone()];
    let jwks = state.jwks.as_ref().map(|j| j.1.clone());
    if let Some(data) = &e.data {
        let bytes = Bytes::from(data.get().to_string());
        return entry_of(
            up,
            &e.identifier,
            Some(bytes),
            (namespace, name),
            (e.said(None), page_url.to_string()),
            via,
            jwks.as_deref(),
        );
    }
    let Some(card_url) = &e.url else {
        return Read::Refused(format!("{}: neither url nor data", e.identifier));
    };
    let same_origin = url::Url::parse(card_url).is_ok_and(|u| u.origin() == base.origin());
    if !same_origin {
        return Read::Refused(format!(
            "{}: its card URL {card_url} is not on the upstream's origin",
            e.identifier
        ));
    }
    let held = state.cards.get(card_url).cloned();
    let got = get(
        http,
        card_url,
        held.as_ref().map(|h| h.0.as_str()),
        MAX_CARD_BYTES,
    )
    .await;
    let bytes = match got {
        Ok(g) if g.status == 304 && held.is_some() => held.map(|h| h.1),
        Ok(g) if g.status == 200 => {
            if let Some(tag) = g.etag.clone() {
                state.cards.insert(card_url.clone(), (tag, g.body.clone()));
            }
            Some(g.body)
        }
        Ok(g) => return Read::Refused(format!("{}: {card_url}: HTTP {}", e.identifier, g.status)),
        Err(why) => return Read::Refused(format!("{}: {why}", e.identifier)),
    };
    entry_of(
        up,
        &e.identifier,
        bytes,
        (namespace, name),
        (e.said(Some(card_url.clone())), card_url.clone()),
        via,
        jwks.as_deref(),
    )
}

/// The entry of a card read from `up` (`card`: its AgentCard's namespace and name), or why it
/// is refused: not a card, too large, or (with trusted keys) signed by none of them.
fn entry_of(
    up: &Upstream,
    identifier: &str,
    bytes: Option<Bytes>,
    (namespace, name): (&str, &str),
    (said, read_from): (Said, String),
    via: Vec<String>,
    jwks: Option<&Jwks>,
) -> Read {
    let Some(bytes) = bytes else {
        return Read::Refused(format!("{identifier}: the upsert carries no card"));
    };
    if bytes.len() > MAX_CARD_BYTES {
        return Read::Refused(format!(
            "{identifier}: the card is larger than {MAX_CARD_BYTES} bytes"
        ));
    }
    let card = match A2aCard::from_json_lenient(&bytes) {
        Ok(c) => c,
        Err(e) => return Read::Refused(format!("{identifier}: not an Agent Card: {e}")),
    };
    // A card, as an import takes one: read as v1.0 (a v0.3 card converted), then validated.
    // (Every field of the lenient form has a default: any JSON object would do otherwise.)
    let checked = serde_json::from_slice::<Value>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|v| crate::a2a::import::import(&v).map_err(|p| p.to_string()))
        .and_then(
            |imported| match crate::a2a::validate::validate(&imported.card).first() {
                None => Ok(()),
                Some(p) => Err(format!("{}: {}", p.path, p.message)),
            },
        );
    if let Err(why) = checked {
        return Read::Refused(format!("{identifier}: not an Agent Card: {}", cut(&why)));
    }
    let verified = match jwks {
        Some(jwks) => match verify_card(&card, jwks) {
            Ok(_) => true,
            Err(e) => {
                let keys = up.trust.jwks_url.clone().unwrap_or_else(|| {
                    let name = up.trust.jwks.as_ref().map_or("", |r| r.name.as_str());
                    format!("Secret {name}")
                });
                return Read::Refused(format!(
                    "{identifier}: no signature verifies with the trusted keys ({keys}): {e}"
                ));
            }
        },
        None => false,
    };
    let host = identifier.split(':').nth(2).unwrap_or_default().to_string();
    let card_url = said.url.unwrap_or_else(|| read_from.clone());
    let placement = Placement {
        namespace: namespace.to_string(),
        name: name.to_string(),
        host,
        url: card_url.clone(),
        content_hash: content_hash(&bytes),
        key_id: String::new(),
        updated_at: said.updated_at.unwrap_or_default(),
        reachable: said.reachable,
        lifecycle: said.lifecycle,
    };
    let Some(entry) = Entry::build(placement, bytes) else {
        return Read::Refused(format!("{identifier}: not a JSON object"));
    };
    // Where the operator read the card, not where the upstream says it is.
    let origin = Origin {
        upstream: up.name.clone(),
        url: read_from,
        fetched_at: jiff::Timestamp::now().to_string(),
        verified,
        via,
    };
    Read::Entry(Arc::new(
        entry
            .with_identifier(identifier.to_string())
            .with_origin(origin),
    ))
}

/// The entries to list (those the `include` filters select, the first `maxEntries` by
/// identifier), how many were refused, and the first refusal.
fn select(up: &Upstream, state: &State) -> (Vec<Arc<Entry>>, usize, Option<String>) {
    let mut refused = state.dropped;
    let mut first = state.first_dropped.clone();
    let mut entries = Vec::new();
    for read in state.items.values() {
        match read {
            Read::Entry(e) => entries.push(e.clone()),
            Read::Refused(why) => {
                refused += 1;
                first.get_or_insert_with(|| cut(why).into_owned());
            }
        }
    }
    if !up.include.is_empty() {
        match native::request(&up.include, false) {
            Ok(r) => {
                let catalog = Catalog::build(entries);
                entries = catalog.list(&r.query, None, None, usize::MAX).items;
            }
            Err(e) => {
                return (Vec::new(), refused, Some(format!("include: {}", e.message)));
            }
        }
    }
    let max = max_entries(up);
    if entries.len() > max {
        refused += entries.len() - max;
        first.get_or_insert_with(|| {
            format!("{} entries past maxEntries ({max})", entries.len() - max)
        });
        entries.truncate(max);
    }
    (entries, refused, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_upstream_says_of_reachability_and_lifecycle_is_kept() {
        assert_eq!(reachable_of(Some("true")), Some(true));
        assert_eq!(reachable_of(Some("false")), Some(false));
        assert_eq!(reachable_of(Some("unknown")), None);
        let native = json!({"state": "Retired", "since": "2026-12-01T00:00:00Z",
            "successor": "urn:air:b.example:x:b", "goneUntil": "2026-12-31T00:00:00Z"});
        let l = lifecycle_of(Some(&native)).unwrap();
        assert_eq!(l.state, LifecycleState::Retired);
        assert_eq!(l.gone_until.as_deref(), Some("2026-12-31T00:00:00Z"));
        assert!(lifecycle_of(Some(&json!({"state": "Active"}))).is_none());
        assert!(lifecycle_of(Some(&json!({"state": "Sideways"}))).is_none());
        let meta = json!({"lifecycle": "Deprecated", "lifecycleSince": "2026-11-01T00:00:00Z",
            "lifecycleMessage": "use b", "successor": "urn:air:b.example:x:b"});
        let l = ard_lifecycle(meta.as_object().unwrap()).unwrap();
        assert_eq!(l.state, LifecycleState::Deprecated);
        assert_eq!(l.message.as_deref(), Some("use b"));
        assert!(ard_lifecycle(json!({"lifecycle": "Active"}).as_object().unwrap()).is_none());
    }

    fn read(name: &str, tag: &str) -> Read {
        let body = format!(
            r#"{{"name":"{name}","description":"d","skills":[{{"id":"s","name":"S","tags":["{tag}"]}}]}}"#
        );
        let placement = Placement {
            namespace: "t".into(),
            name: name.into(),
            host: format!("{name}.example"),
            ..Placement::default()
        };
        Read::Entry(Arc::new(
            Entry::build(placement, Bytes::from(body)).unwrap(),
        ))
    }

    fn upstream(include: &[(&str, &str)], max: Option<i64>) -> Upstream {
        Upstream {
            name: "u".into(),
            url: "http://u.example".into(),
            include: crate::directory::tests::params(include),
            max_entries: max,
            ..Upstream::default()
        }
    }

    #[test]
    fn include_filters_then_max_entries_then_refusals_are_counted() {
        let mut state = State::default();
        for (name, tag) in [
            ("a", "public"),
            ("b", "internal"),
            ("c", "public"),
            ("d", "public"),
        ] {
            state
                .items
                .insert(format!("urn:air:{name}.example:t:{name}"), read(name, tag));
        }
        state.items.insert(
            "urn:air:x:t:x".into(),
            Read::Refused("x: not an Agent Card".into()),
        );
        let names = |v: &[Arc<Entry>]| {
            v.iter()
                .map(|e| e.placement.name.clone())
                .collect::<Vec<_>>()
        };
        let (all, refused, first) = select(&upstream(&[], None), &state);
        assert_eq!(names(&all), ["a", "b", "c", "d"]);
        assert_eq!(
            (refused, first.as_deref()),
            (1, Some("x: not an Agent Card"))
        );
        let (public, _, _) = select(&upstream(&[("tag", "public")], None), &state);
        assert_eq!(names(&public), ["a", "c", "d"]);
        let (two, refused, _) = select(&upstream(&[("tag", "public")], Some(2)), &state);
        assert_eq!(names(&two), ["a", "c"]);
        assert_eq!(refused, 2, "the refused card and one past maxEntries");
        let (none, _, why) = select(&upstream(&[("colour", "red")], None), &state);
        assert!(none.is_empty() && why.unwrap().starts_with("include: colour"));
    }
}
