//! What the operator wrote, as the watches last saw it or, until they show it, as it was
//! written (read-your-own-writes): a reconcile triggered before the watch event of its own
//! last write reads that write, not the older object in the store, and so does not write again.
//!
//! [`Unseen`] is the table of writes not seen yet (digests of objects, whole statuses), kept in
//! step by the watches ([`crate::controller::watches`]); [`Written`] answers the reconciles: a card's
//! ConfigMap, Ingresses, HTTPRoutes and status as they are now.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;

use crate::controller::agentcard::card::configmap_name;
use crate::controller::routes::routing;
use crate::crd::{AgentCard, AgentCardStatus};
use crate::store::{NamedStore, SeenConfigMap, SeenIngress};

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

type Entries<V> = HashMap<(String, String, String), (Option<String>, Box<V>)>;

fn key(kind: &str, ns: &str, name: &str) -> (String, String, String) {
    (kind.to_string(), ns.to_string(), name.to_string())
}

impl<V: Clone> Unseen<V> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<V>> {
        crate::locks::lock(&self.written)
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

/// The [`Unseen`] kind of a card's status writes.
pub const STATUS_WRITE: &str = "AgentCard/status";

/// The objects the operator writes, as seen by the watches or as written since.
pub struct Written {
    /// The operator's namespace (card routes live there).
    pub operator_namespace: String,
    /// The cards' ConfigMaps (the process's shared store).
    pub configmaps: NamedStore<SeenConfigMap>,
    /// The Ingresses this operator wrote (every namespace).
    pub ingresses: NamedStore<SeenIngress>,
    /// The HTTPRoutes this operator wrote (with HTTPRoute routing).
    pub routes: Option<Store<DynamicObject>>,
    /// Digests of the objects written and not seen yet.
    pub memo: Arc<WriteMemo>,
    /// The card ConfigMaps written and not yet seen by their watch.
    pub configmaps_written: Arc<Unseen<SeenConfigMap>>,
    /// The card statuses written and not yet seen by the card watch.
    pub statuses: Arc<Unseen<AgentCardStatus>>,
}

impl Written {
    /// The card's ConfigMap: as the operator last wrote it while the watch has not shown
    /// that write yet, else as the watch last saw it.
    pub fn configmap(&self, card: &AgentCard) -> Option<Arc<SeenConfigMap>> {
        self.configmap_named(&card.namespace().unwrap_or_default(), &configmap_name(card))
    }

    /// The card's extended-card ConfigMap, the same way as [`Self::configmap`].
    pub fn extended_configmap(&self, card: &AgentCard) -> Option<Arc<SeenConfigMap>> {
        let name = crate::contract::extended_configmap_name(&card.name_any());
        self.configmap_named(&card.namespace().unwrap_or_default(), &name)
    }

    fn configmap_named(&self, ns: &str, name: &str) -> Option<Arc<SeenConfigMap>> {
        let stored = self.configmaps.get(&ObjectRef::new(name).within(ns));
        let version = stored.as_ref().and_then(|c| c.resource_version());
        match self
            .configmaps_written
            .get("ConfigMap", ns, name, version.as_deref())
        {
            Some(mut written) => {
                written.metadata.resource_version = version;
                Some(Arc::new(written))
            }
            None => stored,
        }
    }

    /// The Ingress `namespace/name` as last seen, if it exists.
    pub fn ingress(&self, namespace: &str, name: &str) -> Option<Arc<SeenIngress>> {
        self.ingresses.get(&ObjectRef::new(name).within(namespace))
    }

    /// The HTTPRoute `namespace/name` as last seen, if routes are watched and it exists.
    pub fn route(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let store = self.routes.as_ref()?;
        store.get(&ObjectRef::new_with(name, routing::httproute_resource()).within(namespace))
    }

    /// `card` with its status as the operator last wrote it, while the card watch has not
    /// shown that write yet.
    pub fn with_own_status(&self, card: Arc<AgentCard>) -> Arc<AgentCard> {
        let (ns, name) = (card.namespace().unwrap_or_default(), card.name_any());
        let version = card.resource_version();
        match self
            .statuses
            .get(STATUS_WRITE, &ns, &name, version.as_deref())
        {
            Some(written) => {
                let mut c = (*card).clone();
                c.status = Some(written);
                Arc::new(c)
            }
            None => card,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::digest;
    use serde_json::json;

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
}
