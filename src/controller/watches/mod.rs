//! What the controllers make of the process's shared watches ([`crate::hub`]).
//!
//! Data flow: each hub stores an object compacted ([`crate::store`]: what no reconcile reads is
//! dropped, so 10,000 cards fit in little memory), then forwards its event
//! here: [`fan_out_cards`], [`fan_out_namespaces`] and [`fan_out_configmaps`] update the indexes
//! ([`CardsByHost`]: the controller's cards by host and by namespace) and forget the writes the
//! watch now shows ([`Unseen`]), and only then send what each event triggers (the card itself to
//! the card controller, a re-count to the directories, the cards of a namespace whose host
//! allowance changed, the owner of an edited ConfigMap). Each event costs O(what changed): no
//! trigger scans every card.
//!
//! A relist (`Init` … `InitDone`) is held back until `InitDone`: the store swaps in the new list
//! only then, so a trigger sent earlier could find a new card missing from the store.

pub mod approvals;
pub mod start;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;

use super::agentdirectory::count::Recount;
use crate::contract::{ANN_ALLOWED_HOSTS, ANN_DIRECTORY, CONTENT_CARD, LABEL_CONTENT};
use crate::controller::triggers::{card_key, card_ref};
use crate::controller::writes::seen::{Unseen, WriteMemo};
use crate::crd::AgentCard;
use crate::hub::{name_ref, Shared};
use crate::process::AbortOnDrop;
use crate::store::{MetaView, SeenConfigMap};

/// The cards by host and by namespace, kept in step with the card store by [`fan_out_cards`]:
/// which cards to look at again when a host is freed, how many cards a namespace has and how
/// many bytes of specs. Each card's reference is held once (a `namespace/name` key, an `Arc`
/// shared by the three maps: [`card_key`]) and each host once.
#[derive(Default)]
pub struct CardsByHost {
    /// Each card's host and the bytes of its spec.
    host_of: HashMap<CardKey, Indexed>,
    /// A host has one card, sometimes a few (shared hosts, conflicts): a list, not a set.
    by_host: HashMap<Arc<str>, Vec<CardKey>>,
    by_namespace: HashMap<String, HashSet<CardKey>>,
    /// The bytes of the specs of each namespace's cards: what one namespace makes every
    /// replica hold (`--max-namespace-card-bytes`).
    bytes_by_namespace: HashMap<String, usize>,
}

/// What [`CardsByHost`] knows of one card.
#[derive(Clone)]
struct Indexed {
    /// Its host (lower case), shared with `by_host`.
    host: Arc<str>,
    /// Bytes of its spec as JSON ([`spec_bytes`]).
    bytes: usize,
}

/// Bytes of `card`'s spec as JSON (at least 1: a card always counts).
pub fn spec_bytes(card: &AgentCard) -> usize {
    serde_json::to_vec(&card.spec).map_or(1, |v| v.len().max(1))
}

/// A card's reference as the [`CardsByHost`] holds it ([`card_key`]).
type CardKey = Arc<str>;

impl CardsByHost {
    /// Record `card` (new, or its spec changed).
    pub fn apply(&mut self, card: &AgentCard) {
        let key = card_key(&name_ref(card));
        let bytes = spec_bytes(card);
        let host = card.spec.publish.host.to_ascii_lowercase();
        let ns = card.metadata.namespace.clone().unwrap_or_default();
        let (shared, old) = match self.host_of.get_key_value(&key) {
            Some((k, v)) => (k.clone(), Some(v.clone())),
            None => (key, None),
        };
        self.count(&ns, old.as_ref().map_or(0, |o| o.bytes), bytes);
        let same_host = old.as_ref().is_some_and(|o| *o.host == *host);
        let host: Arc<str> = match &old {
            Some(o) if same_host => o.host.clone(),
            _ => Arc::from(host),
        };
        // An existing entry keeps its key (the `Arc` the other maps share).
        self.host_of.insert(
            shared.clone(),
            Indexed {
                host: host.clone(),
                bytes,
            },
        );
        if same_host {
            // Known on this host: nothing moves (its namespace cannot change).
            return;
        }
        if let Some(old) = old {
            Self::remove_from_host(&mut self.by_host, &old.host, &shared);
        }
        self.by_host
            .entry(host)
            .or_insert_with(|| Vec::with_capacity(1))
            .push(shared.clone());
        self.by_namespace.entry(ns).or_default().insert(shared);
    }

    /// Count a card of namespace `ns` whose spec took `old` bytes and takes `new` now.
    fn count(&mut self, ns: &str, old: usize, new: usize) {
        let sum = match self.bytes_by_namespace.get_mut(ns) {
            Some(sum) => sum,
            None if new == 0 => return,
            None => self.bytes_by_namespace.entry(ns.to_string()).or_default(),
        };
        *sum = sum.saturating_sub(old).saturating_add(new);
        if *sum == 0 {
            self.bytes_by_namespace.remove(ns);
        }
    }

    /// Bytes of the specs of namespace `ns`'s cards.
    pub fn bytes_in(&self, ns: &str) -> usize {
        self.bytes_by_namespace.get(ns).copied().unwrap_or(0)
    }

    /// Bytes of `key`'s spec (0 when not indexed).
    pub fn size_of(&self, key: &ObjectRef<AgentCard>) -> usize {
        self.host_of.get(&card_key(key)).map_or(0, |i| i.bytes)
    }

    /// Forget `card`.
    pub fn remove(&mut self, r: &ObjectRef<AgentCard>) {
        let ns = r.namespace.clone().unwrap_or_default();
        let key = card_key(r);
        if let Some(old) = self.host_of.remove(&key) {
            self.count(&ns, old.bytes, 0);
            Self::remove_from_host(&mut self.by_host, &old.host, &key);
        }
        if let Some(set) = self.by_namespace.get_mut(&ns) {
            set.remove(&key);
            if set.is_empty() {
                self.by_namespace.remove(&ns);
            }
        }
    }

    fn remove_from_host(map: &mut HashMap<Arc<str>, Vec<CardKey>>, at: &str, key: &str) {
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
            .map(|list| list.iter().map(|k| card_ref(k)).collect())
            .unwrap_or_default()
    }

    /// The cards of namespace `ns`.
    pub fn in_namespace(&self, ns: &str) -> Vec<ObjectRef<AgentCard>> {
        self.by_namespace
            .get(ns)
            .map(|s| s.iter().map(|k| card_ref(k)).collect())
            .unwrap_or_default()
    }

    /// Every card, as the references the index shares (for a walk that outlives the lock).
    pub fn shared_keys(&self) -> Vec<CardKey> {
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
    index: Arc<Mutex<CardsByHost>>,
    period: std::time::Duration,
    cards: UnboundedSender<ObjectRef<AgentCard>>,
) {
    tokio::time::sleep(period).await;
    loop {
        let keys = crate::locks::lock(&index).shared_keys();
        let Some(gap) = resync_gap(period, keys.len()) else {
            tokio::time::sleep(period).await;
            continue;
        };
        for key in keys {
            if cards.unbounded_send(card_ref(&key)).is_err() {
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
/// at its end). The task runs in `span`.
pub(super) fn drive<K, T>(
    span: tracing::Span,
    feed: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    touched: impl Fn(&K) -> T + Send + 'static,
) -> (AbortOnDrop, futures::channel::mpsc::UnboundedReceiver<T>)
where
    K: Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let task = AbortOnDrop::spawn(span, async move {
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
    (task, rx)
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
            directory: annotation(ANN_DIRECTORY),
        }
    }

    /// The card or directory to reconcile for this object. A directory's routes live in the
    /// operator's namespace only, a card's in the operator's namespace or the card's own: an
    /// object elsewhere (a tenant's, annotated to name another namespace's card) names nobody.
    pub fn owner(&self, operator_ns: &str) -> Option<Owner> {
        if let Some(dir) = &self.directory {
            return (self.namespace == operator_ns).then(|| Owner::Directory(ObjectRef::new(dir)));
        }
        let (ns, name) = crate::contract::annotated_card(self.card.as_deref()?)?;
        (self.namespace == operator_ns || self.namespace == ns)
            .then(|| Owner::Card(ObjectRef::new(name).within(ns)))
    }
}

/// Whom an object the operator writes belongs to (see [`WrittenFor::owner`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Owner {
    /// A card's object.
    Card(ObjectRef<AgentCard>),
    /// A directory's object.
    Directory(ObjectRef<crate::crd::AgentDirectory>),
}

/// Where a card event goes once the store and the index hold it.
pub struct CardTargets {
    /// The card controller (the card itself).
    pub cards: UnboundedSender<ObjectRef<AgentCard>>,
    /// The directory controller (every directory counts again).
    pub directories: UnboundedSender<Recount>,
    /// The sweeper: each card that is gone, and each (re-)list.
    pub gone: UnboundedSender<Gone>,
}

/// What the sweeper hears from the card watch.
pub enum Gone {
    /// A card's delete event: forget it (claims, routes in the operator's namespace).
    Card(Arc<AgentCard>),
    /// The cards were (re-)listed: a card deleted meanwhile sent no event, so its routes are
    /// found by sweeping ([`crate::controller::routes::sweep`]).
    Relisted,
}

/// Read the shared card watch until it ends: forget the unseen status writes of each card it
/// shows (`unseen`), keep `index` in step, and send each change where it matters. Only the
/// cards of `namespace` are the controller's (every namespace when `None`); every card counts
/// for the directories. `limit`: the cards per namespace that may publish (0: any number); when
/// a card of a namespace over it goes, the namespace's other cards are looked at again.
pub async fn fan_out_cards(
    feed: impl Stream<Item = Shared<AgentCard>>,
    store: Store<AgentCard>,
    index: Arc<Mutex<CardsByHost>>,
    scope: Scope,
    unseen: Arc<Unseen<crate::crd::AgentCardStatus>>,
    targets: CardTargets,
) {
    futures::pin_mut!(feed);
    let mut relisted: Option<Vec<ObjectRef<AgentCard>>> = None;
    let lock = || crate::locks::lock(&index);
    while let Some(event) = feed.next().await {
        if let watcher::Event::Apply(c) | watcher::Event::InitApply(c) | watcher::Event::Delete(c) =
            &event
        {
            unseen.forget(
                crate::controller::writes::seen::STATUS_WRITE,
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
                let _ = targets.directories.unbounded_send(Recount::All);
                let _ = targets.gone.unbounded_send(Gone::Relisted);
            }
            watcher::Event::Apply(card) => {
                if scope.holds(&card) {
                    lock().apply(&card);
                    let _ = targets.cards.unbounded_send(name_ref(card.as_ref()));
                }
                let _ = targets.directories.unbounded_send(Recount::Card(card));
            }
            watcher::Event::Delete(card) => {
                let _ = targets
                    .directories
                    .unbounded_send(Recount::CardGone(card.clone()));
                if scope.holds(&card) {
                    let key = name_ref(card.as_ref());
                    let ns = key.namespace.clone().unwrap_or_default();
                    let waiting = {
                        let mut index = lock();
                        let over = (scope.limit > 0 && index.count_in(&ns) > scope.limit)
                            || (scope.byte_limit > 0 && index.bytes_in(&ns) > scope.byte_limit);
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
                    let _ = targets.gone.unbounded_send(Gone::Card(card));
                }
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
    /// Most bytes of card specs published per namespace (0: any number).
    pub byte_limit: usize,
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
    index: Arc<Mutex<CardsByHost>>,
    cards: UnboundedSender<ObjectRef<AgentCard>>,
    directories: UnboundedSender<Recount>,
) {
    futures::pin_mut!(feed);
    let mut allowance: HashMap<String, Option<String>> = HashMap::new();
    // Namespaces whose allowance changed during a relist: re-checked at its end, once the
    // store holds the new list.
    let mut relisted: Option<Vec<String>> = None;
    let recheck = |name: &str| {
        let keys = crate::locks::lock(&index).in_namespace(name);
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
                let _ = directories.unbounded_send(Recount::All);
                continue;
            }
            watcher::Event::InitDone => {
                for name in relisted.take().unwrap_or_default() {
                    recheck(&name);
                }
                let _ = directories.unbounded_send(Recount::All);
                continue;
            }
            watcher::Event::Init => {
                relisted = Some(Vec::new());
                continue;
            }
        };
        if !initial {
            let _ = directories.unbounded_send(Recount::All);
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
        let mut index = CardsByHost::default();
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
    fn the_index_counts_each_namespaces_spec_bytes_through_edits_moves_and_deletions() {
        let mut index = CardsByHost::default();
        let (one, two) = (card("a", "one", "h.example"), card("a", "two", "h.example"));
        index.apply(&one);
        index.apply(&two);
        index.apply(&card("b", "three", "other.example"));
        let (r1, r2) = (name_ref(&one), name_ref(&two));
        assert_eq!(index.size_of(&r1), spec_bytes(&one));
        assert_eq!(index.bytes_in("a"), spec_bytes(&one) + spec_bytes(&two));
        // A larger spec on the same host, then on another host: counted once, at its new size.
        let mut bigger = one.clone();
        bigger.spec.card.as_mut().unwrap().description = "d".repeat(500);
        index.apply(&bigger);
        assert_eq!(index.size_of(&r1), spec_bytes(&bigger));
        assert_eq!(index.bytes_in("a"), spec_bytes(&bigger) + spec_bytes(&two));
        bigger.spec.publish.host = "moved.example".into();
        index.apply(&bigger);
        assert_eq!(index.bytes_in("a"), spec_bytes(&bigger) + spec_bytes(&two));
        assert_eq!(index.on_host("moved.example"), vec![r1.clone()]);
        index.remove(&r1);
        assert_eq!(
            (index.size_of(&r1), index.bytes_in("a")),
            (0, spec_bytes(&two))
        );
        index.remove(&r2);
        index.remove(&r2);
        assert_eq!(index.bytes_in("a"), 0);
        assert!(!index.bytes_by_namespace.contains_key("a"));
        assert_eq!(
            index.bytes_in("b"),
            spec_bytes(&card("b", "three", "other.example"))
        );
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
        let index = Arc::new(Mutex::new(CardsByHost::default()));
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
            let key = rx.try_recv().expect("a card per gap");
            seen.insert(key.name.clone());
            assert!(rx.try_recv().is_err(), "two cards in one gap");
            tokio::time::sleep(period / 4 - Duration::from_millis(1)).await;
        }
        assert_eq!(seen.len(), 4);
        task.abort();
    }

    fn lock(index: &Mutex<CardsByHost>) -> std::sync::MutexGuard<'_, CardsByHost> {
        index.lock().unwrap()
    }
}
