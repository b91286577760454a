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
use crate::directory::query::{Catalog, Query};
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
/// reads trusted JWKS Secrets (the operator's namespace); `client` reads the API server's
/// addresses, which no upstream may make the operator connect to.
pub fn spawn(
    hubs: Arc<Hubs>,
    federation: Arc<Federation>,
    secrets: kube::Api<k8s_openapi::api::core::v1::Secret>,
    client: kube::Client,
) -> AbortOnDrop {
    let api_server = Arc::new(crate::net::ApiServer::new(client));
    AbortOnDrop(tokio::spawn(manage(hubs, federation, secrets, api_server)))
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
    api_server: Arc<crate::net::ApiServer>,
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
            let reader = Reader::new(up, own)
                .with_secrets(secrets.clone())
                .refusing(api_server.clone());
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
fn net_policy(
    up: &Upstream,
    api_server: Arc<Vec<std::net::IpAddr>>,
) -> Result<crate::net::Allowed, String> {
    up.allow_addresses
        .iter()
        .enumerate()
        .map(|(i, c)| {
            c.trim()
                .parse::<ipnet::IpNet>()
                .map_err(|_| format!("allowAddresses[{i}]: {c:?} is not a CIDR range"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|ranges| crate::net::Allowed { ranges, api_server })
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
    if let Some(ip) = ip.filter(|ip| allowed.is_api_server(*ip)) {
        return Err(format!(
            "{}: {ip} is the Kubernetes API server's address; only an allowAddresses entry \
             naming it alone ({ip}/32 or /128) lets a directory connect to it",
            cut(url)
        ));
    }
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
    /// What the last read made of the upstream's entries.
    held: Held,
    /// Feed cursor (`kind: AgentDirectory`).
    cursor: Option<String>,
    /// ETag of the first ARD page, and of each listed card's URL with its bytes.
    first_page: Option<String>,
    cards: HashMap<String, (String, Bytes)>,
    /// The trusted keys and their ETag.
    jwks: Option<(Option<String>, Arc<Jwks>)>,
    /// The upstream's base URL and the client for it, built at the first refresh (its
    /// connections are reused by the next ones), and the cluster addresses it was built to
    /// refuse.
    http: Option<(url::Url, reqwest::Client, Arc<Vec<std::net::IpAddr>>)>,
}

/// One upstream's entries as read, bounded by `maxEntries` (`max`): at most `max` listed (only
/// those the `include` filters select, so entries it leaves out take no room), and at most
/// `max` refusals remembered with why (cut); refusals past that are only counted. An entry
/// `include` leaves out is neither listed nor counted.
#[derive(Clone, Debug, Default)]
struct Held {
    listed: BTreeMap<String, Arc<Entry>>,
    refused: BTreeMap<String, String>,
    /// Refusals not remembered (past `max` of them), and why the first was.
    overflow: usize,
    first_overflow: Option<String>,
}

impl Held {
    /// Whether an entry of identifier `id` is worth reading: a valid identifier, and room
    /// (one already listed is always read again). Refuses it, saying why, when not.
    fn admits(&mut self, id: &str, max: usize) -> bool {
        let why = if !valid_identifier(id) {
            format!(
                "{}: not an ARD identifier (urn:air:..., at most {MAX_IDENTIFIER} bytes)",
                cut(id)
            )
        } else if self.listed.len() >= max && !self.listed.contains_key(id) {
            format!("{id}: past maxEntries ({max}): not kept")
        } else {
            return true;
        };
        self.refuse(id, &why, max);
        false
    }

    /// Take what was read of `id`: listed when `include` selects it and there is room,
    /// forgotten when `include` leaves it out, refused otherwise. `true` when listed.
    fn take(&mut self, id: &str, read: Read, include: Option<&Query>, max: usize) -> bool {
        match read {
            Read::Refused(why) => self.refuse(id, &why, max),
            Read::Entry(e) if include.is_some_and(|q| !selects(q, &e)) => self.remove(id),
            Read::Entry(e) if self.listed.len() < max || self.listed.contains_key(id) => {
                self.refused.remove(id);
                self.listed.insert(id.to_string(), e);
                return true;
            }
            Read::Entry(_) => {
                self.refuse(id, &format!("{id}: past maxEntries ({max}): not kept"), max)
            }
        }
        false
    }

    fn refuse(&mut self, id: &str, why: &str, max: usize) {
        self.listed.remove(id);
        let key = cut(id).into_owned();
        if self.refused.len() < max || self.refused.contains_key(&key) {
            self.refused.insert(key, cut(why).into_owned());
        } else {
            self.overflow += 1;
            self.first_overflow
                .get_or_insert_with(|| cut(why).into_owned());
        }
    }

    /// A delete: `id` is gone upstream.
    fn remove(&mut self, id: &str) {
        self.listed.remove(id);
        self.refused.remove(id);
    }

    /// The entries to list (by identifier), how many are refused, and the first refusal.
    fn selected(&self) -> (Vec<Arc<Entry>>, usize, Option<String>) {
        let first = self
            .refused
            .values()
            .next()
            .cloned()
            .or_else(|| self.first_overflow.clone());
        (
            self.listed.values().cloned().collect(),
            self.refused.len() + self.overflow,
            first,
        )
    }
}

/// Whether `include` selects `e`, asked of the entry alone (as the directory's own query
/// engine would answer it over a catalog of one).
fn selects(include: &Query, e: &Arc<Entry>) -> bool {
    Catalog::build(vec![e.clone()])
        .list(include, None, None, 1)
        .total
        == 1
}

/// The `include` filters of `up` as a query (`None`: everything), or why they are wrong.
fn include_of(up: &Upstream) -> Result<Option<Query>, String> {
    if up.include.is_empty() {
        return Ok(None);
    }
    native::request(&up.include, false)
        .map(|r| Some(r.query))
        .map_err(|e| format!("include: {}", e.message))
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
    api_server: Arc<crate::net::ApiServer>,
}

impl Reader {
    /// A reader of `up` for the directory whose registry identifier is `own`.
    pub fn new(up: Upstream, own: String) -> Reader {
        Reader {
            up,
            own,
            state: State::default(),
            secrets: None,
            api_server: Arc::default(),
        }
    }

    /// Never connect to the API server's addresses as `api_server` reads them.
    pub fn refusing(mut self, api_server: Arc<crate::net::ApiServer>) -> Self {
        self.api_server = api_server;
        self
    }

    /// Read `trust.jwks` Secrets with `secrets`.
    pub fn with_secrets(mut self, secrets: kube::Api<k8s_openapi::api::core::v1::Secret>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Read what changed upstream; the entries to list, how many were refused, the first
    /// refusal.
    pub async fn refresh(&mut self) -> Result<(Vec<Arc<Entry>>, usize, Option<String>), String> {
        let include = match include_of(&self.up) {
            Ok(q) => q,
            // Listing nothing until the filters are mended (what it would list is not known).
            Err(why) => return Ok((Vec::new(), 0, Some(why))),
        };
        if let Some(r) = &self.up.trust.jwks {
            self.state.jwks = Some((None, Arc::new(secret_jwks(self.secrets.as_ref(), r).await?)));
        }
        let api_server = self.api_server.addresses().await;
        let read = Refresh {
            up: &self.up,
            own: &self.own,
            include: include.as_ref(),
            max: max_entries(&self.up),
        };
        refresh_once(&read, api_server, &mut self.state).await?;
        Ok(self.state.held.selected())
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

/// What one refresh reads with: the upstream, this directory's registry identifier, the
/// `include` filters and `maxEntries`.
struct Refresh<'a> {
    up: &'a Upstream,
    own: &'a str,
    include: Option<&'a Query>,
    max: usize,
}

async fn refresh_once(
    r: &Refresh<'_>,
    api_server: Arc<Vec<std::net::IpAddr>>,
    state: &mut State,
) -> Result<(), String> {
    let up = r.up;
    let allowed = net_policy(up, api_server.clone())?;
    check_url(up, &allowed, &up.url).map_err(|e| format!("url: {e}"))?;
    if let Some(jwks_url) = &up.trust.jwks_url {
        check_url(up, &allowed, jwks_url).map_err(|e| format!("trust.jwksUrl: {e}"))?;
    }
    let (base, http) = match &state.http {
        // Built again when the API server's addresses changed.
        Some((base, http, refusing)) if *refusing == api_server => (base.clone(), http.clone()),
        _ => {
            let base = url::Url::parse(&up.url).map_err(|e| format!("url: {e}"))?;
            let http = client(&base, allowed.clone())?;
            state.http = Some((base.clone(), http.clone(), api_server));
            (base, http)
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
        UpstreamKind::AgentDirectory => read_feed(&http, r, state).await,
        UpstreamKind::Ard => read_ard(&http, &base, r, state).await,
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

/// An upstream's `origin` of an entry it federated itself: the registries it says the entry
/// passed through (`path`; older operators wrote it as `via`).
#[derive(Deserialize)]
struct FeedOrigin {
    #[serde(default)]
    via: Vec<String>,
    #[serde(default)]
    path: Option<Vec<String>>,
}

impl FeedOrigin {
    fn claimed(self) -> Vec<String> {
        self.path.unwrap_or(self.via)
    }
}

/// Most registries an entry's `path` may name (an entry that claims more is refused).
pub const MAX_PATH: usize = 16;

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
    r: &Refresh<'_>,
    state: &mut State,
) -> Result<(), String> {
    let up = r.up;
    let base = up.url.trim_end_matches('/');
    let mut fresh: Option<Held> = None;
    for _ in 0..MAX_PAGES {
        let url = match &state.cursor {
            Some(c) => format!("{base}/v1/changes?limit={FEED_PAGE}&since={c}"),
            None => format!("{base}/v1/changes?limit={FEED_PAGE}"),
        };
        let got = get(http, &url, None, MAX_RESPONSE_BYTES).await?;
        if got.status == 410 && state.cursor.is_some() {
            // Expired: read everything again, and replace the set only once it is read.
            state.cursor = None;
            fresh = Some(Held::default());
            continue;
        }
        if got.status != 200 {
            return Err(format!("{url}: HTTP {}", got.status));
        }
        let page: FeedPage = serde_json::from_slice(&got.body)
            .map_err(|e| format!("{url}: not a change feed page: {e}"))?;
        let held = fresh.as_mut().unwrap_or(&mut state.held);
        let registry = page
            .metadata
            .registry
            .clone()
            .unwrap_or_else(|| up.url.clone());
        let empty = page.changes.is_empty();
        for c in page.changes {
            match c.kind.as_str() {
                "delete" => held.remove(&cut(&c.identifier)),
                "upsert" if !held.admits(&c.identifier, r.max) => {}
                "upsert" => {
                    let mut path = c.origin.map(FeedOrigin::claimed).unwrap_or_default();
                    path.push(registry.clone());
                    let read =
                        if path.len() > MAX_PATH || path.iter().any(|p| p.len() > MAX_IDENTIFIER) {
                            Read::Refused(format!(
                                "{}: its origin names more than {MAX_PATH} registries, or one of \
                             more than {MAX_IDENTIFIER} bytes",
                                c.identifier
                            ))
                        } else if path.iter().any(|v| v == r.own) {
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
                                path,
                                state.jwks.as_ref().map(|j| &*j.1),
                            )
                        };
                    held.take(&c.identifier, read, r.include, r.max);
                }
                _ => {}
            }
        }
        state.cursor = Some(page.metadata.next_cursor);
        if empty {
            if let Some(set) = fresh {
                state.held = set;
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
    r: &Refresh<'_>,
    state: &mut State,
) -> Result<(), String> {
    let up = r.up;
    let root = up.url.trim_end_matches('/');
    let mut token: Option<String> = None;
    let mut held = Held::default();
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
            if !held.admits(&e.identifier, r.max) {
                continue;
            }
            let jwks = state.jwks.as_ref().map(|j| j.1.clone());
            let (read, fetched) =
                ard_entry(http, (base, &url), up, &e, (&state.cards, jwks.as_deref())).await;
            if !held.take(&e.identifier, read, r.include, r.max) {
                continue;
            }
            // Only what is listed keeps its card's ETag and bytes.
            if let Some(u) = e.url.as_ref().filter(|_| e.data.is_none()) {
                listed_urls.insert(u.clone());
                if let Some(got) = fetched {
                    state.cards.insert(u.clone(), got);
                }
            }
        }
        match page.page_token.filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t),
            None => {
                state.held = held;
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
/// With a card read from its URL, the ETag and bytes to keep for it if it is listed.
async fn ard_entry(
    http: &reqwest::Client,
    (base, page_url): (&url::Url, &str),
    up: &Upstream,
    e: &ArdEntry,
    (cards, jwks): (&HashMap<String, (String, Bytes)>, Option<&Jwks>),
) -> (Read, Option<(String, Bytes)>) {
    if e.kind != TYPE_A2A {
        let why = format!(
            "{}: type {:?} is not an A2A Agent Card",
            e.identifier, e.kind
        );
        return (Read::Refused(why), None);
    }
    let (namespace, name) = card_of(&e.identifier);
    // An ARD registry says nothing of where its entries came from: the path is the upstream.
    let path = vec![up.url.clone()];
    if let Some(data) = &e.data {
        let bytes = Bytes::from(data.get().to_string());
        let read = entry_of(
            up,
            &e.identifier,
            Some(bytes),
            (namespace, name),
            (e.said(None), page_url.to_string()),
            path,
            jwks,
        );
        return (read, None);
    }
    let Some(card_url) = &e.url else {
        let why = format!("{}: neither url nor data", e.identifier);
        return (Read::Refused(why), None);
    };
    let same_origin = url::Url::parse(card_url).is_ok_and(|u| u.origin() == base.origin());
    if !same_origin {
        let why = format!(
            "{}: its card URL {} is not on the upstream's origin",
            e.identifier,
            cut(card_url)
        );
        return (Read::Refused(why), None);
    }
    let held = cards.get(card_url).cloned();
    let got = get(
        http,
        card_url,
        held.as_ref().map(|h| h.0.as_str()),
        MAX_CARD_BYTES,
    )
    .await;
    let (bytes, fetched) = match got {
        Ok(g) if g.status == 304 && held.is_some() => (held.map(|h| h.1), None),
        Ok(g) if g.status == 200 => {
            let keep = g.etag.clone().map(|tag| (tag, g.body.clone()));
            (Some(g.body), keep)
        }
        Ok(g) => {
            let why = format!("{}: {}: HTTP {}", e.identifier, cut(card_url), g.status);
            return (Read::Refused(why), None);
        }
        Err(why) => return (Read::Refused(format!("{}: {why}", e.identifier)), None),
    };
    let read = entry_of(
        up,
        &e.identifier,
        bytes,
        (namespace, name),
        (e.said(Some(card_url.clone())), card_url.clone()),
        path,
        jwks,
    );
    (read, fetched)
}

/// The entry of a card read from `up` (`card`: its AgentCard's namespace and name), or why it
/// is refused: not a card, too large, or (with trusted keys) signed by none of them.
fn entry_of(
    up: &Upstream,
    identifier: &str,
    bytes: Option<Bytes>,
    (namespace, name): (&str, &str),
    (said, read_from): (Said, String),
    path: Vec<String>,
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
    // Where the operator read the card, not where the upstream says it is; `via` is the
    // upstream as the spec names it, `path` what the upstreams claim (to cut loops only).
    let origin = Origin {
        upstream: up.name.clone(),
        url: read_from,
        fetched_at: jiff::Timestamp::now().to_string(),
        verified,
        via: vec![up.url.clone()],
        path,
    };
    Read::Entry(Arc::new(
        entry
            .with_identifier(identifier.to_string())
            .with_origin(origin),
    ))
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

    /// What `reads` (identifier, what was read) make of a fresh set under `up`.
    fn held_of(up: &Upstream, reads: &[(&str, Read)]) -> (Vec<String>, usize, Option<String>) {
        let include = include_of(up).unwrap();
        let max = max_entries(up);
        let mut held = Held::default();
        for (id, read) in reads {
            if held.admits(id, max) {
                held.take(id, read.clone(), include.as_ref(), max);
            }
        }
        let (entries, refused, first) = held.selected();
        let names = entries.iter().map(|e| e.placement.name.clone()).collect();
        (names, refused, first)
    }

    #[test]
    fn include_filters_then_max_entries_then_refusals_are_counted() {
        // Arrival order: refused and left-out entries take no room under maxEntries.
        let reads = [
            (
                "urn:air:x.example:t:x",
                Read::Refused("x: not an Agent Card".into()),
            ),
            ("urn:air:b.example:t:b", read("b", "internal")),
            ("urn:air:e.example:t:e", read("e", "internal")),
            ("urn:air:a.example:t:a", read("a", "public")),
            ("urn:air:c.example:t:c", read("c", "public")),
            ("urn:air:d.example:t:d", read("d", "public")),
        ];
        let (all, refused, first) = held_of(&upstream(&[], None), &reads);
        assert_eq!(all, ["a", "b", "c", "d", "e"]);
        assert_eq!(
            (refused, first.as_deref()),
            (1, Some("x: not an Agent Card"))
        );
        let (public, refused, _) = held_of(&upstream(&[("tag", "public")], None), &reads);
        assert_eq!(
            (public, refused),
            (vec!["a".to_string(), "c".into(), "d".into()], 1)
        );
        let (two, refused, _) = held_of(&upstream(&[("tag", "public")], Some(2)), &reads);
        assert_eq!(
            two,
            ["a", "c"],
            "the two first the filters select, past two left out"
        );
        assert_eq!(refused, 2, "the refused card and one past maxEntries");
        let mut bad = upstream(&[("colour", "red")], None);
        assert!(include_of(&bad).unwrap_err().starts_with("include: colour"));
        bad.include.clear();
        assert!(include_of(&bad).unwrap().is_none());
    }

    #[test]
    fn a_feed_keeps_counts_of_what_it_holds_now_and_remembers_a_bounded_number_of_refusals() {
        let max = 2;
        let mut held = Held::default();
        // Refused, then listed when it becomes a card, then gone.
        held.take(
            "urn:air:a.example:t:a",
            Read::Refused("a: bad".into()),
            None,
            max,
        );
        assert_eq!(held.selected().1, 1);
        held.take("urn:air:a.example:t:a", read("a", "x"), None, max);
        assert_eq!((held.selected().0.len(), held.selected().1), (1, 0));
        held.remove("urn:air:a.example:t:a");
        assert_eq!((held.selected().0.len(), held.selected().1), (0, 0));
        // A refusal deleted upstream is no longer counted (nothing grows until a re-read).
        held.take(
            "urn:air:b.example:t:b",
            Read::Refused("b: bad".into()),
            None,
            max,
        );
        held.remove("urn:air:b.example:t:b");
        assert_eq!(held.selected().1, 0);
        // Refusals past maxEntries of them are counted, not remembered; a huge identifier is
        // kept cut.
        let huge = format!("urn:air:x:{}", "a".repeat(100_000));
        assert!(!held.admits(&huge, max));
        for i in 0..5 {
            held.take(
                &format!("urn:air:r.example:t:r{i}"),
                Read::Refused(format!("r{i}: bad")),
                None,
                max,
            );
        }
        assert_eq!(held.refused.len(), max);
        assert_eq!(held.selected().1, 6);
        assert!(held.refused.keys().all(|k| k.len() <= MAX_TEXT + 4));
        assert!(held.refused.values().all(|v| v.len() <= MAX_TEXT + 4));
    }
}
