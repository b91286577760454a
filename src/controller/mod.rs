//! The controllers, run by the lease holder only.
//!
//! [`run`] reads the process's shared watches ([`crate::hub`]: AgentCards, Namespaces,
//! AgentDirectories, the published ConfigMaps, also read by the card server) and starts the
//! ones only the controllers need — the signing Secret (parsed keys, JWKS publication, re-sign
//! everything on change), the JWKS ConfigMap and the Ingresses and HTTPRoutes it writes
//! (repair) — waits until they are synced, then runs [`agentcard::reconcile`] and
//! [`agentdirectory::reconcile`] with a shared [`Context`]. [`watches`] turns each event into the
//! reconciles it triggers. The claims table (who holds which route) is loaded from the cards'
//! status on the first reconcile. Every task [`run`] spawns is aborted when its future is
//! dropped, so losing the lease stops all of it.

pub mod agentcard;
pub mod agentdirectory;
pub mod api_calls;
pub mod claims;
pub mod error;
pub mod events;
pub mod keys;
pub mod metrics;
pub mod policy;
pub mod routing;
pub mod seen;
pub mod watches;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DynamicObject};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Client, ResourceExt};

pub use error::Error;

use crate::contract::{ANN_CARD, LABEL_MANAGED_BY, MANAGER};
use crate::crd::{AgentCard, AgentDirectory};
use agentcard::build::Settings;
use claims::{Claim, Claims};
use keys::{KeyCache, Keys};

/// How often (at most) the JWKS publisher looks whether a key that left the Secret is still
/// used by a served card, while it keeps one published: every JWKS max-age, at most this long.
const RETAINED_KEY_RECHECK: Duration = Duration::from_secs(30);

/// The keys the served cards are signed with: each card's ConfigMap as its status confirms it
/// (the one `status.configMap` names, holding `status.contentHash`), as the card server serves
/// it. Only the operator writes status, so a ConfigMap a tenant made with the operator's labels
/// cannot keep a key that left the Secret in the JWKS.
fn served_kids(
    cards: &Store<AgentCard>,
    configmaps: &Store<seen::SeenConfigMap>,
) -> HashSet<String> {
    cards
        .state()
        .iter()
        .filter_map(|card| {
            let status = card.status.as_ref()?;
            let cm = configmaps.get(
                &ObjectRef::new(status.config_map.as_deref()?)
                    .within(card.metadata.namespace.as_deref()?),
            )?;
            let body = cm.text(crate::contract::KEY_CARD)?;
            (status.content_hash.as_deref()
                == Some(crate::contract::content_hash(body.as_bytes()).as_str()))
            .then(|| keys::signature_kids(body))
        })
        .flatten()
        .collect()
}

/// How long one JWKS publication (a read and a write) may take before it is retried.
const JWKS_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the directory controller waits for more card events before it counts again.
const DIRECTORY_DEBOUNCE: Duration = Duration::from_millis(500);

/// Everything `run` needs to know about the deployment.
#[derive(Clone, Debug)]
pub struct Config {
    /// The operator's namespace, Service and port name.
    pub settings: Settings,
    /// The Secret holding the signing keys (in the operator's namespace).
    pub signing_secret: String,
    /// Create the Secret with a fresh ES256 key when it is absent.
    pub create_signing_secret: bool,
    /// Host patterns every namespace may publish on.
    pub allowed_hosts: Vec<String>,
    /// Host patterns on which namespaces may hold disjoint path prefixes (elsewhere one
    /// namespace holds a whole host).
    pub shared_hosts: Vec<String>,
    /// Reporter instance (pod name) for Events.
    pub instance: String,
    /// Reconcile only the AgentCards of this namespace (all namespaces when `None`).
    pub watch_namespace: Option<String>,
    /// Most reconciles at once (0: unbounded).
    pub concurrency: u16,
    /// `Cache-Control: max-age` of the served JWKS, in seconds; also how long a new key is
    /// published before it signs.
    pub jwks_max_age: u32,
    /// Most cards published per namespace (0: any number); the oldest publish.
    pub max_cards_per_namespace: usize,
    /// Largest signed card published, in bytes.
    pub max_card_bytes: usize,
}

/// The Event a rotation step deserves: `(reason, note)` when the keys that sign changed or the
/// active key's activation was just scheduled.
fn rotation_note(
    before: Option<&keys::Rotation>,
    now: &keys::Rotation,
    active: &str,
) -> Option<(&'static str, String)> {
    if let Some(at) = now.activates_at {
        if before.and_then(|b| b.activates_at) != Some(at) {
            return Some((
                "KeyActivationScheduled",
                format!(
                    "key {active} is published in the JWKS and signs from {at} (one JWKS max-age later); keys {} sign until then",
                    now.signing.join(", ")
                ),
            ));
        }
    }
    let before = before?;
    (before.signing != now.signing).then(|| {
        (
            "KeysActivated",
            format!("cards are now signed with keys {}", now.signing.join(", ")),
        )
    })
}

/// Write `status` of object `name` by server-side apply (field manager `agentcard-operator`,
/// forced): fields the operator no longer sets are removed, so fixed warnings go away.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &kube::api::PatchParams::apply(MANAGER).force(),
        &kube::api::Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Aborts a spawned task when dropped, so a task never outlives the controllers that own it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Shared by every reconcile: client, recorder, metrics, keys, stores.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Event publisher (kube's recorder, its memory bounded).
    pub recorder: Arc<events::Events>,
    /// Controller metrics.
    pub metrics: Arc<metrics::ControllerMetrics>,
    /// Operator settings.
    pub settings: Settings,
    /// Operator-wide allowed host patterns.
    pub allowed_hosts: Vec<String>,
    /// Every AgentCard (compacted, see [`watches::compact_card`]); the card and directory
    /// controllers read the same store.
    pub cards: Store<AgentCard>,
    /// The cards by host and namespace, in step with `cards`.
    pub index: Arc<Mutex<watches::CardIndex>>,
    /// Every Namespace (allowed-hosts annotations, directory selectors).
    pub namespaces: Store<Namespace>,
    /// The cards' ConfigMaps (read here instead of a GET per reconcile).
    pub configmaps: Store<seen::SeenConfigMap>,
    /// Writes the watches have not shown yet.
    pub written: Arc<watches::WriteMemo>,
    /// The card ConfigMaps written and not yet seen by their watch: read instead of the
    /// older version in the store.
    pub configmaps_written: Arc<watches::Unseen<seen::SeenConfigMap>>,
    /// The card statuses written and not yet seen by the card watch: a reconcile reads its
    /// own last write instead of the older status in the store.
    pub statuses: Arc<watches::Unseen<crate::crd::AgentCardStatus>>,
    /// Most cards published per namespace (0: any number).
    pub max_cards_per_namespace: usize,
    /// Largest signed card published, in bytes.
    pub max_card_bytes: usize,
    /// The signing Secret.
    pub secrets: Store<Secret>,
    /// Name of the signing Secret.
    pub signing_secret: String,
    /// The Ingresses this operator wrote (every namespace), as [`seen::SeenIngress`].
    pub ingresses: Store<seen::SeenIngress>,
    /// The HTTPRoutes this operator wrote (with HTTPRoute routing).
    pub routes: Option<Store<DynamicObject>>,
    /// Every AgentDirectory.
    pub directories: Store<AgentDirectory>,
    /// Cards to re-check because a peer on their host changed.
    peers: futures::channel::mpsc::UnboundedSender<ObjectRef<AgentCard>>,
    /// Directories to re-check because a peer on their host changed.
    directory_peers: futures::channel::mpsc::UnboundedSender<ObjectRef<AgentDirectory>>,
    key_cache: Arc<KeyCache>,
    failures: Mutex<HashMap<String, u32>>,
    shared_hosts: Vec<String>,
    /// Who holds which route; `None` until loaded from the cards' status.
    claims: Mutex<Option<Claims>>,
    /// How long loading the claims waits for the directories: unbounded when the
    /// AgentDirectory CRD is installed (a claims table without them would hand their hosts to
    /// cards), none when it is not, bounded when that could not be told.
    directories_wait: Option<Duration>,
    /// True once the directories are listed. Reconciles wait on this rather than on the
    /// store: a store's `wait_until_ready` wakes only its latest waiter (kube-runtime 5), so
    /// concurrent reconciles waiting on it could wait forever.
    directories_listed: tokio::sync::watch::Receiver<bool>,
    /// The last good imported card of each card with `spec.source`.
    pub sources: agentcard::source::SourceCache,
    /// The HTTP client fetching imported cards (no redirects, timeouts).
    pub source_http: reqwest::Client,
    /// What the JWKS publisher last published: for which Secret version, and which keys sign.
    jwks_published: tokio::sync::watch::Receiver<Option<PublishedKeys>>,
}

/// The JWKS publisher's last publication.
#[derive(Clone, Debug)]
pub struct PublishedKeys {
    /// resourceVersion of the Secret whose keys the JWKS holds.
    pub version: String,
    /// Which keys sign, and when the active key will.
    pub rotation: keys::Rotation,
}

/// The keys a card is signed with now.
#[derive(Clone, Debug)]
pub struct Signers {
    /// Newest first (the first one is reported as the card's `keyId`).
    pub keys: Vec<crate::a2a::SigningKey>,
    /// The active key and when it starts signing, while it waits to be in every cached JWKS.
    pub pending: Option<(String, jiff::Timestamp)>,
}

impl Context {
    /// The signing keys, parsed once per Secret version.
    pub fn keys(&self) -> Result<Arc<Keys>, Error> {
        let key = ObjectRef::<Secret>::new(&self.signing_secret)
            .within(&self.settings.operator_namespace);
        let secret = self.secrets.get(&key).ok_or_else(|| {
            Error::KeyUnavailable(format!(
                "Secret {}/{} not found",
                self.settings.operator_namespace, self.signing_secret
            ))
        })?;
        self.key_cache.get(&secret).map_err(|e| {
            Error::KeyUnavailable(format!(
                "Secret {}/{}: {e}",
                self.settings.operator_namespace, self.signing_secret
            ))
        })
    }

    /// The keys that sign now (see [`keys::rotate`]), once the JWKS of `keys` is published:
    /// waits (at most 10 s) for the publisher, so that a card signed with them never reaches
    /// clients before the keys that verify it (at start-up, and after a key is added).
    pub async fn signers(&self, keys: &Keys) -> Result<Signers, Error> {
        let mut published = self.jwks_published.clone();
        let wait = published.wait_for(|p| p.as_ref().is_some_and(|p| p.version == keys.version));
        let outcome = tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .map(|r| r.map(|p| p.clone()));
        let published = match outcome {
            Ok(Ok(Some(p))) => p,
            Ok(Ok(None) | Err(_)) => {
                return Err(Error::JwksPending("the JWKS publisher stopped".into()))
            }
            Err(_) => {
                return Err(Error::JwksPending(format!(
                    "ConfigMap {}/{} does not hold the current keys after 10 s",
                    self.settings.operator_namespace,
                    keys::JWKS_CONFIGMAP
                )))
            }
        };
        let signing: Vec<crate::a2a::SigningKey> = published
            .rotation
            .signing
            .iter()
            .filter_map(|kid| keys.all.iter().find(|k| k.kid() == kid).cloned())
            .collect();
        if signing.is_empty() {
            return Err(Error::JwksPending("no key of the Secret signs yet".into()));
        }
        Ok(Signers {
            keys: signing,
            pending: published
                .rotation
                .activates_at
                .map(|at| (keys.active.kid().to_string(), at)),
        })
    }

    /// The keys that sign now, as last published (empty before the first publication).
    pub fn signing_kids(&self) -> Vec<String> {
        self.jwks_published
            .borrow()
            .as_ref()
            .map(|p| p.rotation.signing.clone())
            .unwrap_or_default()
    }

    /// Re-check the other cards asking for one of `hosts`: `card` may have freed a claim there
    /// (deleted, moved, or no longer allowed), or taken one.
    pub fn recheck_hosts(&self, hosts: &[String], card: &AgentCard) {
        self.recheck_hosts_of(hosts, card.metadata.uid.as_deref());
    }

    /// Re-check every card and directory asking for one of `hosts`, except the one `skip`.
    pub fn recheck_hosts_of(&self, hosts: &[String], skip: Option<&str>) {
        if hosts.is_empty() {
            return;
        }
        let on = |host: &str| hosts.iter().any(|h| host.eq_ignore_ascii_case(h));
        let peers: Vec<ObjectRef<AgentCard>> = {
            let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            hosts.iter().flat_map(|h| index.on_host(h)).collect()
        };
        for peer in peers {
            let skipped = self
                .cards
                .get(&peer)
                .is_some_and(|c| c.metadata.uid.as_deref() == skip);
            if !skipped {
                let _ = self.peers.unbounded_send(peer);
            }
        }
        for dir in self.directories.state() {
            if on(&dir.spec.publish.host) && dir.metadata.uid.as_deref() != skip {
                let _ = self
                    .directory_peers
                    .unbounded_send(ObjectRef::from_obj(dir.as_ref()));
            }
        }
    }

    fn with_claims<T>(&self, f: impl FnOnce(&mut Claims) -> T) -> T {
        let mut guard = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let claims = guard.get_or_insert_with(|| Claims::new(self.shared_hosts.clone()));
        f(claims)
    }

    /// Load the claims table from what the cards' status says is served (once per leadership:
    /// the status is the previous holder's decision, written where tenants cannot write).
    pub async fn load_claims(&self) {
        if self
            .claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return;
        }
        let _ = self.cards.wait_until_ready().await;
        // Without the AgentDirectory CRD its store never fills, and cards must not wait.
        let mut listed = self.directories_listed.clone();
        let listed = listed.wait_for(|l| *l);
        match self.directories_wait {
            None => {
                let _ = listed.await;
            }
            Some(bound) => {
                let _ = tokio::time::timeout(bound, listed).await;
            }
        }
        let directories = self.directories.state().into_iter().filter_map(|d| {
            let route = d.status.as_ref()?.served.as_ref()?;
            (d.metadata.deletion_timestamp.is_none()).then(|| Claim {
                host: route.host.clone(),
                prefix: String::new(),
                namespace: String::new(),
                name: d.name_any(),
                uid: d.uid().unwrap_or_default(),
                since: route.since.parse().unwrap_or(jiff::Timestamp::MAX),
                whole_host: true,
            })
        });
        let mut served: Vec<Claim> = self
            .cards
            .state()
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| {
                let status = c.status.as_ref()?;
                let route = status.served.as_ref()?;
                status.content_hash.as_ref()?;
                Some(Claim {
                    host: route.host.clone(),
                    prefix: route.path_prefix.clone(),
                    namespace: c.namespace().unwrap_or_default(),
                    name: c.name_any(),
                    uid: c.uid().unwrap_or_default(),
                    since: route.since.parse().unwrap_or(jiff::Timestamp::MAX),
                    whole_host: false,
                })
            })
            .chain(directories)
            .collect();
        served.sort_by(|a, b| a.since.cmp(&b.since).then(a.card().cmp(&b.card())));
        let mut guard = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let mut claims = Claims::new(self.shared_hosts.clone());
            for claim in served {
                // A persisted overlap (e.g. a host no longer shared) is resolved in favour of
                // the older claim; the other card loses its route on its reconcile.
                let _ = claims.acquire(claim);
            }
            *guard = Some(claims);
        }
    }

    /// Whether the card or directory holding `claim` still exists (the same object: by uid).
    fn holder_exists(&self, claim: &Claim) -> bool {
        let uid = Some(claim.uid.as_str());
        if claim.whole_host {
            self.directories
                .get(&ObjectRef::new(&claim.name))
                .is_some_and(|d| d.uid().as_deref() == uid)
        } else {
            self.cards
                .get(&ObjectRef::new(&claim.name).within(&claim.namespace))
                .is_some_and(|c| c.uid().as_deref() == uid)
        }
    }

    /// Take `want` for its card, or say which card holds a conflicting claim. A holder that is
    /// gone (deleted without its cleanup: a tenant may remove the finalizer) holds nothing.
    pub fn acquire_claim(&self, want: Claim) -> Result<Claim, Error> {
        let mut freed = Vec::new();
        let result = self.with_claims(|claims| {
            while let Some(gone) = claims
                .blocker(&want)
                .filter(|b| !self.holder_exists(b))
                .map(|b| b.uid.clone())
            {
                freed.extend(claims.release(&gone));
            }
            let shared = claims.is_shared(&want.host);
            claims
                .acquire(want.clone())
                .map_err(|holder| Error::HostConflict {
                    host: want.host.clone(),
                    prefix: want.prefix.clone(),
                    held: format!("{}{}/…", holder.host, holder.prefix),
                    owner: holder.holder(),
                    why: if holder.namespace != want.namespace
                        && !shared
                        && !holder.whole_host
                        && !want.whole_host
                    {
                        " (one namespace holds a host that is not shared)"
                    } else {
                        ""
                    },
                })
        });
        self.recheck_hosts_of(&freed, Some(&want.uid));
        result
    }

    /// Keep only the claim of `card` on `keep` (host, prefix), or none; the hosts freed.
    pub fn retain_claims(&self, card: &AgentCard, keep: Option<(&str, &str)>) -> Vec<String> {
        self.retain_claims_of(&card.uid().unwrap_or_default(), keep)
    }

    /// Keep only the claim of object `uid` on `keep`, or none; the hosts freed.
    pub fn retain_claims_of(&self, uid: &str, keep: Option<(&str, &str)>) -> Vec<String> {
        self.with_claims(|claims| claims.retain(uid, keep))
    }

    /// The card's ConfigMap: as the operator last wrote it while the watch has not shown
    /// that write yet, else as the watch last saw it.
    pub fn configmap(&self, card: &AgentCard) -> Option<Arc<seen::SeenConfigMap>> {
        let ns = card.namespace().unwrap_or_default();
        let name = agentcard::build::configmap_name(card);
        let stored = self.configmaps.get(&ObjectRef::new(&name).within(&ns));
        let version = stored.as_ref().and_then(|c| c.resource_version());
        match self
            .configmaps_written
            .get("ConfigMap", &ns, &name, version.as_deref())
        {
            Some(mut written) => {
                written.metadata.resource_version = version;
                Some(Arc::new(written))
            }
            None => stored,
        }
    }

    /// Refuse `card` when its namespace has more cards than are published per namespace and
    /// it is not among the oldest that fit (creation time, then name). O(1) while the
    /// namespace is under the limit.
    pub fn check_namespace_limit(&self, card: &AgentCard) -> Result<(), Error> {
        let limit = self.max_cards_per_namespace;
        let ns = card.namespace().unwrap_or_default();
        let peers = {
            let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            if limit == 0 || index.count_in(&ns) <= limit {
                return Ok(());
            }
            index.in_namespace(&ns)
        };
        let key = |c: &AgentCard| {
            (
                c.metadata.creation_timestamp.clone().map(|t| t.0),
                c.name_any(),
            )
        };
        let mine = key(card);
        let older = peers
            .iter()
            .filter_map(|r| self.cards.get(r))
            .filter(|c| key(c) < mine)
            .count();
        if older < limit {
            return Ok(());
        }
        Err(Error::NamespaceCardLimit {
            namespace: ns,
            count: peers.len(),
            limit,
            position: older + 1,
        })
    }

    /// The Ingress `namespace/name` as last seen, if it exists.
    pub fn ingress(&self, namespace: &str, name: &str) -> Option<Arc<seen::SeenIngress>> {
        self.ingresses.get(&ObjectRef::new(name).within(namespace))
    }

    /// The HTTPRoute `namespace/name` as last seen, if routes are watched and it exists.
    pub fn route(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let store = self.routes.as_ref()?;
        store.get(&ObjectRef::new_with(name, routing::httproute_resource()).within(namespace))
    }

    /// Annotations of namespace `ns` (empty when unknown).
    pub fn namespace_annotations(&self, ns: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(&ObjectRef::new(ns))
            .map(|n| n.annotations().clone())
            .unwrap_or_default()
    }

    /// The next retry delay of `card` (see [`backoff_delay`]).
    pub fn next_backoff(&self, card: &AgentCard) -> Duration {
        self.next_backoff_for(&agentcard::build::card_key(card))
    }

    /// The next retry delay of the object `key` (see [`backoff_delay`]).
    pub fn next_backoff_for(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        // Jitter from the clock's nanoseconds: enough to spread retries, no RNG needed.
        let jitter =
            f64::from(jiff::Timestamp::now().subsec_nanosecond().unsigned_abs() % 1000) / 1000.0;
        backoff_delay(*n, jitter)
    }

    /// Forget the failures of `card` after a success.
    pub fn reset_backoff(&self, card: &AgentCard) {
        self.reset_backoff_for(&agentcard::build::card_key(card));
    }

    /// Forget the failures of the object `key` (after a success, or when it is gone).
    pub fn reset_backoff_for(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// What the operator wrote for `card` as the watches last saw it, with its ConfigMap
    /// `configmap` (read by the caller when it needs it).
    pub fn existing<'a>(
        &self,
        card: &AgentCard,
        configmap: Option<&'a seen::SeenConfigMap>,
    ) -> agentcard::apply::Existing<'a> {
        let ns = card.namespace().unwrap_or_default();
        let opns = &self.settings.operator_namespace;
        let public = agentcard::build::ingress_name(&ns, &card.name_any());
        let backend = agentcard::build::backend_ingress_name(card);
        agentcard::apply::Existing {
            configmap,
            ingress: self.ingress(opns, &public),
            backend: self.ingress(&ns, &backend),
            route: self.route(opns, &public),
            backend_route: self.route(&ns, &backend),
            routes_accepted: false,
        }
    }

    /// Forget a card that is gone, whether or not its finalizer ran (a tenant may remove it):
    /// release its claims, and remove what it had in the operator's namespace, unless a card
    /// of the same name took its place (that one's reconcile owns those names now).
    pub async fn forget_card(&self, card: &AgentCard) -> Result<(), Error> {
        let (ns, name) = (card.namespace().unwrap_or_default(), card.name_any());
        let replaced = self
            .cards
            .get(&ObjectRef::new(&name).within(&ns))
            .is_some_and(|c| c.uid() != card.uid());
        if let Some(uid) = card.uid() {
            self.sources.forget(&uid);
        }
        if !replaced {
            // Its routes go now, the backend's too: garbage collection would take the owned
            // ones, but only when it gets to them, and the agent's path stays routed meanwhile.
            let existing = self.existing(card, None);
            agentcard::apply::unpublish(&self.client, card, &self.settings, &existing).await?;
            let key = agentcard::build::card_key(card);
            self.metrics.set_ready(key.clone(), None);
            self.reset_backoff_for(&key);
        }
        let freed = self.retain_claims(card, None);
        self.recheck_hosts(&freed, card);
        Ok(())
    }
}

/// Retry delay after the `failures`-th consecutive failure: 1 s doubling to at most 5 min,
/// scaled by 0.8–1.2 with `jitter` in [0, 1) so failing cards do not retry in lockstep.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let base = Duration::from_secs(1)
        .saturating_mul(1u32 << failures.saturating_sub(1).min(9))
        .min(Duration::from_secs(300));
    base.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0))
}

/// Run the controllers until the process stops or `run` fails to start.
pub async fn run(
    client: Client,
    hubs: Arc<crate::hub::Hubs>,
    config: Config,
    metrics: Arc<metrics::ControllerMetrics>,
) -> Result<(), Error> {
    let opns = config.settings.operator_namespace.clone();
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), &opns);
    // An API server that fails now (restarting, etcd away) is waited for with backoff: failing
    // here would end the controllers and the process with them.
    let mut failures = 0u32;
    if config.create_signing_secret {
        loop {
            match keys::ensure_secret(&secrets_api, &config.signing_secret, &opns).await {
                Ok(created) => {
                    if created {
                        tracing::info!(secret = %config.signing_secret, "created the signing Secret with a fresh ES256 key");
                    }
                    break;
                }
                // A refusal (invalid name, no rights) does not pass by waiting: fail.
                Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                    return Err(Error::Kube(kube::Error::Api(s)));
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let delay = backoff_delay(failures, 0.5);
                    tracing::warn!(error = %e, retry_in = ?delay, "could not read or create the signing Secret");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    // The process's shared watches (see `crate::hub`): their stores are read by both
    // controllers, their events fan out to what each one triggers (see `watches`).
    let written = Arc::new(watches::WriteMemo::default());
    let statuses = Arc::new(watches::Unseen::<crate::crd::AgentCardStatus>::default());
    let configmaps_written = Arc::new(watches::Unseen::<seen::SeenConfigMap>::default());
    let index = Arc::new(Mutex::new(watches::CardIndex::default()));
    let scope = watches::Scope {
        namespace: config.watch_namespace.clone(),
        limit: config.max_cards_per_namespace,
    };
    let cards = hubs.cards.store();
    let (card_refs_tx, card_refs_rx) = futures::channel::mpsc::unbounded::<ObjectRef<AgentCard>>();
    let (dir_recount_tx, dir_recount_rx) = futures::channel::mpsc::unbounded::<()>();
    let (gone_tx, mut gone_rx) = futures::channel::mpsc::unbounded::<Arc<AgentCard>>();
    let _card_task = AbortOnDrop(tokio::spawn(watches::fan_out_cards(
        hubs.cards.subscribe(),
        cards.clone(),
        index.clone(),
        scope.clone(),
        statuses.clone(),
        watches::CardTargets {
            cards: card_refs_tx.clone(),
            directories: dir_recount_tx.clone(),
            gone: gone_tx,
        },
    )));
    // Bounded by default (`--concurrency`): each reconcile in flight holds API connections
    // and buffers; at 10,000 cards unbounded reconciles took the most memory. The
    // controller's triggers come from the fan-out above (the card store is shared).
    let controller = Controller::for_stream(
        futures::stream::pending::<Result<AgentCard, watcher::Error>>(),
        cards.clone(),
    )
    .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency));

    // Namespaces: labels re-count the directories, allowed hosts re-check the cards.
    let ns_store = hubs.namespaces.store();
    let _ns_task = AbortOnDrop(tokio::spawn(watches::fan_out_namespaces(
        hubs.namespaces.subscribe(),
        index.clone(),
        card_refs_tx.clone(),
        dir_recount_tx.clone(),
    )));
    // The cards' ConfigMaps: read from the shared store; an edit or deletion repairs them.
    let configmaps = hubs.configmaps.store();
    let (cms_listed_tx, cms_listed) = tokio::sync::watch::channel(false);
    let _cm_task = AbortOnDrop(tokio::spawn(watches::fan_out_configmaps(
        hubs.configmaps.subscribe(),
        scope.clone(),
        written.clone(),
        configmaps_written.clone(),
        card_refs_tx.clone(),
        cms_listed_tx,
    )));
    // Re-sign every card of the controller's (not every card in the shared store).
    let (all_tx, mut all_rx) = futures::channel::mpsc::unbounded::<()>();
    let (all_index, all_refs) = (index.clone(), card_refs_tx.clone());
    let _all_task = AbortOnDrop(tokio::spawn(async move {
        while all_rx.next().await.is_some() {
            let keys = all_index
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .shared_keys();
            for key in keys {
                let _ = all_refs.unbounded_send(ObjectRef::clone(&key));
            }
        }
    }));
    // Every card is looked at again about once per resync period (see `watches::resync`).
    let _resync_task = AbortOnDrop(tokio::spawn(watches::resync(
        index.clone(),
        agentcard::RESYNC,
        card_refs_tx.clone(),
    )));
    drop(card_refs_tx);
    drop(dir_recount_tx);

    // The signing Secret: publish the JWKS and re-sign every card when it changes.
    let (secret_store, secret_writer) = reflector::store();
    let secret_feed = watcher(
        secrets_api,
        watcher::Config::default().fields(&format!("metadata.name={}", config.signing_secret)),
    )
    .default_backoff()
    .reflect(secret_writer);
    let mut all_tx2 = all_tx.clone();
    // One parse per Secret version, shared with the reconciles and the JWKS publisher.
    let key_cache = Arc::new(KeyCache::default());
    let publisher_cache = key_cache.clone();
    let (jwks_tx, mut jwks_rx) = futures::channel::mpsc::unbounded::<()>();
    let secret_jwks_tx = jwks_tx.clone();
    let (keys_store, keys_ref) = (
        secret_store.clone(),
        ObjectRef::<Secret>::new(&config.signing_secret).within(&opns),
    );
    let _secret_task = AbortOnDrop(tokio::spawn(async move {
        futures::pin_mut!(secret_feed);
        // Every card is signed again only when the keys or the active key change (or the Secret
        // comes or goes): other label and annotation edits, and relists, leave the cards alone.
        // Acted on once the store holds the change: a relist's objects reach the store only
        // at its end, so a trigger at `InitApply` would find the Secret missing there.
        let mut last_keys = None;
        while let Some(ev) = secret_feed.next().await {
            match ev {
                Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) => {}
                _ => continue,
            }
            if let Some(secret) = keys_store.get(&keys_ref) {
                if let Err(e) = publisher_cache.get(&secret) {
                    tracing::warn!(error = %e, "the signing Secret is unusable; cards keep their last signatures")
                }
            }
            let _ = secret_jwks_tx.unbounded_send(());
            let keys = Some(keys_store.get(&keys_ref).map(|s| {
                let active = s.annotations().get(keys::ANN_ACTIVE_KEY).cloned();
                (s.data.clone(), active)
            }));
            if keys != last_keys {
                last_keys = keys;
                let _ = all_tx2.send(()).await;
            }
        }
    }));
    // The JWKS ConfigMap: deleted or edited by anyone, it is written again.
    let jwks_feed = watcher(
        Api::<ConfigMap>::namespaced(client.clone(), &opns),
        watcher::Config::default().fields(&format!("metadata.name={}", keys::JWKS_CONFIGMAP)),
    )
    .default_backoff();
    let _jwks_watch_task = AbortOnDrop(tokio::spawn(async move {
        futures::pin_mut!(jwks_feed);
        while let Some(ev) = jwks_feed.next().await {
            if matches!(
                ev,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
            ) {
                let _ = jwks_tx.unbounded_send(());
            }
        }
    }));
    // Publish the JWKS of the current keys after each trigger; a failed write is retried with
    // backoff (a new trigger retries at once).
    let (jwks_client, jwks_ns, jwks_secrets, jwks_cache) = (
        client.clone(),
        opns.clone(),
        secret_store.clone(),
        key_cache.clone(),
    );
    let jwks_secret_ref = ObjectRef::<Secret>::new(&config.signing_secret).within(&opns);
    let (jwks_published_tx, jwks_published) = tokio::sync::watch::channel(None::<PublishedKeys>);
    let jwks_max_age = config.jwks_max_age;
    let resign_all = all_tx.clone();
    // One recorder for the whole process: the card controller and the key rotation share it.
    let recorder = Arc::new(events::Events::new(
        client.clone(),
        Reporter {
            controller: MANAGER.into(),
            instance: Some(config.instance.clone()),
        },
    ));
    let rotation_recorder = recorder.clone();
    let (jwks_cards, jwks_served) = (configmaps.clone(), cards.clone());
    let mut jwks_cards_listed = cms_listed.clone();
    let _jwks_task = AbortOnDrop(tokio::spawn(async move {
        // Keys that left the Secret stay published while a served card is signed with them:
        // which ones are, the card ConfigMaps say (once listed).
        let _ =
            tokio::time::timeout(Duration::from_secs(30), jwks_cards_listed.wait_for(|l| *l)).await;
        tracing::debug!("the JWKS publisher starts");
        let mut failures = 0u32;
        let mut last = None;
        // When the active key may start signing, while a rotation waits.
        let mut wake: Option<tokio::time::Instant> = None;
        loop {
            let triggered = match wake {
                Some(at) => tokio::select! {
                    more = jwks_rx.next() => more.is_some(),
                    () = tokio::time::sleep_until(at) => true,
                },
                None => jwks_rx.next().await.is_some(),
            };
            if !triggered {
                return;
            }
            loop {
                let Some((secret, keys)) = jwks_secrets
                    .get(&jwks_secret_ref)
                    .and_then(|s| jwks_cache.get(&s).ok().map(|k| (s, k)))
                else {
                    tracing::debug!("no usable signing Secret yet: the JWKS waits for it");
                    break;
                };
                // Bounded: a request the API server never answers is a failure, retried.
                let published = tokio::time::timeout(
                    JWKS_WRITE_TIMEOUT,
                    keys::publish_jwks(
                        &jwks_client,
                        &keys,
                        &jwks_ns,
                        jwks_max_age,
                        &mut last,
                        || served_kids(&jwks_served, &jwks_cards),
                    ),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(kube::Error::Service(
                        format!("no answer within {JWKS_WRITE_TIMEOUT:?}").into(),
                    ))
                });
                match published {
                    Ok((rotation, retained)) => {
                        tracing::debug!(signing = ?rotation.signing, retained, "JWKS published");
                        let before = jwks_published_tx
                            .borrow()
                            .as_ref()
                            .map(|p| p.rotation.clone());
                        wake = rotation.activates_at.map(|at| {
                            let wait = jiff::Timestamp::now().duration_until(at);
                            let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
                            tokio::time::Instant::now() + wait + Duration::from_millis(50)
                        });
                        if retained > 0 {
                            // A retained key goes once no served card uses it: look again.
                            let every = Duration::from_secs(u64::from(jwks_max_age))
                                .clamp(Duration::from_secs(1), RETAINED_KEY_RECHECK);
                            let soon = tokio::time::Instant::now() + every;
                            wake = Some(wake.map_or(soon, |w| w.min(soon)));
                        }
                        let note = rotation_note(before.as_ref(), &rotation, keys.active.kid());
                        jwks_published_tx.send_replace(Some(PublishedKeys {
                            version: keys.version.clone(),
                            rotation: rotation.clone(),
                        }));
                        if before
                            .as_ref()
                            .is_some_and(|b| b.signing != rotation.signing)
                        {
                            // Other keys sign now: every card is signed again.
                            let _ = resign_all.unbounded_send(());
                        }
                        if let Some((reason, note)) = note {
                            tracing::info!(reason, "{note}");
                            let event = Event {
                                type_: EventType::Normal,
                                reason: reason.into(),
                                note: Some(note),
                                action: "RotateKeys".into(),
                                secondary: None,
                            };
                            if let Err(e) = rotation_recorder
                                .publish(&event, &kube::Resource::object_ref(&*secret, &()))
                                .await
                            {
                                tracing::warn!(error = %e, "could not record an Event");
                            }
                        }
                        failures = 0;
                        break;
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let delay = backoff_delay(failures, 0.5);
                        tracing::warn!(error = %e, retry_in = ?delay, "could not publish the JWKS");
                        tokio::select! {
                            () = tokio::time::sleep(delay) => {}
                            more = jwks_rx.next() => if more.is_none() { return },
                        }
                    }
                }
            }
        }
    }));

    // The Ingresses we write, cached so unchanged ones are not written again.
    let (ingress_store, ingress_writer) = reflector::store();
    let ingress_memo = written.clone();
    let ingress_feed = watcher(
        Api::<seen::SeenIngress>::all(client.clone()),
        watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}")),
    )
    .default_backoff()
    .reflect(ingress_writer)
    .inspect(move |ev| ingress_memo.forget_event("Ingress", ev));
    let (_ingress_task, ingress_touched) =
        watches::drive(ingress_feed, watches::WrittenFor::of::<seen::SeenIngress>);

    // With HTTPRoute routing: the routes we write, for repair, and for the Gateways' verdicts
    // (their status) that the cards' Routed condition reports.
    let (route_refs_tx, route_refs_rx) =
        futures::channel::mpsc::unbounded::<ObjectRef<AgentCard>>();
    let (dir_route_tx, dir_route_rx) =
        futures::channel::mpsc::unbounded::<ObjectRef<AgentDirectory>>();
    let dir_ingress_tx = dir_route_tx.clone();
    let mut route_store = None;
    let mut _route_task = None;
    if config.settings.routing.kind == routing::RouteKind::HttpRoute {
        let ar = routing::httproute_resource();
        let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        route_store = Some(writer.as_reader());
        let route_memo = written.clone();
        let feed = watcher(
            Api::<DynamicObject>::all_with(client.clone(), &ar),
            watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}")),
        )
        .default_backoff()
        .modify(|r: &mut DynamicObject| watches::compact_meta(&mut r.metadata))
        .reflect(writer)
        .inspect(move |ev| route_memo.forget_event("HTTPRoute", ev))
        .touched_objects();
        let operator_ns = opns.clone();
        let tx = route_refs_tx.clone();
        let dir_tx = dir_route_tx.clone();
        _route_task = Some(AbortOnDrop(tokio::spawn(async move {
            futures::pin_mut!(feed);
            while let Some(ev) = feed.next().await {
                let Ok(route) = ev else { continue };
                let route_ns = route.metadata.namespace.clone().unwrap_or_default();
                let annotations = route.metadata.annotations.clone().unwrap_or_default();
                if let Some(dir) = annotations.get(agentdirectory::ANN_DIRECTORY) {
                    if route_ns == operator_ns {
                        let _ = dir_tx.unbounded_send(ObjectRef::new(dir));
                    }
                    continue;
                }
                let Some((ns, name)) = route
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANN_CARD))
                    .and_then(|c| c.split_once('/'))
                else {
                    continue;
                };
                if route_ns == operator_ns || route_ns == ns {
                    let _ = tx.unbounded_send(ObjectRef::new(name).within(ns));
                }
            }
        })));
    }
    drop(route_refs_tx);
    drop(dir_route_tx);
    // Directories count from the shared card and namespace stores: the fan-out re-counts
    // them only once a change is in the stores. Card deletions also tell the sweeper which
    // cards are gone: one whose finalizer was removed never gets a Cleanup reconcile.
    let (peers_tx, peers_rx) = futures::channel::mpsc::unbounded::<ObjectRef<AgentCard>>();
    let (dir_peers_tx, dir_peers_rx) =
        futures::channel::mpsc::unbounded::<ObjectRef<AgentDirectory>>();
    // Directories: from the shared watch; each change reconciles that directory.
    let directories = hubs.directories.store();
    let (listed_tx, directories_listed) = tokio::sync::watch::channel(false);
    let (dir_refs_tx, dir_refs_rx) =
        futures::channel::mpsc::unbounded::<ObjectRef<AgentDirectory>>();
    let mut dir_feed = hubs.directories.subscribe();
    let _dir_task = AbortOnDrop(tokio::spawn(async move {
        // A relist's directories are triggered at its end, once the store holds them.
        let mut relisted = Vec::new();
        while let Some(event) = dir_feed.next().await {
            match event {
                watcher::Event::InitDone => {
                    let _ = listed_tx.send(true);
                    for key in relisted.drain(..) {
                        let _ = dir_refs_tx.unbounded_send(key);
                    }
                }
                watcher::Event::InitApply(d) => relisted.push(ObjectRef::from_obj(d.as_ref())),
                watcher::Event::Apply(d) => {
                    let _ = dir_refs_tx.unbounded_send(ObjectRef::from_obj(d.as_ref()));
                }
                watcher::Event::Init => relisted.clear(),
                watcher::Event::Delete(_) => {}
            }
        }
    }));
    // A directory re-counts every card it lists (O(cards)): triggered by any card event, its
    // reconciles are debounced, so a bulk apply costs a few counts, not one per card.
    let directory_controller = Controller::for_stream(
        futures::stream::pending::<Result<AgentDirectory, watcher::Error>>(),
        directories.clone(),
    )
    .with_config(kube::runtime::controller::Config::default().debounce(DIRECTORY_DEBOUNCE));
    let directories_wait = match Api::<AgentDirectory>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => None,
        Err(kube::Error::Api(s)) if s.code == 404 => Some(Duration::ZERO),
        Err(e) => {
            tracing::warn!(error = %e, "could not tell whether AgentDirectories are installed");
            Some(Duration::from_secs(10))
        }
    };
    let ctx = Arc::new(Context {
        peers: peers_tx,
        index,
        configmaps,
        written,
        configmaps_written,
        statuses,
        max_cards_per_namespace: config.max_cards_per_namespace,
        max_card_bytes: config.max_card_bytes,
        routes: route_store,
        directory_peers: dir_peers_tx,
        directories: directories.clone(),
        ingresses: ingress_store.clone(),
        recorder,
        client: client.clone(),
        metrics,
        settings: config.settings.clone(),
        allowed_hosts: config.allowed_hosts.clone(),
        cards: cards.clone(),
        namespaces: ns_store.clone(),
        secrets: secret_store.clone(),
        signing_secret: config.signing_secret.clone(),
        key_cache,
        failures: Mutex::new(HashMap::new()),
        shared_hosts: config.shared_hosts.clone(),
        claims: Mutex::new(None),
        directories_wait,
        directories_listed,
        jwks_published,
        sources: agentcard::source::SourceCache::default(),
        source_http: agentcard::source::http_client()
            .map_err(|e| Error::Internal(format!("building the source HTTP client: {e}")))?,
    });
    let sweeper_ctx = ctx.clone();
    let _sweeper_task = AbortOnDrop(tokio::spawn(async move {
        while let Some(card) = gone_rx.next().await {
            if let Err(e) = sweeper_ctx.forget_card(&card).await {
                tracing::warn!(card = %agentcard::build::card_key(&card), category = e.category(), error = %e, "could not clean up after a deleted card");
            }
        }
    }));
    tracing::debug!("waiting for the stores to be listed");
    // Start reconciling only with the stores the reconciler reads: a reconcile before the
    // Ingresses or ConfigMaps are listed would take them for missing and create them again
    // (a conflict and a GET each, for every card, at every start).
    let _ = ns_store.wait_until_ready().await;
    let _ = tokio::time::timeout(Duration::from_secs(30), secret_store.wait_until_ready()).await;
    // (Bounded: a store wakes only its latest waiter.)
    let bound = Duration::from_secs(30);
    let _ = tokio::time::timeout(bound, ctx.ingresses.wait_until_ready()).await;
    let mut cms_listed = cms_listed;
    let _ = tokio::time::timeout(bound, cms_listed.wait_for(|l| *l)).await;
    tracing::debug!("the stores are listed: reconciling");
    if let Some(routes) = &ctx.routes {
        let _ = tokio::time::timeout(bound, routes.wait_until_ready()).await;
    }

    // Directories: count and route follow cards and namespace labels.
    let directory_run = directory_controller
        .reconcile_all_on(dir_recount_rx)
        .reconcile_on(futures::stream::select_all([
            dir_refs_rx.boxed(),
            dir_peers_rx.boxed(),
            dir_route_rx.boxed(),
        ]))
        .run(
            agentdirectory::reconcile,
            agentdirectory::error_policy,
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "directory controller event");
            }
        });

    let repair_cards = cards.clone();
    let operator_ns = opns.clone();
    // Someone deleted or edited an Ingress we write: put it back. An Ingress outside the
    // operator's namespace only ever names a card of its own namespace.
    let repairs = ingress_touched.filter_map(move |ing: watches::WrittenFor| {
        let owner = if let Some(dir) = &ing.directory {
            if ing.namespace == operator_ns {
                let _ = dir_ingress_tx.unbounded_send(ObjectRef::new(dir));
            }
            None
        } else {
            ing.card
                .as_deref()
                .and_then(|c| c.split_once('/'))
                .filter(|(ns, _)| ing.namespace == operator_ns || ing.namespace == *ns)
                .map(|(ns, name)| ObjectRef::<AgentCard>::new(name).within(ns))
                .filter(|r| repair_cards.get(r).is_some())
        };
        std::future::ready(owner)
    });
    let card_run = controller
        .reconcile_on(futures::stream::select_all([
            card_refs_rx.boxed(),
            peers_rx.boxed(),
            route_refs_rx.boxed(),
            repairs.boxed(),
        ]))
        .run(agentcard::reconcile, agentcard::error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "controller event");
            }
        });
    // Both run until the process stops; either ending ends the controllers.
    tokio::select! {
        () = card_run => {}
        () = directory_run => {}
    }
    drop(all_tx);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_failure_up_to_five_minutes_with_jitter() {
        let secs = |n| backoff_delay(n, 0.5).as_secs_f64();
        assert_eq!([secs(1), secs(2), secs(3), secs(4)], [1.0, 2.0, 4.0, 8.0]);
        assert_eq!(secs(9), 256.0);
        assert_eq!(secs(10), 300.0);
        assert_eq!(secs(1000), 300.0);
        assert!((backoff_delay(1, 0.0).as_secs_f64() - 0.8).abs() < 1e-9);
        assert!((backoff_delay(1, 0.999).as_secs_f64() - 1.2).abs() < 1e-3);
    }
}
