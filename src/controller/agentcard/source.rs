//! Import: the card an agent already serves, fetched from its Service in the card's namespace.
//!
//! Data flow per reconcile of a card with `spec.source`: [`target`] resolves the Service
//! (same namespace only, never ExternalName) through its EndpointSlices to one ready address
//! (special-purpose addresses refused) → [`fetch`] GETs the card there (no redirects, timeouts,
//! a size limit, `If-None-Match` with the last ETag) → [`crate::a2a::import`] reads it as v1.0
//! or converts it from v0.3 → the reconciler validates it as it would be published. A card
//! that cannot be fetched or is invalid is not used: the last good one (kept in memory, or read
//! back from the served ConfigMap after a restart) stays published, and the `SourceReachable`
//! condition says why.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

use kube::ResourceExt;

use super::card::effective_card;
use super::reach::{Candidate, Reach};
use crate::a2a::card::AgentCard as A2aCard;
use crate::a2a::extended::Additions;
use crate::a2a::import::{import, CardVersion, Imported};
use crate::a2a::parse::{card_from_value, Strictness};
use crate::a2a::validate::validate;
use crate::a2a::Problems;
use crate::contract::KEY_CARD;
use crate::crd::{AgentCard, Source, SourceExtendedCard, SourceStatus};
use crate::store::SeenConfigMap;

/// The default path of a card on the agent.
pub const DEFAULT_PATH: &str = crate::contract::PATH_CARD;
/// Tried when the default path answers 404 (agents built with v0.1–v0.2 SDKs).
pub const LEGACY_PATH: &str = crate::contract::PATH_LEGACY;
/// How often a card is fetched again by default, in seconds.
pub const DEFAULT_REFRESH_SECONDS: i64 = 300;
/// The largest card fetched, in bytes (the signed card and its metadata must fit a ConfigMap).
pub const MAX_SOURCE_BYTES: usize = 256 * 1024;
/// How long one fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How soon a failed source is tried again (at most; a shorter refresh interval wins).
pub const RETRY_FAILED: Duration = Duration::from_secs(10);

/// Why a source could not be fetched (the `SourceReachable` condition's reason and message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    /// CamelCase reason: `ServiceNotFound`, `NoEndpoints`, `Unreachable`, `InvalidCard`.
    pub reason: &'static str,
    /// What went wrong, naming the Service or URL.
    pub message: String,
}

impl SourceError {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// The address a card is fetched from, and the URL users read in the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http://<ip>:<port>` of one ready endpoint.
    pub base: String,
    /// `http://<service>.<namespace>.svc:<port>`: what the status shows.
    pub service_url: String,
}

/// What a fetch returned.
#[derive(Debug)]
pub enum Fetched {
    /// A new body (and its ETag), from `path`.
    Body {
        /// The bytes served.
        body: Vec<u8>,
        /// The agent's ETag.
        etag: Option<String>,
        /// The path that answered.
        path: String,
    },
    /// `304 Not Modified`: the cached card is current.
    NotModified,
}

/// What the operator last learned from each source-backed AgentCard's source (by uid): the
/// last good card, so a refresh can send `If-None-Match` and a failed one keeps serving it, and
/// the last report with its time, so reconciles between refreshes (every status write triggers
/// one) reuse it instead of fetching again.
#[derive(Default)]
pub struct SourceCache {
    entries: Mutex<HashMap<String, Entry>>,
}

/// One card's source, as last looked at.
#[derive(Clone, Debug)]
struct Entry {
    /// The spec it was fetched for (a changed source fetches afresh).
    source: Source,
    /// When it was last fetched (or tried).
    at: Instant,
    /// The last good import.
    good: Option<Cached>,
    /// The report of that look.
    last: Report,
    /// Failed looks in a row.
    failures: u32,
}

/// One remembered import.
#[derive(Clone, Debug)]
pub struct Cached {
    /// The imported v1.0 card (before overrides and the backend rewrite).
    pub card: A2aCard,
    /// The agent's ETag for it.
    pub etag: Option<String>,
    /// The version the agent wrote it in.
    pub version: CardVersion,
    /// What the import dropped or changed (kept as warnings while this card is served).
    pub notes: Vec<String>,
    /// With `source.extendedCard`: what the agent's extended card adds to its public card.
    pub extended: Option<Additions>,
}

impl SourceCache {
    /// The last look at `uid`'s `source`, if it is not due again yet: a refresh interval after
    /// a good look; after failed ones 0.5 s doubling per failure up to 10 s (or the interval,
    /// if shorter), so an agent still starting is picked up soon and a dead one costs little.
    fn fresh(&self, uid: &str, source: &Source) -> Option<Report> {
        let guard = crate::locks::lock(&self.entries);
        let e = guard.get(uid).filter(|e| e.source == *source)?;
        let due = match e.last.error {
            None => refresh(source),
            Some(_) => retry_after(e.failures).min(refresh(source)),
        };
        (e.at.elapsed() < due).then(|| e.last.clone())
    }

    /// The last good import of `uid`'s `source`.
    fn good(&self, uid: &str, source: &Source) -> Option<Cached> {
        let guard = crate::locks::lock(&self.entries);
        guard
            .get(uid)
            .filter(|e| e.source == *source)
            .and_then(|e| e.good.clone())
    }

    /// Remember a look at `uid`'s `source` started `at`.
    fn put(&self, uid: &str, source: &Source, at: Instant, good: Option<Cached>, last: &Report) {
        let mut guard = crate::locks::lock(&self.entries);
        let failures = match (&last.error, guard.get(uid).filter(|e| e.source == *source)) {
            (None, _) => 0,
            (Some(_), Some(prev)) => prev.failures.saturating_add(1),
            (Some(_), None) => 1,
        };
        guard.insert(
            uid.to_string(),
            Entry {
                source: source.clone(),
                at,
                good,
                last: last.clone(),
                failures,
            },
        );
    }

    /// Forget `uid` (the card is gone).
    pub fn forget(&self, uid: &str) {
        let mut guard = crate::locks::lock(&self.entries);
        guard.remove(uid);
    }
}

/// How soon a source that failed `failures` times in a row is tried again.
fn retry_after(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(5);
    Duration::from_millis(500u64 << exp).min(RETRY_FAILED)
}

/// The path asked first.
pub fn path(source: &Source) -> &str {
    source
        .path
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or(DEFAULT_PATH)
}

/// The refresh interval.
pub fn refresh(source: &Source) -> Duration {
    let secs = source
        .refresh_seconds
        .unwrap_or(DEFAULT_REFRESH_SECONDS)
        .clamp(10, 86_400);
    Duration::from_secs(u64::try_from(secs).unwrap_or(300))
}

pub use crate::net::{address_allowed, unmanaged_address_allowed};

/// Whether `name` may be a Pod's name (an RFC 1123 subdomain): what a tenant's EndpointSlice
/// writes as `targetRef.name` goes into an API path only then.
pub fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The ready endpoint addresses of `service`'s `port`, lowest first, each once (pure: from the
/// Service and its slices), so repeated fetches go to the same endpoint. Whether one may be
/// fetched is [`Reach`]'s to say.
pub fn candidates(
    namespace: &str,
    service: &Service,
    port: i32,
    slices: &[EndpointSlice],
) -> Result<Vec<Candidate>, SourceError> {
    let name = service.metadata.name.clone().unwrap_or_default();
    let spec = service.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") {
        return Err(SourceError::new(
            "ServiceNotAllowed",
            format!("spec.source.service: Service {namespace}/{name} is ExternalName; only Services with endpoints in the namespace can be a source"),
        ));
    }
    let service_port = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.port == port)
        .ok_or_else(|| {
            SourceError::new(
                "ServiceNotFound",
                format!("spec.source.service.port: Service {namespace}/{name} has no port {port}"),
            )
        })?;
    let port_name = service_port.name.unwrap_or_default();
    let mut found: Vec<Candidate> = Vec::new();
    for slice in slices {
        let Some(target_port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.clone().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
        else {
            continue;
        };
        for ep in &slice.endpoints {
            let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            if !ready {
                continue;
            }
            for addr in &ep.addresses {
                // Canonical form: an IPv4-mapped IPv6 address is the IPv4 address it maps, so
                // it is judged (and matched against the reserved sets) as that address.
                if let Ok(ip) = addr.parse::<IpAddr>().map(|ip| ip.to_canonical()) {
                    found.push(Candidate {
                        ip,
                        port: target_port,
                        target_ref: ep.target_ref.clone(),
                    });
                }
            }
        }
    }
    found.sort_by_key(|a| (a.ip, a.port));
    found.dedup_by(|a, b| (a.ip, a.port) == (b.ip, b.port));
    if found.is_empty() {
        return Err(SourceError::new(
            "NoEndpoints",
            format!("Service {namespace}/{name} has no ready endpoint for port {port}"),
        ));
    }
    Ok(found)
}

/// `ip:port`, with brackets for IPv6.
fn socket(c: &Candidate) -> std::net::SocketAddr {
    std::net::SocketAddr::new(c.ip, u16::try_from(c.port).unwrap_or(0))
}

/// Most endpoint addresses checked per look (each check may ask the API about a Pod).
pub const MAX_CHECKED: usize = 8;

/// The first of `candidates` that `reach` allows, as a fetch target; `EndpointNotAllowed`
/// naming the first refused address (and how many more were) when none is.
async fn first_allowed(
    reach: &Reach,
    namespace: &str,
    name: &str,
    port: i32,
    candidates: Vec<Candidate>,
) -> Result<Target, SourceError> {
    let mut first_refused = None;
    let total = candidates.len();
    for c in candidates.into_iter().take(MAX_CHECKED) {
        match reach.check(namespace, &c).await {
            Ok(()) => {
                return Ok(Target {
                    base: format!("http://{}", socket(&c)),
                    service_url: format!("http://{name}.{namespace}.svc:{port}"),
                });
            }
            Err(why) => {
                first_refused.get_or_insert((c, why));
            }
        }
    }
    let (c, why) = first_refused.ok_or_else(|| {
        SourceError::new(
            "NoEndpoints",
            format!("Service {namespace}/{name} has no ready endpoint for port {port}"),
        )
    })?;
    let more = match total - 1 {
        0 => String::new(),
        n => format!(" ({n} more endpoint address(es) not used)"),
    };
    let addr = socket(&c);
    Err(SourceError::new(
        "EndpointNotAllowed",
        format!(
            "spec.source.service: endpoint {addr} of Service {namespace}/{name} is not fetched: {why}{more}{}",
            reach.hint(&why)
        ),
    ))
}

/// Resolve `source` in `namespace` to an endpoint `reach` allows.
pub async fn target(
    client: &kube::Client,
    reach: &Reach,
    namespace: &str,
    source: &Source,
) -> Result<Target, SourceError> {
    let name = &source.service.name;
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let service = match services.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(SourceError::new(
                "ServiceNotFound",
                format!("spec.source.service: Service {namespace}/{name} not found"),
            ))
        }
        Err(e) => {
            return Err(SourceError::new(
                "Unreachable",
                format!("reading Service {namespace}/{name}: {e}"),
            ))
        }
    };
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await
        .map_err(|e| {
            SourceError::new(
                "Unreachable",
                format!("listing the EndpointSlices of {namespace}/{name}: {e}"),
            )
        })?;
    let found = candidates(namespace, &service, source.service.port, &list.items)?;
    first_allowed(reach, namespace, name, source.service.port, found).await
}

/// The HTTP client for sources: no redirects (a redirect could lead anywhere), timeouts.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(FETCH_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
}

/// GET the card at `target` + the source's path (then the legacy path, when the path is the
/// default one and answers 404), sending `If-None-Match: etag` when given.
pub async fn fetch(
    http: &reqwest::Client,
    target: &Target,
    source: &Source,
    etag: Option<&str>,
) -> Result<Fetched, SourceError> {
    let first = path(source).to_string();
    let mut paths = vec![first.clone()];
    if source.path.as_deref().is_none_or(str::is_empty) {
        paths.push(LEGACY_PATH.to_string());
    }
    let mut last = None;
    for p in paths {
        match fetch_one(http, target, &p, etag, None).await {
            Ok(Some(f)) => return Ok(f),
            Ok(None) => last = Some(p),
            Err(e) => return Err(e),
        }
    }
    Err(SourceError::new(
        "Unreachable",
        format!(
            "{}{}: HTTP 404 Not Found",
            target.service_url,
            last.unwrap_or(first)
        ),
    ))
}

/// One GET; `Ok(None)` on 404.
async fn fetch_one(
    http: &reqwest::Client,
    target: &Target,
    path: &str,
    etag: Option<&str>,
    bearer: Option<&str>,
) -> Result<Option<Fetched>, SourceError> {
    let shown = format!("{}{path}", target.service_url);
    let mut req = http
        .get(format!("{}{path}", target.base))
        .header(http::header::ACCEPT, "application/json");
    if let Some(tag) = etag {
        req = req.header(http::header::IF_NONE_MATCH, tag);
    }
    if let Some(token) = bearer {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let unreachable = |e: reqwest::Error| SourceError::new("Unreachable", format!("{shown}: {e}"));
    let mut resp = req.send().await.map_err(unreachable)?;
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_MODIFIED && etag.is_some() {
        return Ok(Some(Fetched::NotModified));
    }
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        let hint = if status.is_redirection() {
            " (redirects are not followed)"
        } else {
            ""
        };
        return Err(SourceError::new(
            "Unreachable",
            format!("{shown}: HTTP {status}{hint}"),
        ));
    }
    let too_large = || {
        SourceError::new(
            "InvalidCard",
            format!("{shown}: larger than {MAX_SOURCE_BYTES} bytes"),
        )
    };
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_SOURCE_BYTES as u64)
    {
        return Err(too_large());
    }
    let etag = resp
        .headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(unreachable)? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_SOURCE_BYTES {
            return Err(too_large());
        }
    }
    Ok(Some(Fetched::Body {
        body,
        etag,
        path: path.to_string(),
    }))
}

/// What a reconcile learned from a card's source.
#[derive(Clone, Debug)]
pub struct Report {
    /// The card to publish: the fresh import when it is good, else the last good one (`None`
    /// when there has never been one).
    pub card: Option<A2aCard>,
    /// Why the source was not used this time.
    pub error: Option<SourceError>,
    /// The status of the source after this look.
    pub status: SourceStatus,
    /// What the import dropped or changed, as warnings.
    pub notes: Vec<String>,
    /// Whether the agent answered 304 (the cached card is current).
    pub not_modified: bool,
    /// With `source.extendedCard`: what the agent's extended card adds to its public card (the
    /// fresh one when it could be fetched, else the last good one), published as the card's
    /// extended card.
    pub extended: Option<Additions>,
}

/// What the import step uses: the API (Services, EndpointSlices), the HTTP client fetching
/// cards, and the last good card of each source.
pub struct Sources {
    /// API client (the source's Service and its EndpointSlices).
    pub client: kube::Client,
    /// The HTTP client fetching imported cards (no redirects, timeouts).
    pub http: crate::net::LazyClient,
    /// The last good imported card of each card with `spec.source`.
    pub cache: SourceCache,
    /// Which endpoint addresses may be fetched.
    pub reach: Reach,
    /// The last look at each declared card's agent, for drift (fetched the same way).
    pub drifts: super::drift::Drifts,
}

impl Sources {
    /// Ready to fetch with `client` for the API; `allow_unmanaged` from
    /// `--source-allow-unmanaged-endpoints` (see [`Reach`]).
    pub fn new(client: kube::Client, allow_unmanaged: bool) -> Result<Sources, reqwest::Error> {
        Ok(Sources {
            reach: Reach::new(client.clone(), allow_unmanaged),
            client,
            http: crate::net::LazyClient::new(http_client),
            cache: SourceCache::default(),
            drifts: super::drift::Drifts::default(),
        })
    }

    /// The HTTP client for agents (built on first use).
    pub fn http(&self) -> Result<reqwest::Client, SourceError> {
        self.http
            .get()
            .map_err(|e| SourceError::new("Unreachable", format!("the HTTP client: {e}")))
    }

    /// Fetch `card`'s source when due and decide which card to publish (see the module doc).
    pub async fn look(
        &self,
        card: &AgentCard,
        source: &Source,
        previous: (Option<&SeenConfigMap>, Option<&SeenConfigMap>),
    ) -> Report {
        let uid = card.uid().unwrap_or_default();
        if let Some(report) = self.cache.fresh(&uid, source) {
            return report;
        }
        let at = Instant::now();
        let (mut report, mut good, target) = fetch_and_read(card, source, self, previous.0).await;
        if let Some(want) = &source.extended_card {
            // The last good extended card: remembered, or read back after a restart.
            let last = self
                .cache
                .good(&uid, source)
                .and_then(|c| c.extended)
                .or_else(|| served_additions(card, previous));
            let fresh = match (&target, &report.card) {
                (Some(target), Some(public)) => {
                    Some(fetch_extended(card, want, self, target, public).await)
                }
                _ => None,
            };
            report.extended = match fresh {
                Some(Ok(additions)) => Some(additions),
                Some(Err(e)) => {
                    report.error.get_or_insert(e);
                    last
                }
                None => last,
            };
            if let Some(g) = good.as_mut() {
                g.extended = report.extended.clone();
            }
        }
        self.cache.put(&uid, source, at, good, &report);
        report
    }

    /// Forget the source and the drift look of the card `uid` (deleted).
    pub fn forget(&self, uid: &str) {
        self.cache.forget(uid);
        self.drifts.forget(uid);
    }
}

/// One look at the source: the report, and the good import to remember.
/// The public card's look: the report, the good import to remember, and where the agent
/// answered (`None` when it did not).
async fn fetch_and_read(
    card: &AgentCard,
    source: &Source,
    sources: &Sources,
    previous: Option<&SeenConfigMap>,
) -> (Report, Option<Cached>, Option<Target>) {
    let ns = card.namespace().unwrap_or_default();
    let uid = card.uid().unwrap_or_default();
    let cached = sources.cache.good(&uid, source);
    let mut status = card
        .status
        .as_ref()
        .and_then(|s| s.source.as_deref().cloned())
        .unwrap_or_default();
    let last_good = || {
        cached
            .as_ref()
            .map(|c| c.card.clone())
            .or_else(|| served_card(card, previous))
    };
    let cached_notes = cached.as_ref().map(|c| c.notes.clone()).unwrap_or_default();
    let fail = |e: SourceError, status: SourceStatus| Report {
        card: last_good(),
        error: Some(e),
        status,
        notes: cached_notes.clone(),
        not_modified: false,
        extended: None,
    };
    let target = match target(&sources.client, &sources.reach, &ns, source).await {
        Ok(t) => t,
        Err(e) => return (fail(e, status), cached.clone(), None),
    };
    let etag = cached.as_ref().and_then(|c| c.etag.as_deref());
    let now = || jiff::Timestamp::now().to_string();
    let http = match sources.http() {
        Ok(http) => http,
        Err(e) => return (fail(e, status), cached.clone(), None),
    };
    match fetch(&http, &target, source, etag).await {
        Err(e) => (fail(e, status), cached.clone(), None),
        Ok(Fetched::NotModified) => {
            status.fetched_at = Some(now());
            let report = Report {
                card: last_good(),
                error: None,
                status,
                notes: cached_notes.clone(),
                not_modified: true,
                extended: None,
            };
            (report, cached.clone(), Some(target))
        }
        Ok(Fetched::Body { body, etag, path }) => {
            let url = format!("{}{path}", target.service_url);
            let imported = match read(card, &url, &body) {
                Ok(i) => i,
                Err(e) => {
                    status.url = url;
                    return (fail(e, status), cached.clone(), None);
                }
            };
            let notes = bounded_notes(&url, &imported.notes);
            let good = Cached {
                card: imported.card.clone(),
                etag: etag.clone(),
                version: imported.version,
                notes: notes.clone(),
                extended: None,
            };
            let report = Report {
                card: Some(imported.card),
                error: None,
                status: SourceStatus {
                    url,
                    etag,
                    version: Some(imported.version.as_str().to_string()),
                    fetched_at: Some(now()),
                },
                notes,
                not_modified: false,
                extended: None,
            };
            (report, Some(good), Some(target))
        }
    }
}

/// The agent's extended card, fetched from `target` with a token the API server issues for the
/// card's namespace's ServiceAccount `want.serviceAccountName` and audience `want.audience`
/// (a TokenRequest: the operator never reads a Secret), read as a card and checked to be
/// `public` (the card just imported) and more.
async fn fetch_extended(
    card: &AgentCard,
    want: &SourceExtendedCard,
    sources: &Sources,
    target: &Target,
    public: &A2aCard,
) -> Result<Additions, SourceError> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let ns = card.namespace().unwrap_or_default();
    let sa = &want.service_account_name;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![want.audience.clone()],
            expiration_seconds: Some(EXTENDED_TOKEN_SECONDS),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(sources.client.clone(), &ns)
        .create_token_request(sa, &Default::default(), &request)
        .await
        .ok()
        .and_then(|t| t.status)
        .map(|s| s.token)
        .ok_or_else(|| {
            SourceError::new(
                "CredentialUnavailable",
                format!(
                    "no token of ServiceAccount {ns}/{sa} for the extended card (does it exist?)"
                ),
            )
        })?;
    let path = want
        .path
        .as_deref()
        .unwrap_or(crate::contract::PATH_EXTENDED);
    let url = format!("{}{path}", target.service_url);
    let body = match fetch_one(&sources.http()?, target, path, None, Some(&token)).await? {
        Some(Fetched::Body { body, .. }) => body,
        _ => {
            return Err(SourceError::new(
                "Unreachable",
                format!("{url}: HTTP 404 Not Found (the extended card)"),
            ))
        }
    };
    let extended = read(card, &url, &body)?.card;
    crate::a2a::extended::additions(public, &extended).map_err(|p| {
        SourceError::new(
            "InvalidExtendedCard",
            format!("{url}: not the public card and more: {}", Problems(p)),
        )
    })
}

/// How long a token the operator requests for fetching an extended card is valid.
const EXTENDED_TOKEN_SECONDS: i64 = 600;

/// What the served extended card adds to the served card (both read back from their
/// ConfigMaps after a restart, while the agent cannot be asked).
fn served_additions(
    card: &AgentCard,
    (public, extended): (Option<&SeenConfigMap>, Option<&SeenConfigMap>),
) -> Option<Additions> {
    let public = served_card(card, public)?;
    let extended = served(card, extended?, crate::contract::KEY_EXTENDED)?;
    crate::a2a::extended::additions(&public, &extended).ok()
}

/// Most import notes kept as status warnings: the agent writes its card, and a card full of
/// unknown fields must not grow the AgentCard's status without bound.
pub const MAX_NOTES: usize = 20;

/// The import's notes as status warnings, at most [`MAX_NOTES`] and a count of the rest.
fn bounded_notes(url: &str, notes: &[crate::a2a::Problem]) -> Vec<String> {
    let mut out: Vec<String> = notes
        .iter()
        .take(MAX_NOTES)
        .map(|n| format!("{url}: {n}"))
        .collect();
    if notes.len() > MAX_NOTES {
        out.push(format!(
            "{url}: {} more fields not part of the A2A v1.0 Agent Card dropped",
            notes.len() - MAX_NOTES
        ));
    }
    out
}

/// Parse and convert the fetched `body`, and check the card it would publish: an invalid one
/// is refused like an unreachable source (the last good card stays). A body that is not a
/// card is described by its length and where parsing stopped, never by its bytes: the status
/// is readable by the tenant, and the endpoint may not be the tenant's agent.
fn read(card: &AgentCard, url: &str, body: &[u8]) -> Result<Imported, SourceError> {
    let invalid = |what: String| SourceError::new("InvalidCard", format!("{url}: {what}"));
    let len = body.len();
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        invalid(format!(
            "not an Agent Card: {len} bytes, not JSON (parsing stopped at line {} column {})",
            e.line(),
            e.column()
        ))
    })?;
    if !looks_like_card(&value) {
        return Err(invalid(format!(
            "not an Agent Card: {len} bytes of JSON without the string fields name, description and version and the array skills"
        )));
    }
    let imported = import(&value).map_err(|p| {
        let at =
            p.0.first()
                .map(|p| p.path.as_str())
                .filter(|path| schema_path(path))
                .map(|path| format!(" (parsing stopped at {path})"))
                .unwrap_or_default();
        invalid(format!("not an Agent Card: {len} bytes of JSON{at}"))
    })?;
    let mut resolved = card.clone();
    resolved.spec.card = Some(imported.card.clone());
    let errors = validate(&effective_card(&resolved));
    if !errors.is_empty() {
        return Err(invalid(format!(
            "the card would not be valid: {}",
            Problems(errors)
        )));
    }
    Ok(imported)
}

/// Whether `value` is recognisably an Agent Card (any version): an object with the string
/// fields `name`, `description` and `version` and the array `skills`. Only then are its
/// problems shown with their values.
fn looks_like_card(value: &serde_json::Value) -> bool {
    ["name", "description", "version"]
        .iter()
        .all(|k| value.get(k).is_some_and(serde_json::Value::is_string))
        && value.get("skills").is_some_and(serde_json::Value::is_array)
}

/// Whether `path` is a short path of field names and indices (`skills[2].id`): where a parse
/// stopped, safe to show; anything else might be a key of a response that is not a card.
fn schema_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 64
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"[]._".contains(&b))
}

/// The card the operator serves for `card` (its own ConfigMap, read back after a restart),
/// as the base of a re-publication while the source cannot be fetched.
fn served_card(card: &AgentCard, previous: Option<&SeenConfigMap>) -> Option<A2aCard> {
    served(card, previous?, KEY_CARD)
}

/// The card in `cm`'s `key`, without its signatures, when `cm` is `card`'s own.
fn served(card: &AgentCard, cm: &SeenConfigMap, key: &str) -> Option<A2aCard> {
    if !super::apply::owned_by_card(&cm.seen, card) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(cm.bytes(key)?).ok()?;
    let mut parsed = card_from_value(&value, Strictness::Lenient).ok()?.card;
    parsed.signatures.clear();
    Some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(kind: &str) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "echo", "namespace": "team"},
            "spec": {"type": kind, "ports": [{"name": "http", "port": 80, "targetPort": 9999}]}
        }))
        .unwrap()
    }

    fn slice(addresses: &[(&str, Option<bool>)], port_name: &str) -> EndpointSlice {
        let endpoints: Vec<_> = addresses
            .iter()
            .map(|(a, ready)| json!({"addresses": [a], "conditions": {"ready": ready}}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "echo-1", "namespace": "team", "labels": {"kubernetes.io/service-name": "echo"}},
            "addressType": "IPv4",
            "ports": [{"name": port_name, "port": 9999}],
            "endpoints": endpoints
        }))
        .unwrap()
    }

    #[test]
    fn the_ready_addresses_of_the_named_port_are_candidates_lowest_first() {
        let slices = [slice(
            &[
                ("10.0.0.9", Some(true)),
                ("10.0.0.3", Some(false)),
                ("169.254.169.254", Some(true)),
                ("10.0.0.5", None),
            ],
            "http",
        )];
        let found = candidates("team", &service("ClusterIP"), 80, &slices).unwrap();
        let ips: Vec<String> = found.iter().map(|c| c.ip.to_string()).collect();
        assert_eq!(ips, ["10.0.0.5", "10.0.0.9", "169.254.169.254"]);
        assert!(found.iter().all(|c| c.port == 9999));
    }

    #[test]
    fn an_ipv4_mapped_address_is_the_ipv4_address_it_maps() {
        // Written as IPv4-mapped IPv6, an address must still meet the reserved sets and the
        // Pod addresses it is compared with as the IPv4 address.
        let slices = [slice(
            &[
                ("::ffff:10.96.0.1", Some(true)),
                ("::ffff:10.0.0.5", Some(true)),
            ],
            "http",
        )];
        let found = candidates("team", &service("ClusterIP"), 80, &slices).unwrap();
        let ips: Vec<std::net::IpAddr> = found.iter().map(|c| c.ip).collect();
        assert_eq!(
            ips,
            [
                "10.0.0.5".parse::<std::net::IpAddr>().unwrap(),
                "10.96.0.1".parse().unwrap()
            ]
        );
        assert_eq!(socket(&found[0]).to_string(), "10.0.0.5:9999");
    }

    #[test]
    fn a_card_full_of_unknown_fields_leaves_a_bounded_list_of_warnings() {
        let mut card = serde_json::json!({
            "name": "A", "description": "D", "version": "1",
            "supportedInterfaces": [{"url": "https://a.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]
        });
        for i in 0..5000 {
            card[format!("extra{i}")] = json!(i);
        }
        let imported = import(&card).unwrap();
        assert_eq!(imported.notes.len(), 5000);
        let notes = bounded_notes("http://a.t.svc:80/x", &imported.notes);
        assert_eq!(notes.len(), MAX_NOTES + 1);
        assert!(notes[MAX_NOTES]
            .ends_with("4980 more fields not part of the A2A v1.0 Agent Card dropped"));
    }

    #[test]
    fn failed_sources_are_retried_sooner_first_then_every_10_s() {
        let waits: Vec<u64> = (1..=7).map(|n| retry_after(n).as_millis() as u64).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
    }

    #[test]
    fn external_names_unknown_ports_and_special_addresses_are_refused() {
        let ok = [slice(&[("10.0.0.5", Some(true))], "http")];
        let e = candidates("team", &service("ExternalName"), 80, &ok).unwrap_err();
        assert_eq!(e.reason, "ServiceNotAllowed");
        let e = candidates("team", &service("ClusterIP"), 81, &ok).unwrap_err();
        assert!(e.message.contains("no port 81"), "{e:?}");
        let other_port = [slice(&[("10.0.0.5", Some(true))], "metrics")];
        let e = candidates("team", &service("ClusterIP"), 80, &other_port).unwrap_err();
        assert_eq!(e.reason, "NoEndpoints");
        assert!(!address_allowed("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!address_allowed("fe80::1".parse().unwrap()));
        assert!(address_allowed("192.0.2.10".parse().unwrap()));
    }

    #[test]
    fn a_body_that_is_not_a_card_is_described_by_length_and_position_only() {
        let card: AgentCard = serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": "echo", "namespace": "team"},
            "spec": {"source": {"service": {"name": "echo", "port": 80}}, "publish": {"host": "a.example.com"}}
        }))
        .unwrap();
        let url = "http://echo.team.svc:80/.well-known/agent-card.json";
        let bodies: [&[u8]; 5] = [
            b"SECRET=hunter2\n",
            br#"{"token": "hunter2", "items": ["hunter2"]}"#,
            br#"{"name": {"hunter2": "hunter2"}, "description": "hunter2"}"#,
            br#"["hunter2"]"#,
            br#"{"hunter2": 1, "skills": "hunter2"}"#,
        ];
        for body in bodies {
            let e = read(&card, url, body).unwrap_err();
            assert_eq!(e.reason, "InvalidCard");
            assert!(!e.message.contains("hunter2"), "{}", e.message);
            assert!(
                e.message.contains(&format!("{} bytes", body.len())),
                "{}",
                e.message
            );
        }
        let e = read(&card, url, b"{\"a\": tru").unwrap_err();
        assert!(e.message.contains("line 1 column"), "{}", e.message);
    }
}
