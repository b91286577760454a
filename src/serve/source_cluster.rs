//! Feed the index from the cluster: AgentCards' status (what the lease holder decided) and the
//! card ConfigMaps it names (the bytes).
//!
//! Everything about routing — host, path prefix, legacy path, max-age, `Last-Modified`, claim
//! time — comes from `status.served` of the AgentCard, which only the operator writes (tenants
//! get AgentCards, never `agentcards/status`). The bytes come from the ConfigMap the status
//! names (`status.configMap`, in the card's namespace, controlled by that card), and only when
//! their hash is the status's `contentHash`. ConfigMap annotations and labels, the card's spec,
//! labels and annotations are never read for routing, so nothing a tenant writes can re-point a
//! host. Until new bytes are confirmed the last confirmed version stays served; a card whose
//! status no longer names a route, or that is being deleted, is dropped at once (whatever the
//! garbage collector does later). The JWKS ConfigMap is taken from the operator's own namespace
//! only. A card whose route names an `extendedPath` gets its extended card the same way: the
//! ConfigMap `status.extendedCard` names, controlled by the card, with its hash, and who may
//! read it from the card's `spec.extendedCard.auth` (it gates that card's own bytes only).
//!
//! The same watch feeds the directories ([`Sites`]): one [`Entry`] per served card, the
//! Namespaces' labels and the AgentDirectories (routed by their status, like cards). When any
//! of them changes the directories whose listing changed are rebuilt shortly after (changes
//! within 50 ms are batched) and swapped into the index; the change-feed logs are read back
//! from their ConfigMaps ([`Persisted`]). Every watch re-lists after disconnects with
//! exponential backoff; while the API server is unreachable the last known cards and
//! directories stay.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::watcher::Event;
use kube::ResourceExt;

use crate::contract::*;
use crate::crd::{AgentDirectory, ServedRoute};
use crate::directory::entry::{Drift, Entry, Placement};
use crate::directory::federation::Federation;
use crate::directory::feed::persisted::{Gone, Persisted};
use crate::directory::sites::hosted::Hosted;
use crate::directory::sites::{Listed, Sites};
use crate::hub::{Hubs, StoredCard};
use crate::index::{CardEntry, ExtendedRoute, Index, Published};
use crate::serve::Content;
use crate::store::{CardFields, MetaView, SeenConfigMap};

/// How long changes are gathered before the directories are rebuilt.
const REBUILD_DELAY: Duration = Duration::from_millis(50);

fn source(cm: &SeenConfigMap) -> String {
    format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any())
}

/// The uid of the AgentCard controlling `cm`, if one does.
fn card_owner(cm: &SeenConfigMap) -> Option<&str> {
    cm.seen
        .controller()
        .filter(|o| o.kind == "AgentCard" && o.api_version.starts_with("agentcard.dev/"))
        .map(|o| o.uid)
}

/// A card ConfigMap as the feed keeps it: its controlling AgentCard and its bytes.
#[derive(Clone)]
struct CardBytes {
    /// The controlling card's uid: the `Arc` the view's map of cards holds, when it holds the
    /// card.
    owner: Option<Arc<str>>,
    /// The content digest of `body` ([`content_digest`]).
    hash: [u8; 16],
    /// Shared with what the index serves (no copy per card).
    body: Bytes,
}

/// The same owner and the same bytes: `hash` is the bytes' content hash, so the bytes
/// themselves are not compared again on every ConfigMap event.
impl PartialEq for CardBytes {
    fn eq(&self, other: &Self) -> bool {
        self.owner == other.owner && self.hash == other.hash
    }
}

/// What the feed needs of an AgentCard: where its ConfigMap is, what status confirms, and
/// what directories select it by.
#[derive(Clone)]
struct CardView {
    /// `namespace/name`: also the source of the card's index entry (one copy, shared).
    key: Arc<str>,
    /// The card in its stored form: the card store's own `Arc` where controllers run (no
    /// copy), the one holder in a serving replica, which keeps no store ([`StoredCard::KEEP`]).
    card: Arc<dyn CardFields>,
}

impl CardView {
    fn of(card: Arc<dyn CardFields>) -> Self {
        let meta = card.meta();
        CardView {
            key: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            )
            .into(),
            card,
        }
    }

    fn namespace(&self) -> &str {
        self.card.meta().namespace.as_deref().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.card.meta().name.as_deref().unwrap_or_default()
    }

    fn route(&self) -> Option<&ServedRoute> {
        self.card.served()
    }

    fn hash(&self) -> Option<&String> {
        self.card.content_hash()
    }

    fn config_map(&self) -> Option<&str> {
        self.card.config_map()
    }

    fn url(&self) -> Option<&str> {
        self.card.url()
    }

    fn key_id(&self) -> Option<&str> {
        self.card.key_id()
    }

    fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.card.meta().labels.as_ref().unwrap_or(&EMPTY)
    }

    /// The verdicts of directories that require approval, as the operator wrote them.
    fn approvals(&self) -> &[crate::crd::ApprovalStatus] {
        self.card.approvals()
    }

    /// `BackendReady` as the operator found it: ready, not ready, or not known.
    fn reachable(&self) -> Option<bool> {
        self.card
            .conditions()
            .iter()
            .find(|c| c.type_ == "BackendReady")
            .map(|c| c.status == "True")
    }

    /// `Drifted` as the operator found it; `None` while drift is off.
    fn drift(&self) -> Option<Box<Drift>> {
        self.card
            .conditions()
            .iter()
            .find(|c| c.type_ == "Drifted")
            .map(|c| Box::new(Drift::of_condition(&c.reason, &c.message)))
    }

    /// Who may read the extended card (`spec.extendedCard.auth`).
    fn extended_auth(&self) -> Option<&crate::crd::ExtendedAuth> {
        self.card.extended_auth()
    }

    fn deleting(&self) -> bool {
        self.card.meta().deletion_timestamp.is_some()
    }

    /// Whether `self` and `other` serve the same (what directories select them by aside).
    fn serves_as(&self, other: &CardView) -> bool {
        self.key == other.key
            && self.route() == other.route()
            && self.hash() == other.hash()
            && self.config_map() == other.config_map()
            && self.url() == other.url()
            && self.key_id() == other.key_id()
            && self.reachable() == other.reachable()
            && self.drift() == other.drift()
            && self.card.revision() == other.card.revision()
            && self.card.extended_card() == other.card.extended_card()
            && self.extended_auth() == other.extended_auth()
            && self.deleting() == other.deleting()
    }
}

/// `card` as a directory may list it, with its `entry`.
fn listed(card: &CardView, entry: Arc<Entry>) -> Listed {
    Listed {
        namespace: card.namespace().to_string(),
        labels: card.labels().clone(),
        entry,
        approvals: card.approvals().into(),
    }
}

/// The directory entry of `card` served on `host` with `body` (its content hash `hash`);
/// `None` when the bytes are not a card.
fn entry_of(card: &CardView, host: &str, hash: &str, body: Bytes) -> Option<Arc<Entry>> {
    let placement = Placement {
        namespace: card.namespace().to_string(),
        name: card.name().to_string(),
        host: host.to_string(),
        url: card.url().unwrap_or_default().to_string(),
        content_hash: hash.to_string(),
        key_id: card.key_id().unwrap_or_default().to_string(),
        updated_at: card
            .route()
            .map(|r| r.published_at.clone())
            .unwrap_or_default(),
        reachable: card.reachable(),
        lifecycle: card.route().and_then(|r| r.lifecycle.clone()),
        drift: card.drift(),
        revision: card.card.revision(),
    };
    Entry::build(placement, body).map(Arc::new)
}

/// The feed's view of both watches; decides what the index serves.
struct ClusterView {
    index: Arc<Index>,
    /// The directories' sites and change-feed logs, as requests read them.
    hosted: Arc<Hosted>,
    /// The directories: what each lists of the served cards.
    sites: Sites,
    operator_ns: String,
    /// Card ConfigMaps by `namespace/name`.
    cms: HashMap<String, CardBytes>,
    /// Extended card ConfigMaps by `namespace/name`.
    extended_cms: HashMap<String, CardBytes>,
    /// AgentCards by uid.
    cards: HashMap<Arc<str>, CardView>,
    /// The directories' change-feed logs as their ConfigMaps bring them.
    logs: Persisted,
    relist_cms: Option<HashSet<String>>,
    relist_cards: Option<HashSet<String>>,
    cms_synced: bool,
    cards_synced: bool,
}

impl ClusterView {
    fn new(content: Content, federation: Arc<Federation>, operator_ns: String) -> ClusterView {
        ClusterView {
            index: content.cards,
            hosted: content.directories,
            sites: Sites::new(federation),
            operator_ns,
            cms: HashMap::new(),
            extended_cms: HashMap::new(),
            cards: HashMap::new(),
            logs: Persisted::default(),
            relist_cms: None,
            relist_cards: None,
            cms_synced: false,
            cards_synced: false,
        }
    }

    /// Bring the index in line with card `uid`: its confirmed bytes on its decided route, the
    /// last confirmed bytes while new ones are on their way, or nothing.
    fn settle(&mut self, uid: &str) {
        let Some(card) = self.cards.get(uid) else {
            return;
        };
        let (Some(route), Some(hash), Some(cm_name), false) = (
            card.route(),
            card.hash(),
            card.config_map(),
            card.deleting(),
        ) else {
            let key = card.key.clone();
            self.unserve(&key);
            return;
        };
        let bytes = self
            .cms
            .get(&format!("{}/{cm_name}", card.namespace()))
            .filter(|b| b.owner.as_deref() == Some(uid) && is_content_hash(hash, &b.hash))
            .map(|b| b.body.clone());
        let body = match bytes {
            Some(body) => body,
            // The route may have changed with the bytes already served: re-route those.
            None => match self.index.entry(&card.key) {
                Some(e) if e.content.hash() == hash.as_str() => e.content.body.clone(),
                _ => return,
            },
        };
        let max_age = u32::try_from(route.max_age_seconds.clamp(0, 86_400)).unwrap_or(0);
        let since = crate::index::rfc3339(&route.since).unwrap_or(UNIX_EPOCH);
        let modified = crate::index::rfc3339(&route.published_at).unwrap_or(since);
        let host = route.host.trim().trim_end_matches('.').to_ascii_lowercase();
        let content = Arc::new(
            Published::new(body.clone(), modified, max_age)
                .with_lifecycle(route.lifecycle.as_deref()),
        );
        let key = card.key.clone();
        let extended = self.extended_route(uid, card, route, modified, max_age);
        self.index.upsert(CardEntry {
            source: key.clone(),
            host: host.as_str().into(),
            prefix: normalize_prefix(&route.path_prefix),
            legacy: route.legacy_path,
            created: since,
            content,
            extended,
        });
        let listed = if self.sites.keeps_entries() {
            entry_of(card, &host, hash, body).map(|entry| listed(card, entry))
        } else {
            None
        };
        self.sites.served(&key, listed);
    }

    /// What card `uid` answers on its REST `extendedAgentCard` path, when the operator routes
    /// that path (`route.extendedPath`): with `spec.extendedCard.auth`, the extended card whose
    /// bytes `status.extendedCard` confirms (the ConfigMap it names, controlled by the card,
    /// with its hash), or the last confirmed ones while new ones are on their way; without,
    /// the not-configured error.
    fn extended_route(
        &self,
        uid: &str,
        card: &CardView,
        route: &ServedRoute,
        modified: std::time::SystemTime,
        max_age: u32,
    ) -> Option<Arc<ExtendedRoute>> {
        let path = route.extended_path.clone()?;
        // Configured while the status says an extended card is published (so the error is
        // never answered while the public card still advertises one); who may read it is the
        // spec's say at once (a narrowed audience applies before the next reconcile), nobody
        // while the spec has no auth left.
        let status = card.card.extended_card();
        let auth = status.map(|_| Arc::new(card.extended_auth().cloned().unwrap_or_default()));
        let content = match (&auth, status) {
            (Some(_), Some(st)) => self
                .extended_cms
                .get(&format!("{}/{}", card.namespace(), st.config_map))
                .filter(|b| {
                    b.owner.as_deref() == Some(uid) && is_content_hash(&st.content_hash, &b.hash)
                })
                .map(|b| {
                    Arc::new(Published::new(b.body.clone(), modified, max_age).private(max_age))
                })
                .or_else(|| {
                    let served = self.index.entry(&card.key)?;
                    served.extended.as_ref()?.content.clone()
                }),
            _ => None,
        };
        Some(Arc::new(ExtendedRoute {
            path,
            auth,
            content,
        }))
    }

    /// The directory entry of `card` as the index serves it now (see [`entry_of`]).
    fn served_entry(&self, card: &CardView) -> Option<Arc<Entry>> {
        let served = self.index.entry(&card.key)?;
        entry_of(
            card,
            &served.host,
            served.content.hash(),
            served.content.body.clone(),
        )
    }

    /// Keep directory entries exactly while a directory exists: built for every served card
    /// when the first one appears (the sites drop them with the last).
    fn sync_listing(&mut self) {
        if self.sites.wants_all() {
            let all: Vec<(String, Listed)> = self
                .cards
                .values()
                .filter_map(|c| Some((c.key.to_string(), listed(c, self.served_entry(c)?))))
                .collect();
            self.sites.fill(all);
        }
    }

    /// Stop serving card `key` (and listing it).
    fn unserve(&mut self, key: &str) {
        self.index.remove(key);
        self.sites.unserved(key);
    }

    fn apply_cm(&mut self, cm: Arc<SeenConfigMap>) {
        match cm.seen.label(LABEL_CONTENT) {
            Some(CONTENT_CARD) => {
                let Some(body) = cm.bytes(KEY_CARD) else {
                    return self.remove_cm(&cm);
                };
                let owner = card_owner(&cm).map(|uid| self.uid_key(uid));
                // The served bytes are the stored ConfigMap's own (shared, no copy).
                let bytes = CardBytes {
                    owner: owner.clone(),
                    hash: content_digest(body),
                    body: body.clone(),
                };
                let previous = self.cms.insert(source(&cm), bytes.clone());
                if previous.as_ref() == Some(&bytes) {
                    return;
                }
                if let Some(old) = previous
                    .and_then(|p| p.owner)
                    .filter(|o| Some(o) != owner.as_ref())
                {
                    self.settle(&old);
                }
                if let Some(uid) = owner {
                    self.settle(&uid);
                }
            }
            Some(CONTENT_EXTENDED) => {
                let Some(body) = cm.bytes(KEY_EXTENDED) else {
                    return self.remove_cm(&cm);
                };
                let bytes = CardBytes {
                    owner: card_owner(&cm).map(|uid| self.uid_key(uid)),
                    hash: content_digest(body),
                    body: body.clone(),
                };
                let previous = self.extended_cms.insert(source(&cm), bytes.clone());
                if previous.as_ref() == Some(&bytes) {
                    return;
                }
                if let Some(uid) = bytes.owner {
                    self.settle(&uid);
                }
            }
            Some(CONTENT_JWKS) if cm.namespace().as_deref() == Some(self.operator_ns.as_str()) => {
                if let Some(body) = cm.bytes(KEY_JWKS) {
                    let ann = &cm.seen;
                    let modified = ann
                        .annotation(ANN_PUBLISHED_AT)
                        .and_then(crate::index::rfc3339)
                        .or_else(|| {
                            cm.metadata
                                .creation_timestamp
                                .as_ref()
                                .and_then(|t| crate::index::rfc3339(&t.0.to_string()))
                        })
                        .unwrap_or(UNIX_EPOCH);
                    let max_age = ann
                        .annotation(ANN_MAX_AGE)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(DEFAULT_MAX_AGE);
                    self.index
                        .set_jwks(Some(Published::new(body.clone(), modified, max_age)));
                }
            }
            Some(CONTENT_FEED) if cm.namespace().as_deref() == Some(self.operator_ns.as_str()) => {
                self.apply_feed(&cm, None)
            }
            Some(CONTENT_FEED_PART)
                if cm.namespace().as_deref() == Some(self.operator_ns.as_str()) =>
            {
                match cm
                    .seen
                    .annotation(ANN_FEED_PART)
                    .and_then(|p| p.parse().ok())
                {
                    Some(part) => self.apply_feed(&cm, Some(part)),
                    None => self.remove_cm(&cm),
                }
            }
            _ => self.remove_cm(&cm),
        }
    }

    /// A directory's persisted change-feed log, its head (`part` `None`) or a further part
    /// (written by the lease holder, in the operator's namespace only): served once the head
    /// and every part it names are here ([`Persisted`]). Until then, and when they cannot be
    /// read, the last log read stays.
    fn apply_feed(&mut self, cm: &SeenConfigMap, part: Option<usize>) {
        let (Some(dir), Some(bytes)) = (cm.seen.annotation(ANN_DIRECTORY), cm.bytes(KEY_FEED))
        else {
            return;
        };
        let rv = cm.metadata.resource_version.clone();
        if let Some(log) = self.logs.apply(source(cm), (dir, part), bytes.clone(), rv) {
            self.hosted.set_feed(dir, Arc::new(log));
        }
    }

    /// Forget the change-feed ConfigMap `src`, if it was one (its log with its head).
    fn remove_feed_part(&mut self, src: &str) {
        if let Gone::Log(dir) = self.logs.remove(src) {
            self.hosted.remove_feed(&dir);
        }
    }

    /// A ConfigMap is gone (or no longer a card): what was confirmed stays served until the
    /// card's status says otherwise; only the JWKS goes with its ConfigMap.
    fn remove_cm(&mut self, cm: &SeenConfigMap) {
        if cm.namespace().as_deref() == Some(self.operator_ns.as_str())
            && cm.seen.label(LABEL_CONTENT) == Some(CONTENT_JWKS)
        {
            self.index.set_jwks(None);
        }
        self.remove_feed_part(&source(cm));
        self.cms.remove(&source(cm));
        self.extended_cms.remove(&source(cm));
    }

    /// Card `uid` as the map of cards keys it: that map's own `Arc` when it holds the card (a
    /// ConfigMap's owner then shares it).
    fn uid_key(&self, uid: &str) -> Arc<str> {
        self.cards
            .get_key_value(uid)
            .map_or_else(|| uid.into(), |(k, _)| k.clone())
    }

    fn apply_card(&mut self, card: Arc<dyn CardFields>) {
        let Some(uid) = card.meta().uid.as_deref().map(|uid| self.uid_key(uid)) else {
            return;
        };
        let view = CardView::of(card);
        let Some(previous) = self.cards.insert(uid.clone(), view.clone()) else {
            return self.settle(&uid);
        };
        if previous.labels() != view.labels() || previous.approvals() != view.approvals() {
            // Only the directories whose listing the change changes are rebuilt.
            self.sites
                .relabel(&view.key, view.labels(), view.approvals());
        }
        if previous.serves_as(&view) {
            // Most card events (spec edits, conditions) change nothing served.
            return;
        }
        self.settle(&uid);
    }

    fn remove_card(&mut self, uid: &str) {
        if let Some(view) = self.cards.remove(uid) {
            self.unserve(&view.key);
        }
    }

    fn apply_namespace(&mut self, ns: &Namespace) {
        self.sites.namespace(ns.name_any(), ns.labels().clone());
    }

    /// Every directory's site from what is served now, into the index; when only some
    /// directories are due, the others keep the sites they have.
    fn rebuild_sites(&mut self) {
        let sites = self.sites.rebuild(&self.hosted.sites());
        self.hosted.set_sites(sites);
    }

    fn mark_ready(&self) {
        if self.cms_synced && self.cards_synced && !self.index.is_ready() {
            self.index.mark_ready();
            tracing::info!(cards = self.index.len(), "card index synced");
        }
    }

    fn on_cm_event(&mut self, event: Event<Arc<SeenConfigMap>>) {
        match event {
            // What a relist no longer lists goes at its end; before the first list there is
            // nothing to drop, and no set of 100,000 names to hold.
            Event::Init => {
                let held = !self.cms.is_empty()
                    || !self.extended_cms.is_empty()
                    || self.logs.sources().next().is_some();
                self.relist_cms = held.then(HashSet::new);
            }
            Event::InitApply(cm) => {
                if let Some(seen) = self.relist_cms.as_mut() {
                    seen.insert(source(&cm));
                }
                self.apply_cm(cm);
            }
            Event::InitDone => {
                if let Some(seen) = self.relist_cms.take() {
                    self.cms.retain(|s, _| seen.contains(s));
                    self.extended_cms.retain(|s, _| seen.contains(s));
                    let gone: Vec<String> = self
                        .logs
                        .sources()
                        .filter(|s| !seen.contains(*s))
                        .cloned()
                        .collect();
                    for src in gone {
                        self.remove_feed_part(&src);
                    }
                }
                self.cms_synced = true;
                self.mark_ready();
            }
            Event::Apply(cm) => self.apply_cm(cm),
            Event::Delete(cm) => self.remove_cm(&cm),
        }
    }

    fn on_directory_event(&mut self, event: Event<Arc<AgentDirectory>>) {
        self.sites.on_directory_event(event);
        self.sync_listing();
    }

    fn on_card_event(&mut self, event: Event<Arc<dyn CardFields>>) {
        match event {
            Event::Init => self.relist_cards = (!self.cards.is_empty()).then(HashSet::new),
            Event::InitApply(card) => {
                if let (Some(seen), Some(uid)) = (self.relist_cards.as_mut(), &card.meta().uid) {
                    seen.insert(uid.clone());
                }
                self.apply_card(card);
            }
            Event::InitDone => {
                if let Some(seen) = self.relist_cards.take() {
                    let gone: Vec<Arc<str>> = self
                        .cards
                        .keys()
                        .filter(|uid| !seen.contains(&***uid))
                        .cloned()
                        .collect();
                    for uid in gone {
                        self.remove_card(&uid);
                    }
                }
                self.cards_synced = true;
                self.mark_ready();
            }
            Event::Apply(card) => self.apply_card(card),
            Event::Delete(card) => {
                if let Some(uid) = &card.meta().uid {
                    self.remove_card(uid);
                }
            }
        }
    }
}

/// A card event with the card as the view reads it, whichever form the store keeps.
fn as_fields<C: StoredCard>(event: Event<Arc<C>>) -> Event<Arc<dyn CardFields>> {
    match event {
        Event::Init => Event::Init,
        Event::InitApply(c) => Event::InitApply(c),
        Event::InitDone => Event::InitDone,
        Event::Apply(c) => Event::Apply(c),
        Event::Delete(c) => Event::Delete(c),
    }
}

enum Change {
    ConfigMap(Event<Arc<SeenConfigMap>>),
    Card(Event<Arc<dyn CardFields>>),
    Namespace(Event<Arc<Namespace>>),
    Directory(Event<Arc<AgentDirectory>>),
}

/// Keep `content` in step with the published, confirmed cards (and the directories' sites and
/// logs) until the process ends, from the process's shared watches.
pub async fn watch_cluster<C: StoredCard>(
    hubs: Arc<Hubs<C>>,
    operator_ns: String,
    content: Content,
    federation: Arc<Federation>,
) {
    let mut federated = federation.changes();
    let mut events = futures::stream::select_all([
        hubs.configmaps.subscribe().map(Change::ConfigMap).boxed(),
        hubs.cards
            .subscribe()
            .map(|e| Change::Card(as_fields(e)))
            .boxed(),
        hubs.namespaces.subscribe().map(Change::Namespace).boxed(),
        hubs.directories.subscribe().map(Change::Directory).boxed(),
    ]);
    let mut feed = ClusterView::new(content, federation, operator_ns);
    let mut rebuild_at: Option<tokio::time::Instant> = None;
    loop {
        let wait = async {
            match rebuild_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return };
                match event {
                    Change::ConfigMap(e) => feed.on_cm_event(e),
                    Change::Card(e) => feed.on_card_event(e),
                    Change::Namespace(Event::Apply(ns) | Event::InitApply(ns)) => {
                        feed.apply_namespace(&ns)
                    }
                    Change::Namespace(_) => {}
                    Change::Directory(e) => feed.on_directory_event(e),
                }
                if feed.sites.rebuild_due() && rebuild_at.is_none() {
                    rebuild_at = Some(tokio::time::Instant::now() + REBUILD_DELAY);
                }
            }
            Ok(()) = federated.changed() => {
                feed.sites.federated();
                if rebuild_at.is_none() {
                    rebuild_at = Some(tokio::time::Instant::now() + REBUILD_DELAY);
                }
            }
            () = wait => {
                rebuild_at = None;
                feed.rebuild_sites();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::AgentCard;
    use crate::directory::feed::FeedLog;
    use serde_json::json;

    fn feed() -> ClusterView {
        let mut f = ClusterView::new(Content::default(), Arc::default(), "ops".into());
        f.cms_synced = true;
        f.cards_synced = true;
        f
    }

    fn cm(ns: &str, name: &str, owner: &str, body: &str, host_ann: &str) -> SeenConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns,
                "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_CARD},
                "annotations": {ANN_HOST: host_ann},
                "ownerReferences": [{"apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
                    "name": "x", "uid": owner, "controller": true}]},
            "data": {KEY_CARD: body}
        }))
        .unwrap()
    }

    fn card(ns: &str, name: &str, uid: &str, host: &str, body: Option<&str>) -> AgentCard {
        let status = match body {
            Some(b) => json!({"contentHash": content_hash(b.as_bytes()),
                "configMap": format!("agentcard-{name}"),
                "served": {"host": host, "maxAgeSeconds": 60, "publishedAt": "2026-01-01T00:00:00Z",
                           "since": "2026-01-01T00:00:00Z"}}),
            None => json!({}),
        };
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "spec": {"publish": {"host": host}, "card": {"name": "n"}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn a_card_compacted_for_a_serving_replica_is_served_and_listed_the_same() {
        // What `serve --from-cluster` stores of a card must answer every question the feed
        // asks of it: a condition or field the view starts to read and the compaction drops
        // shows up here.
        let mut full = extended_card("u1", Some("extended"));
        full.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        let cond = |t: &str, s: &str, r: &str, m: &str| {
            serde_json::from_value(json!({"type": t, "status": s, "reason": r, "message": m,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}))
            .unwrap()
        };
        let status = full.status.as_mut().unwrap();
        status.conditions = vec![
            cond("Ready", "True", "Published", "served at https://h.example/"),
            cond("BackendReady", "False", "NoEndpoints", "no ready endpoint"),
            cond(
                "Drifted",
                "True",
                "Drifted",
                "skills differ: agent has extra",
            ),
        ];
        status.url = Some("https://h.example/.well-known/agent-card.json".into());
        status.key_id = Some("k1".into());
        status.revision = Some(3);
        status.approvals = vec![serde_json::from_value(
            json!({"directory": "d", "state": "Approved", "contentHash": "h"}),
        )
        .unwrap()];
        // The same card as a serving replica reads and stores it.
        let mut compacted: crate::store::ServedCard =
            serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
        compacted.compact();
        assert!(
            compacted.conditions().len() < full.status.as_ref().unwrap().conditions.len(),
            "something was compacted"
        );
        let (full, compacted) = (
            CardView::of(Arc::new(full)),
            CardView::of(Arc::new(compacted)),
        );
        assert!(full.serves_as(&compacted) && compacted.serves_as(&full));
        assert_eq!(full.labels(), compacted.labels());
        assert_eq!(full.approvals(), compacted.approvals());
        assert_eq!(compacted.reachable(), Some(false));
        assert!(compacted.drift().is_some());
        assert!(compacted.extended_auth().is_some());
    }

    fn served(f: &ClusterView, host: &str) -> Option<String> {
        match f.index.lookup(host, PATH_CARD)? {
            crate::index::Hit::Card(p) => Some(String::from_utf8_lossy(&p.body).into_owned()),
            _ => None,
        }
    }

    /// The extended card ConfigMap `name` of namespace `ns`, controlled by card `owner`.
    fn extended_cm(ns: &str, name: &str, owner: &str, body: &str) -> SeenConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns,
                "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_EXTENDED},
                "ownerReferences": [{"apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
                    "name": "x", "uid": owner, "controller": true}]},
            "data": {KEY_EXTENDED: body}
        }))
        .unwrap()
    }

    /// Card `c` of namespace `a` on `h.example` with a REST backend the operator answers
    /// `/a2a/extendedAgentCard` for; with `extended`, its extended card's bytes and auth.
    fn extended_card(uid: &str, extended: Option<&str>) -> AgentCard {
        let mut c = card("a", "c", uid, "h.example", Some("public"));
        let status = c.status.as_mut().unwrap();
        status.served.as_mut().unwrap().extended_path = Some("/a2a/extendedAgentCard".into());
        if let Some(body) = extended {
            status.extended_card = Some(Box::new(crate::crd::ExtendedCardStatus {
                config_map: "extended-agentcard-c".into(),
                content_hash: content_hash(body.as_bytes()),
            }));
            c.spec.extended_card = Some(Box::new(
                serde_json::from_value(json!({
                    "auth": {"serviceAccount": {"audiences": ["agents"]}}
                }))
                .unwrap(),
            ));
        }
        c
    }

    fn extended(f: &ClusterView) -> Option<(bool, Option<String>)> {
        match f.index.lookup("h.example", "/a2a/extendedAgentCard")? {
            crate::index::Hit::Extended(x) => Some((
                x.auth.is_some(),
                x.content
                    .as_ref()
                    .map(|p| String::from_utf8_lossy(&p.body).into_owned()),
            )),
            _ => None,
        }
    }

    #[test]
    fn the_extended_route_serves_only_bytes_its_card_controls_and_its_status_confirms() {
        let mut f = feed();
        f.apply_cm(Arc::new(cm("a", "agentcard-c", "u", "public", "")));
        // No extended card: the path answers the not-configured error (no auth, no bytes).
        f.apply_card(Arc::new(extended_card("u", None)));
        assert_eq!(extended(&f), Some((false, None)));
        // The status names bytes not here yet; then a ConfigMap of the same name controlled by
        // another card, and one with other bytes: none is served.
        f.apply_card(Arc::new(extended_card("u", Some("ext-1"))));
        assert_eq!(extended(&f), Some((true, None)));
        f.apply_cm(Arc::new(extended_cm(
            "a",
            "extended-agentcard-c",
            "u-other",
            "ext-1",
        )));
        assert_eq!(extended(&f), Some((true, None)));
        f.apply_cm(Arc::new(extended_cm(
            "a",
            "extended-agentcard-c",
            "u",
            "forged",
        )));
        assert_eq!(extended(&f), Some((true, None)));
        f.apply_cm(Arc::new(extended_cm(
            "a",
            "extended-agentcard-c",
            "u",
            "ext-1",
        )));
        assert_eq!(extended(&f), Some((true, Some("ext-1".into()))));
        // New bytes wait for the status; the confirmed ones stay meanwhile.
        f.apply_cm(Arc::new(extended_cm(
            "a",
            "extended-agentcard-c",
            "u",
            "ext-2",
        )));
        assert_eq!(extended(&f), Some((true, Some("ext-1".into()))));
        f.apply_card(Arc::new(extended_card("u", Some("ext-2"))));
        assert_eq!(extended(&f), Some((true, Some("ext-2".into()))));
        // The auth removed from the spec before the operator has reconciled: nobody is let in
        // (the route still says configured: the public card still advertises it).
        let mut no_auth = extended_card("u", Some("ext-2"));
        no_auth.spec.extended_card = None;
        f.apply_card(Arc::new(no_auth));
        match f.index.lookup("h.example", "/a2a/extendedAgentCard") {
            Some(crate::index::Hit::Extended(x)) => {
                let auth = x.auth.as_deref().expect("still configured");
                assert!(auth.oidc.is_none() && auth.service_account.is_none());
            }
            _ => panic!("the extended route is gone"),
        }
        // The extended card removed from the spec and status: the error again, no bytes.
        f.apply_card(Arc::new(extended_card("u", None)));
        assert_eq!(extended(&f), Some((false, None)));
        // The public card itself is untouched throughout.
        assert_eq!(served(&f, "h.example").as_deref(), Some("public"));
    }

    #[test]
    fn routing_comes_from_the_status_never_from_configmap_annotations() {
        let mut f = feed();
        f.apply_card(Arc::new(card(
            "a",
            "victim",
            "u-v",
            "v.example",
            Some("victim"),
        )));
        f.apply_cm(Arc::new(cm(
            "a",
            "agentcard-victim",
            "u-v",
            "victim",
            "v.example",
        )));
        // The attacker's own card is confirmed for its own host; its ConfigMap claims the
        // victim's host in its annotations.
        f.apply_cm(Arc::new(cm(
            "b",
            "agentcard-evil",
            "u-e",
            "evil",
            "v.example",
        )));
        f.apply_card(Arc::new(card(
            "b",
            "evil",
            "u-e",
            "e.example",
            Some("evil"),
        )));
        assert_eq!(served(&f, "v.example").as_deref(), Some("victim"));
        assert_eq!(served(&f, "e.example").as_deref(), Some("evil"));
        // A second ConfigMap owned by the attacker's card, with confirmed bytes, but not the
        // one its status names: ignored.
        f.apply_cm(Arc::new(cm("b", "other", "u-e", "evil", "v.example")));
        assert_eq!(served(&f, "v.example").as_deref(), Some("victim"));
    }

    #[test]
    fn unconfirmed_bytes_wait_and_a_cleared_or_deleting_card_goes_at_once() {
        let mut f = feed();
        f.apply_card(Arc::new(card("a", "c", "u", "h.example", Some("one"))));
        f.apply_cm(Arc::new(cm("a", "agentcard-c", "u", "one", "")));
        f.apply_cm(Arc::new(cm("a", "agentcard-c", "u", "two", "")));
        assert_eq!(served(&f, "h.example").as_deref(), Some("one"));
        f.apply_card(Arc::new(card("a", "c", "u", "h.example", Some("two"))));
        assert_eq!(served(&f, "h.example").as_deref(), Some("two"));
        // The ConfigMap going alone changes nothing; the status losing its route does.
        f.remove_cm(&cm("a", "agentcard-c", "u", "two", ""));
        assert_eq!(served(&f, "h.example").as_deref(), Some("two"));
        f.apply_card(Arc::new(card("a", "c", "u", "h.example", None)));
        assert_eq!(served(&f, "h.example"), None);
        // Deletion starts: gone before any garbage collection.
        f.apply_cm(Arc::new(cm("a", "agentcard-c", "u", "two", "")));
        f.apply_card(Arc::new(card("a", "c", "u", "h.example", Some("two"))));
        assert!(served(&f, "h.example").is_some());
        let mut deleting = card("a", "c", "u", "h.example", Some("two"));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        f.apply_card(Arc::new(deleting));
        assert_eq!(served(&f, "h.example"), None);
    }

    #[test]
    fn a_relist_drops_the_configmaps_it_no_longer_lists_and_a_first_list_keeps_no_set() {
        let mut f = feed();
        // A first list: nothing held yet, so no set of names is kept.
        f.on_cm_event(Event::Init);
        assert!(f.relist_cms.is_none());
        f.on_cm_event(Event::InitApply(Arc::new(extended_cm(
            "a", "x-ext", "u", "e",
        ))));
        f.on_cm_event(Event::InitApply(Arc::new(cm(
            "a",
            "agentcard-c",
            "u",
            "one",
            "",
        ))));
        f.on_cm_event(Event::InitDone);
        assert_eq!((f.cms.len(), f.extended_cms.len()), (1, 1));
        // A relist without the public card: it goes, the extended card stays.
        f.on_cm_event(Event::Init);
        f.on_cm_event(Event::InitApply(Arc::new(extended_cm(
            "a", "x-ext", "u", "e",
        ))));
        f.on_cm_event(Event::InitDone);
        assert_eq!((f.cms.len(), f.extended_cms.len()), (0, 1));
        // Holding an extended card alone, a relist without it drops it too.
        f.on_cm_event(Event::Init);
        f.on_cm_event(Event::InitDone);
        assert_eq!((f.cms.len(), f.extended_cms.len()), (0, 0));
    }

    #[test]
    fn a_moved_route_carries_the_served_bytes_along() {
        let mut f = feed();
        f.apply_card(Arc::new(card("a", "c", "u", "one.example", Some("b"))));
        f.apply_cm(Arc::new(cm("a", "agentcard-c", "u", "b", "")));
        f.cms.clear();
        f.apply_card(Arc::new(card("a", "c", "u", "two.example", Some("b"))));
        assert_eq!(served(&f, "one.example"), None);
        assert_eq!(served(&f, "two.example").as_deref(), Some("b"));
    }

    fn directory(name: &str, host: &str) -> Arc<AgentDirectory> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
                "metadata": {"name": name},
                "spec": {"publish": {"host": host}},
                "status": {"served": {"host": host, "since": "2026-01-01T00:00:00Z"}}
            }))
            .unwrap(),
        )
    }

    fn listed(f: &mut ClusterView, host: &str) -> Vec<String> {
        f.rebuild_sites();
        f.hosted.site(host).map_or_else(Vec::new, |s| {
            s.catalog
                .entries()
                .iter()
                .map(|e| e.placement.name.clone())
                .collect()
        })
    }

    fn feed_cm(name: &str, part: Option<usize>, bytes: &[u8]) -> Arc<SeenConfigMap> {
        let (content, ann) = match part {
            None => (CONTENT_FEED, json!({ANN_DIRECTORY: "dir"})),
            Some(i) => (
                CONTENT_FEED_PART,
                json!({ANN_DIRECTORY: "dir", ANN_FEED_PART: i.to_string()}),
            ),
        };
        let cm = k8s_openapi::api::core::v1::ConfigMap {
            metadata: serde_json::from_value(json!({"name": name, "namespace": "ops",
                "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: content}, "annotations": ann}))
            .unwrap(),
            binary_data: Some(
                [(
                    KEY_FEED.to_string(),
                    k8s_openapi::ByteString(bytes.to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        Arc::new(SeenConfigMap::from(cm))
    }

    #[test]
    fn a_log_in_parts_is_served_once_its_head_and_every_part_named_are_here() {
        let mut f = feed();
        let entries: Vec<Arc<Entry>> = (0..60)
            .map(|i| {
                let body = format!(r#"{{"name":"n{i}","description":"d","skills":[]}}"#);
                let placement = Placement {
                    namespace: "t".into(),
                    name: format!("n{i}"),
                    host: format!("n{i}.example"),
                    ..Placement::default()
                };
                Arc::new(Entry::build(placement, Bytes::from(body)).unwrap())
            })
            .collect();
        let log = FeedLog::new("e").advance(&entries, 10, 1).unwrap();
        let split = log.encode_parts(300).unwrap();
        assert!(!split.parts.is_empty());
        // The head first (as a relist may bring it): nothing served until every part is here.
        f.apply_cm(feed_cm("agentcard-feed-dir", None, &split.head));
        assert!(f.hosted.feed("dir").is_none());
        for (i, p) in split.parts.iter().enumerate() {
            f.apply_cm(feed_cm(
                &format!("agentcard-feed-dir-{}", i + 1),
                Some(i + 1),
                p,
            ));
        }
        assert_eq!(f.hosted.feed("dir").unwrap().last_seq, log.last_seq);
        // The next write: its parts come first and wait for their head.
        let next = log.advance(&entries[5..], 10, 2).unwrap();
        let split2 = next.encode_parts(300).unwrap();
        for (i, p) in split2.parts.iter().enumerate() {
            f.apply_cm(feed_cm(
                &format!("agentcard-feed-dir-{}", i + 1),
                Some(i + 1),
                p,
            ));
        }
        assert_eq!(f.hosted.feed("dir").unwrap().last_seq, log.last_seq);
        f.apply_cm(feed_cm("agentcard-feed-dir", None, &split2.head));
        assert_eq!(f.hosted.feed("dir").unwrap().last_seq, next.last_seq);
        // The head gone: no log.
        f.remove_cm(&feed_cm("agentcard-feed-dir", None, &split2.head));
        assert!(f.hosted.feed("dir").is_none());
    }

    #[test]
    fn a_label_change_rebuilds_only_the_directories_whose_listing_it_changes() {
        let mut f = feed();
        let labelled = |c: AgentCard, team: &str| {
            let mut c = c;
            c.metadata.labels = Some([("team".to_string(), team.to_string())].into());
            Arc::new(c)
        };
        let one = r#"{"name":"one","description":"d","skills":[]}"#;
        f.apply_card(labelled(
            card("a", "one", "u1", "one.example", Some(one)),
            "a",
        ));
        f.apply_cm(Arc::new(cm("a", "agentcard-one", "u1", one, "")));
        // A card that is not served (no confirmed bytes): never listed, whatever its labels.
        f.apply_card(labelled(
            card("a", "draft", "u2", "draft.example", None),
            "a",
        ));
        let mut by_team = (*directory("team-a", "a.example")).clone();
        by_team.spec.card_selector =
            serde_json::from_value(json!({"matchLabels": {"team": "a"}})).unwrap();
        f.on_directory_event(Event::Apply(Arc::new(by_team)));
        f.on_directory_event(Event::Apply(directory("all", "all.example")));
        assert_eq!(listed(&mut f, "a.example"), ["one"]);
        let all = f.hosted.site("all.example").unwrap();
        let team = f.hosted.site("a.example").unwrap();
        // Relabelling the unserved card, or the served one in a way no selector reads: nothing.
        f.apply_card(labelled(
            card("a", "draft", "u2", "draft.example", None),
            "b",
        ));
        let mut other = (*labelled(card("a", "one", "u1", "one.example", Some(one)), "a")).clone();
        other
            .metadata
            .labels
            .get_or_insert_default()
            .insert("unread".into(), "x".into());
        f.apply_card(Arc::new(other));
        assert!(!f.sites.rebuild_due(), "{:?}", f.sites.due());
        // Moving the served card out of team a: only that directory is rebuilt.
        f.apply_card(labelled(
            card("a", "one", "u1", "one.example", Some(one)),
            "b",
        ));
        assert!(f.sites.rebuild_due());
        assert!(listed(&mut f, "a.example").is_empty());
        assert!(
            Arc::ptr_eq(&f.hosted.site("all.example").unwrap(), &all),
            "kept as it was"
        );
        assert!(!Arc::ptr_eq(&f.hosted.site("a.example").unwrap(), &team));
        assert_eq!(listed(&mut f, "all.example"), ["one"]);
    }

    #[test]
    fn directory_entries_exist_exactly_while_a_directory_does() {
        let mut f = feed();
        let body = |n: &str| format!(r#"{{"name":"{n}","description":"d","skills":[]}}"#);
        let (one, two) = (body("one"), body("two"));
        f.apply_card(Arc::new(card("a", "one", "u1", "one.example", Some(&one))));
        f.apply_cm(Arc::new(cm("a", "agentcard-one", "u1", &one, "")));
        assert!(served(&f, "one.example").is_some());
        assert!(!f.sites.keeps_entries(), "no directory, no entries");
        // The first directory lists what is already served, then what is served after.
        f.on_directory_event(Event::Apply(directory("dir", "dir.example")));
        assert_eq!(listed(&mut f, "dir.example"), ["one"]);
        f.apply_card(Arc::new(card("a", "two", "u2", "two.example", Some(&two))));
        f.apply_cm(Arc::new(cm("a", "agentcard-two", "u2", &two, "")));
        let mut names = listed(&mut f, "dir.example");
        names.sort();
        assert_eq!(names, ["one", "two"]);
        // The last directory gone, the entries go; a new directory lists every card again.
        f.on_directory_event(Event::Delete(directory("dir", "dir.example")));
        assert!(!f.sites.keeps_entries());
        assert!(listed(&mut f, "dir.example").is_empty());
        f.on_directory_event(Event::Apply(directory("other", "other.example")));
        assert_eq!(listed(&mut f, "other.example").len(), 2);
    }
}
