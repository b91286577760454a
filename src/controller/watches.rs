//! What the controllers make of the process's shared watches ([`crate::hub`]).
//!
//! Data flow: each hub stores an object compacted ([`compact_card`], [`compact_meta`]: what no
//! reconcile reads is dropped, so 10,000 cards fit in little memory), then forwards its event
//! here: [`fan_out_cards`], [`fan_out_namespaces`] and [`fan_out_configmaps`] update the indexes
//! ([`CardIndex`]: the controller's cards by host and by namespace) and forget the writes the
//! watch now shows ([`Unseen`]), and only then send what each event triggers (the card itself to
//! the card controller, a re-count to the directories, the cards of a namespace whose host
//! allowance changed, the owner of an edited ConfigMap). Each event costs O(what changed): no
//! trigger scans every card.
//!
//! A relist (`Init` … `InitDone`) is held back until `InitDone`: the store swaps in the new list
//! only then, so a trigger sent earlier could find a new card missing from the store.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;

use super::agentcard::validate::ANN_ALLOWED_HOSTS;
use super::seen::{MetaView, SeenConfigMap};
use crate::contract::{CONTENT_CARD, LABEL_CONTENT, MANAGER};
use crate::crd::AgentCard;
use crate::hub::{name_ref, Shared};

/// kubectl's copy of the last applied object: as large as the object, read by nothing here.
pub(crate) const ANN_LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `fieldsType` of the one `managedFields` entry [`compact_meta`] leaves on a stored object:
/// its `fieldsV1` is then a JSON string, the annotation keys the operator set, one per line
/// (the full field set of every entry, a JSON tree per entry, was the largest part of a stored
/// ConfigMap or Ingress).
pub const FIELDS_ANNOTATION_KEYS: &str = "agentcard.dev/AnnotationKeys";

/// Trim an object the operator writes before it is stored: of its `managedFields`, only the
/// annotation keys the operator set are kept (so it may remove the ones it no longer wants),
/// in one entry of type [`FIELDS_ANNOTATION_KEYS`]; kubectl's last-applied copy goes.
pub fn compact_meta(meta: &mut ObjectMeta) {
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(ANN_LAST_APPLIED);
    }
    if meta.managed_fields.is_some() {
        let keys: Vec<String> = operator_annotations(meta).into_iter().collect();
        meta.managed_fields = (!keys.is_empty()).then(|| {
            vec![ManagedFieldsEntry {
                manager: Some(MANAGER.into()),
                fields_type: Some(FIELDS_ANNOTATION_KEYS.into()),
                fields_v1: Some(FieldsV1(serde_json::Value::String(keys.join("\n")))),
                ..Default::default()
            }]
        });
    }
}

/// The annotation keys the operator set on an object (by create or apply), read from its
/// `managedFields` as the API server returns them or as [`compact_meta`] left them.
/// Annotations others added are theirs.
pub fn operator_annotations(meta: &ObjectMeta) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let ours = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(MANAGER));
    for entry in ours {
        let Some(fields) = entry.fields_v1.as_ref() else {
            continue;
        };
        if entry.fields_type.as_deref() == Some(FIELDS_ANNOTATION_KEYS) {
            let listed = fields.0.as_str().unwrap_or_default();
            keys.extend(listed.lines().map(str::to_string));
            continue;
        }
        let set = fields
            .0
            .get("f:metadata")
            .and_then(|m| m.get("f:annotations"))
            .and_then(serde_json::Value::as_object);
        keys.extend(
            set.into_iter()
                .flat_map(|s| s.keys())
                .filter_map(|k| k.strip_prefix("f:"))
                .map(str::to_string),
        );
    }
    keys
}

/// Trim an AgentCard before it is stored: nothing reads a card's `managedFields` (often as
/// large as the card) or kubectl's last-applied copy. The list goes whole (`None`): a cleared
/// `Vec` would keep its buffer, a few hundred bytes per stored card.
pub fn compact_card(card: &mut AgentCard) {
    card.metadata.managed_fields = None;
    if let Some(annotations) = card.metadata.annotations.as_mut() {
        annotations.remove(ANN_LAST_APPLIED);
    }
}

/// The cards by host and by namespace, kept in step with the card store by [`fan_out_cards`]:
/// which cards to look at again when a host is freed, and how many cards a namespace has.
/// Each card's reference is held once (an `Arc` shared by the three maps) and each host once.
#[derive(Default)]
pub struct CardIndex {
    host_of: HashMap<CardKey, Arc<str>>,
    /// A host has one card, sometimes a few (shared hosts, conflicts): a list, not a set.
    by_host: HashMap<Arc<str>, Vec<CardKey>>,
    by_namespace: HashMap<String, HashSet<CardKey>>,
}

/// A card's reference as the [`CardIndex`] holds it.
type CardKey = Arc<ObjectRef<AgentCard>>;

impl CardIndex {
    /// Record `card` (new, or its host changed).
    pub fn apply(&mut self, card: &AgentCard) {
        let key = name_ref(card);
        let host = card.spec.publish.host.to_ascii_lowercase();
        let shared = match self.host_of.get_key_value(&key) {
            // Known on this host: nothing moves (its namespace cannot change).
            Some((_, h)) if **h == *host => return,
            Some((k, _)) => k.clone(),
            None => Arc::new(key),
        };
        let host: Arc<str> = Arc::from(host);
        if let Some(old) = self.host_of.insert(shared.clone(), host.clone()) {
            Self::remove_from_host(&mut self.by_host, &old, &shared);
        }
        self.by_host
            .entry(host)
            .or_insert_with(|| Vec::with_capacity(1))
            .push(shared.clone());
        let ns = shared.namespace.clone().unwrap_or_default();
        self.by_namespace.entry(ns).or_default().insert(shared);
    }

    /// Forget `card`.
    pub fn remove(&mut self, key: &ObjectRef<AgentCard>) {
        if let Some(host) = self.host_of.remove(key) {
            Self::remove_from_host(&mut self.by_host, &host, key);
        }
        let ns = key.namespace.clone().unwrap_or_default();
        if let Some(set) = self.by_namespace.get_mut(&ns) {
            set.remove(key);
            if set.is_empty() {
                self.by_namespace.remove(&ns);
            }
        }
    }

    fn remove_from_host(
        map: &mut HashMap<Arc<str>, Vec<CardKey>>,
        at: &str,
        key: &ObjectRef<AgentCard>,
    ) {
        if let Some(list) = map.get_mut(at) {
            list.retain(|k| **k != *key);
            if list.is_empty() {
                map.remove(at);
            }
        }
    }

    /// Rebuild from `cards` (after a relist, which may have missed deletions).
    pub fn rebuild<'a>(&mut self, cards: impl IntoIterator<Item = &'a AgentCard>) {
        *self = Self::default();
        for card in cards {
            self.apply(card);
        }
    }

    /// The cards asking for `host` (any case).
    pub fn on_host(&self, host: &str) -> Vec<ObjectRef<AgentCard>> {
        self.by_host
            .get(host.to_ascii_lowercase().as_str())
            .map(|list| list.iter().map(|k| ObjectRef::clone(k)).collect())
            .unwrap_or_default()
    }

    /// The cards of namespace `ns`.
    pub fn in_namespace(&self, ns: &str) -> Vec<ObjectRef<AgentCard>> {
        self.by_namespace
            .get(ns)
            .map(|s| s.iter().map(|k| ObjectRef::clone(k)).collect())
            .unwrap_or_default()
    }

    /// Every card, as the references the index shares (for a walk that outlives the lock).
    pub fn shared_keys(&self) -> Vec<Arc<ObjectRef<AgentCard>>> {
        self.host_of.keys().cloned().collect()
    }

    /// How many cards namespace `ns` has.
    pub fn count_in(&self, ns: &str) -> usize {
        self.by_namespace.get(ns).map_or(0, HashSet::len)
    }
}

/// Look at every card of `index` again about once per `period`, until `cards` closes: one
/// card at a time, evenly spread over the period (a safety net, since every change already
/// triggers its reconciles; a requeue timer per card would keep an entry for each in the
/// controller's scheduler, about 450 bytes per card). The first walk starts one period after
/// the start, which reconciles every card anyway. A walk holds the index's shared references,
/// not copies of every name.
pub async fn resync(
    index: Arc<Mutex<CardIndex>>,
    period: std::time::Duration,
    cards: UnboundedSender<ObjectRef<AgentCard>>,
) {
    tokio::time::sleep(period).await;
    loop {
        let keys = index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shared_keys();
        let Some(gap) = resync_gap(period, keys.len()) else {
            tokio::time::sleep(period).await;
            continue;
        };
        for key in keys {
            if cards.unbounded_send(ObjectRef::clone(&key)).is_err() {
                return;
            }
            tokio::time::sleep(gap).await;
        }
    }
}

/// The pause between two cards of a resync that walks `cards` cards in `period` (`None`: no
/// card to walk).
pub fn resync_gap(period: std::time::Duration, cards: usize) -> Option<std::time::Duration> {
    let n = u32::try_from(cards).unwrap_or(u32::MAX);
    (n > 0).then(|| period / n)
}

/// Drive a reflected watch in a task of its own, so its store follows the API server however
/// busy the controller reading it is (a stream polled only by the controller updates its store
/// only as fast as the controller polls, and a reconcile would read an old object). The objects
/// each event touched come out of the returned channel once the store holds them (a relist's
/// at its end).
pub(super) fn drive<K, T>(
    feed: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    touched: impl Fn(&K) -> T + Send + 'static,
) -> (
    super::AbortOnDrop,
    futures::channel::mpsc::UnboundedReceiver<T>,
)
where
    K: Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let task = tokio::spawn(async move {
        futures::pin_mut!(feed);
        // What a relist touched, held (as `T`, not whole objects) until its end.
        let mut relisted: Vec<T> = Vec::new();
        while let Some(event) = feed.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                    let _ = tx.unbounded_send(touched(&o));
                }
                Ok(watcher::Event::InitApply(o)) => relisted.push(touched(&o)),
                Ok(watcher::Event::InitDone) => {
                    for t in std::mem::take(&mut relisted) {
                        let _ = tx.unbounded_send(t);
                    }
                }
                Ok(watcher::Event::Init) => relisted.clear(),
                Err(e) => tracing::debug!(error = %e, "watch failed; retrying with backoff"),
            }
        }
    });
    (super::AbortOnDrop(task), rx)
}

/// Whom an object the operator writes was written for, as its watch event says: its namespace
/// and its card (`namespace/name`) or directory annotation.
pub struct WrittenFor {
    /// The object's namespace.
    pub namespace: String,
    /// The card annotation (`namespace/name`).
    pub card: Option<String>,
    /// The directory annotation.
    pub directory: Option<String>,
}

impl WrittenFor {
    /// Read from `object`.
    pub fn of<K: kube::Resource + MetaView>(object: &K) -> WrittenFor {
        let view: &dyn MetaView = object;
        let annotation = |k: &str| view.annotation(k).map(str::to_string);
        WrittenFor {
            namespace: object.meta().namespace.clone().unwrap_or_default(),
            card: annotation(crate::contract::ANN_CARD),
            directory: annotation(super::agentdirectory::ANN_DIRECTORY),
        }
    }
}

/// Where a card event goes once the store and the index hold it.
pub struct CardTargets {
    /// The card controller (the card itself).
    pub cards: UnboundedSender<ObjectRef<AgentCard>>,
    /// The directory controller (every directory counts again).
    pub directories: UnboundedSender<()>,
    /// The sweeper (a card that is gone; its finalizer may have been removed).
    pub gone: UnboundedSender<Arc<AgentCard>>,
}

/// Read the shared card watch until it ends: forget the unseen status writes of each card it
/// shows (`unseen`), keep `index` in step, and send each change where it matters. Only the
/// cards of `namespace` are the controller's (every namespace when `None`); every card counts
/// for the directories. `limit`: the cards per namespace that may publish (0: any number); when
/// a card of a namespace over it goes, the namespace's other cards are looked at again.
pub async fn fan_out_cards(
    feed: impl Stream<Item = Shared<AgentCard>>,
    store: Store<AgentCard>,
    index: Arc<Mutex<CardIndex>>,
    scope: Scope,
    unseen: Arc<Unseen<crate::crd::AgentCardStatus>>,
    targets: CardTargets,
) {
    futures::pin_mut!(feed);
    let mut relisted: Option<Vec<ObjectRef<AgentCard>>> = None;
    let lock = || index.lock().unwrap_or_else(|e| e.into_inner());
    while let Some(event) = feed.next().await {
        if let watcher::Event::Apply(c) | watcher::Event::InitApply(c) | watcher::Event::Delete(c) =
            &event
        {
            unseen.forget(
                super::agentcard::STATUS_WRITE,
                c.metadata.namespace.as_deref().unwrap_or(""),
                c.metadata.name.as_deref().unwrap_or(""),
            );
        }
        match event {
            watcher::Event::Init => relisted = Some(Vec::new()),
            watcher::Event::InitApply(card) => {
                if scope.holds(&card) {
                    relisted
                        .get_or_insert_with(Vec::new)
                        .push(name_ref(card.as_ref()));
                }
            }
            watcher::Event::InitDone => {
                lock().rebuild(
                    store
                        .state()
                        .iter()
                        .map(|c| c.as_ref())
                        .filter(|c| scope.holds(c)),
                );
                let keys = relisted.take().unwrap_or_default();
                tracing::debug!(cards = keys.len(), "cards listed: reconciling each");
                for key in keys {
                    let _ = targets.cards.unbounded_send(key);
                }
                let _ = targets.directories.unbounded_send(());
            }
            watcher::Event::Apply(card) => {
                if scope.holds(&card) {
                    lock().apply(&card);
                    let _ = targets.cards.unbounded_send(name_ref(card.as_ref()));
                }
                let _ = targets.directories.unbounded_send(());
            }
            watcher::Event::Delete(card) => {
                if scope.holds(&card) {
                    let key = name_ref(card.as_ref());
                    let ns = key.namespace.clone().unwrap_or_default();
                    let waiting = {
                        let mut index = lock();
                        let over = scope.limit > 0 && index.count_in(&ns) > scope.limit;
                        index.remove(&key);
                        if over {
                            index.in_namespace(&ns)
                        } else {
                            Vec::new()
                        }
                    };
                    for other in waiting {
                        let _ = targets.cards.unbounded_send(other);
                    }
                    let _ = targets.gone.unbounded_send(card);
                }
                let _ = targets.directories.unbounded_send(());
            }
        }
    }
}

/// Which cards are the controller's, and how many of a namespace publish.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Only this namespace's cards (every namespace when `None`).
    pub namespace: Option<String>,
    /// Most cards published per namespace (0: any number).
    pub limit: usize,
}

impl Scope {
    /// Whether `card` is the controller's.
    pub fn holds(&self, card: &AgentCard) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| card.metadata.namespace.as_deref() == Some(ns))
    }
}

/// Read the shared Namespace watch until it ends: every change re-counts the directories
/// (namespace labels select cards); a change of a namespace's allowed hosts re-checks that
/// namespace's cards, and only then (labels and other annotations do not touch cards).
pub async fn fan_out_namespaces(
    feed: impl Stream<Item = Shared<Namespace>>,
    index: Arc<Mutex<CardIndex>>,
    cards: UnboundedSender<ObjectRef<AgentCard>>,
    directories: UnboundedSender<()>,
) {
    futures::pin_mut!(feed);
    let mut allowance: HashMap<String, Option<String>> = HashMap::new();
    // Namespaces whose allowance changed during a relist: re-checked at its end, once the
    // store holds the new list.
    let mut relisted: Option<Vec<String>> = None;
    let recheck = |name: &str| {
        let keys = index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .in_namespace(name);
        for key in keys {
            let _ = cards.unbounded_send(key);
        }
    };
    while let Some(event) = feed.next().await {
        let (ns, initial) = match event {
            watcher::Event::Apply(ns) => (ns, false),
            watcher::Event::InitApply(ns) => (ns, true),
            watcher::Event::Delete(ns) => {
                allowance.remove(&ns.name_any());
                let _ = directories.unbounded_send(());
                continue;
            }
            watcher::Event::InitDone => {
                for name in relisted.take().unwrap_or_default() {
                    recheck(&name);
                }
                let _ = directories.unbounded_send(());
                continue;
            }
            watcher::Event::Init => {
                relisted = Some(Vec::new());
                continue;
            }
        };
        if !initial {
            let _ = directories.unbounded_send(());
        }
        let name = ns.name_any();
        let now = ns.annotations().get(ANN_ALLOWED_HOSTS).cloned();
        match allowance.insert(name.clone(), now.clone()) {
            // First seen: its cards are reconciled on their own events (or at start).
            None => {}
            Some(before) if before == now => {}
            Some(_) if initial => relisted.get_or_insert_with(Vec::new).push(name),
            Some(_) => recheck(&name),
        }
    }
}

/// Read the shared ConfigMap watch until it ends: forget the unseen writes of each ConfigMap
/// it shows (`unseen`, `configmaps`), then send the card owning a card ConfigMap to the card
/// controller (someone edited or deleted what it wrote: it is written again). `listed` turns
/// true once the store holds the whole list (a watch channel: any number may wait on it).
pub async fn fan_out_configmaps(
    feed: impl Stream<Item = Shared<SeenConfigMap>>,
    scope: Scope,
    unseen: Arc<WriteMemo>,
    configmaps: Arc<Unseen<SeenConfigMap>>,
    cards: UnboundedSender<ObjectRef<AgentCard>>,
    listed: tokio::sync::watch::Sender<bool>,
) {
    futures::pin_mut!(feed);
    while let Some(event) = feed.next().await {
        let cm = match event {
            watcher::Event::Apply(cm)
            | watcher::Event::InitApply(cm)
            | watcher::Event::Delete(cm) => cm,
            watcher::Event::InitDone => {
                listed.send_replace(true);
                continue;
            }
            watcher::Event::Init => continue,
        };
        let ns = cm.metadata.namespace.clone().unwrap_or_default();
        let name = cm.metadata.name.clone().unwrap_or_default();
        unseen.forget("ConfigMap", &ns, &name);
        configmaps.forget("ConfigMap", &ns, &name);
        if cm.seen.label(LABEL_CONTENT) != Some(CONTENT_CARD)
            || scope.namespace.as_deref().is_some_and(|w| w != ns)
        {
            continue;
        }
        if let Some(owner) = cm.seen.controller().filter(|o| o.kind == "AgentCard") {
            let _ = cards.unbounded_send(ObjectRef::new(owner.name).within(&ns));
        }
    }
}

/// What the operator wrote and its watches have not shown yet: `(kind, namespace, name)` →
/// the object's resourceVersion in the store when it was written, and what was written (`V`: a
/// digest of an object, or a whole status). A reconcile that runs before the watch event of its
/// own last write (another object's event triggered it) would otherwise see the old version and
/// write again (and, for a status, record the same Event twice). Every watch event of an object
/// forgets its entry, so once the store holds the write, or anyone else changes the object, the
/// store decides again.
///
/// Values are boxed and the table shrinks as it empties: a bulk apply leaves thousands of
/// writes unseen for a while, and a table of inline statuses sized for that peak would stay.
pub struct Unseen<V> {
    written: Mutex<Entries<V>>,
}

/// Digests of the objects the operator wrote (see [`Unseen`]).
pub type WriteMemo = Unseen<u64>;

impl<V> Default for Unseen<V> {
    fn default() -> Self {
        Unseen {
            written: Mutex::new(HashMap::new()),
        }
    }
}

/// A digest of what is written, to tell whether a write would repeat the last one.
pub fn digest(value: &impl serde::Serialize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(value)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

type Entries<V> = HashMap<(String, String, String), (Option<String>, Box<V>)>;

fn key(kind: &str, ns: &str, name: &str) -> (String, String, String) {
    (kind.to_string(), ns.to_string(), name.to_string())
}

impl<V: Clone> Unseen<V> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<V>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What was written to `kind` `ns/name` over the version the store still holds
    /// (`version`: its resourceVersion, `None` when absent), if anything.
    pub fn get(&self, kind: &str, ns: &str, name: &str, version: Option<&str>) -> Option<V> {
        self.lock()
            .get(&key(kind, ns, name))
            .filter(|(v, _)| v.as_deref() == version)
            .map(|(_, written)| V::clone(written))
    }

    /// Record a write of `written` over store version `version`.
    pub fn remember(&self, kind: &str, ns: &str, name: &str, version: Option<&str>, written: V) {
        self.lock().insert(
            key(kind, ns, name),
            (version.map(str::to_string), Box::new(written)),
        );
    }

    /// The watch showed `kind` `ns/name` (changed, or gone): the store decides from now on.
    pub fn forget(&self, kind: &str, ns: &str, name: &str) {
        let mut written = self.lock();
        if written.is_empty() || written.remove(&key(kind, ns, name)).is_none() {
            return;
        }
        // Shrunk by halves at most: amortised O(1) per removal.
        if written.capacity() > 64 && written.len() * 4 < written.capacity() {
            let keep = written.len() * 2;
            written.shrink_to(keep);
        }
    }

    /// Forget the object of a watch event (see [`Unseen::forget`]).
    pub fn forget_event<K: kube::Resource>(
        &self,
        kind: &str,
        event: &Result<watcher::Event<K>, watcher::Error>,
    ) {
        if let Ok(
            watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o),
        ) = event
        {
            let meta = o.meta();
            self.forget(
                kind,
                meta.namespace.as_deref().unwrap_or(""),
                meta.name.as_deref().unwrap_or(""),
            );
        }
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

impl Unseen<u64> {
    /// Whether a write of `digest` to `kind` `ns/name` over store version `version` is on its
    /// way into the store.
    pub fn pending(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
        version: Option<&str>,
        digest: u64,
    ) -> bool {
        self.get(kind, ns, name, version) == Some(digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(ns: &str, name: &str, host: &str) -> AgentCard {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
            "spec": {"publish": {"host": host}, "card": {"name": "n"}}
        }))
        .unwrap()
    }

    #[test]
    fn the_index_follows_host_moves_and_deletions() {
        let mut index = CardIndex::default();
        index.apply(&card("a", "one", "H.example"));
        index.apply(&card("a", "two", "h.example"));
        index.apply(&card("b", "three", "other.example"));
        assert_eq!(index.on_host("h.EXAMPLE").len(), 2);
        assert_eq!(index.count_in("a"), 2);
        // Moving a card takes it off its old host.
        index.apply(&card("a", "two", "other.example"));
        assert_eq!(index.on_host("h.example").len(), 1);
        assert_eq!(index.on_host("other.example").len(), 2);
        assert_eq!(index.count_in("a"), 2);
        // Seen again unchanged (any case): listed once.
        index.apply(&card("a", "two", "Other.example"));
        assert_eq!(index.on_host("other.example").len(), 2);
        assert_eq!(index.count_in("a"), 2);
        assert_eq!(index.shared_keys().len(), 3);
        assert_eq!(index.shared_keys().len(), 3);
        index.remove(&ObjectRef::from_obj(&card("a", "one", "h.example")));
        assert!(index.on_host("h.example").is_empty());
        assert_eq!(index.count_in("a"), 1);
        assert_eq!(index.in_namespace("b").len(), 1);
        index.rebuild([&card("c", "x", "x.example")]);
        assert_eq!(index.count_in("a"), 0);
        assert_eq!(index.on_host("x.example").len(), 1);
    }

    #[test]
    fn a_resync_spreads_the_cards_over_its_period() {
        use std::time::Duration;
        let hour = Duration::from_secs(3600);
        assert_eq!(resync_gap(hour, 0), None);
        assert_eq!(resync_gap(hour, 1), Some(hour));
        assert_eq!(resync_gap(hour, 10_000), Some(Duration::from_millis(360)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_resync_waits_a_period_then_walks_every_card_spread_over_the_next() {
        use std::time::Duration;
        let period = Duration::from_secs(100);
        let index = Arc::new(Mutex::new(CardIndex::default()));
        for i in 0..4 {
            lock(&index).apply(&card("a", &format!("c{i}"), &format!("h{i}.example")));
        }
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let task = tokio::spawn(resync(index.clone(), period, tx));
        // Nothing during the first period: the start reconciled every card.
        tokio::time::sleep(period - Duration::from_secs(1)).await;
        assert!(
            rx.try_recv().is_err(),
            "a card was sent before a period passed"
        );
        // Then one card per quarter period, every card once.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let key = rx.try_recv().ok().expect("a card per gap");
            seen.insert(key.name.clone());
            assert!(rx.try_recv().is_err(), "two cards in one gap");
            tokio::time::sleep(period / 4 - Duration::from_millis(1)).await;
        }
        assert_eq!(seen.len(), 4);
        task.abort();
    }

    fn lock(index: &Mutex<CardIndex>) -> std::sync::MutexGuard<'_, CardIndex> {
        index.lock().unwrap()
    }

    #[test]
    fn a_write_is_pending_until_its_object_is_seen_again() {
        let memo = WriteMemo::default();
        let d = digest(&json!({"a": 1}));
        assert!(!memo.pending("ConfigMap", "ns", "x", None, d));
        memo.remember("ConfigMap", "ns", "x", None, d);
        // The store still shows the object as before the write: the same write is pending.
        assert!(memo.pending("ConfigMap", "ns", "x", None, d));
        // Another content, or a store that moved on, is not.
        assert!(!memo.pending("ConfigMap", "ns", "x", None, digest(&json!({"a": 2}))));
        assert!(!memo.pending("ConfigMap", "ns", "x", Some("7"), d));
        assert!(!memo.pending("Ingress", "ns", "x", None, d));
        memo.forget("ConfigMap", "ns", "x");
        assert!(!memo.pending("ConfigMap", "ns", "x", None, d));
        assert!(memo.is_empty());
    }

    #[test]
    fn the_table_of_unseen_writes_shrinks_as_the_watch_catches_up() {
        let memo: Unseen<crate::crd::AgentCardStatus> = Unseen::default();
        for i in 0..5000 {
            memo.remember("AgentCard", "ns", &i.to_string(), None, Default::default());
        }
        let peak = memo.lock().capacity();
        assert!(peak >= 5000);
        for i in 0..4990 {
            memo.forget("AgentCard", "ns", &i.to_string());
        }
        let after = memo.lock().capacity();
        assert!(after <= 64, "capacity {after} after the bulk (peak {peak})");
        // What is still unseen is still known.
        assert!(memo
            .get("AgentCard", "ns", "4995", None)
            .is_some_and(|s| s == Default::default()));
    }

    #[test]
    fn only_the_operators_annotation_fields_are_kept() {
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "name": "x",
            "annotations": {ANN_LAST_APPLIED: "{…}", "keep": "v"},
            "managedFields": [
                {"manager": MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:a": {}}, "f:labels": {"f:l": {}}},
                              "f:data": {"f:card.json": {}}}},
                {"manager": MANAGER, "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {"f:card.json": {}}, "f:metadata": {"f:annotations": {"f:c": {}}}}},
                {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:b": {}}}}}
            ]
        }))
        .unwrap();
        compact_meta(&mut meta);
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert!(!annotations.contains_key(ANN_LAST_APPLIED));
        assert_eq!(annotations.get("keep").map(String::as_str), Some("v"));
        let entries = meta.managed_fields.clone().unwrap_or_default();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0].fields_v1.as_ref().map(|f| f.0.clone()),
            Some(json!("a\nc"))
        );
        // Read the same from the compact entry as from the full ones.
        assert_eq!(
            operator_annotations(&meta).into_iter().collect::<Vec<_>>(),
            ["a", "c"]
        );
        // Compacting again keeps it.
        compact_meta(&mut meta);
        assert_eq!(operator_annotations(&meta).len(), 2);
        // Nothing of ours: no entry left.
        let mut theirs: ObjectMeta = serde_json::from_value(json!({"managedFields": [
            {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {"f:b": {}}}}}]}))
        .unwrap();
        compact_meta(&mut theirs);
        assert!(theirs.managed_fields.is_none());
    }
}
