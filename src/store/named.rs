//! A store of watched objects found by namespace and name, for the kinds the operator keeps
//! one or two of per card (its ConfigMaps and Ingresses) and that no kube `Controller` reads.
//!
//! kube's reflector store keys each object by an `ObjectRef`: 96 bytes in its table, and four
//! strings of its own (name, namespace, resourceVersion, uid) copied from the object, which
//! no lookup reads: about 250 bytes an object, 25 MB a kind at 100,000 cards. Here the table
//! holds only the object's `Arc` (8 bytes a slot), hashed by the namespace and name the object
//! itself holds.
//!
//! Data flow: a watch's events → [`NamedWriter::apply_watcher_event`] (a relist is gathered
//! apart and swapped in at its end, as kube's writer does) → the table behind a lock, never
//! held across `.await` → readers ([`NamedStore::get`], [`NamedStore::state`]) get the
//! objects' `Arc`s.

use std::hash::BuildHasher;
use std::sync::{Arc, RwLock};

use hashbrown::{DefaultHashBuilder, HashTable};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

use crate::locks;

/// The objects, each once, found by namespace and name.
struct Table<K> {
    objects: HashTable<Arc<K>>,
    hasher: DefaultHashBuilder,
}

impl<K> Default for Table<K> {
    fn default() -> Self {
        Table {
            objects: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

/// An object's namespace and name, as the table hashes and compares them.
fn key_of<K: kube::Resource>(o: &K) -> (Option<&str>, &str) {
    let meta = o.meta();
    (
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

impl<K: kube::Resource> Table<K> {
    fn hash(&self, key: (Option<&str>, &str)) -> u64 {
        self.hasher.hash_one(key)
    }

    fn get(&self, key: (Option<&str>, &str)) -> Option<&Arc<K>> {
        self.objects.find(self.hash(key), |o| key_of(&**o) == key)
    }

    fn insert(&mut self, object: Arc<K>) {
        let hasher = self.hasher.clone();
        let key = key_of(&*object);
        let hash = self.hash(key);
        match self.objects.entry(
            hash,
            |o| key_of(&**o) == key,
            |o| hasher.hash_one(key_of(&**o)),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut held) => *held.get_mut() = object,
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(object);
            }
        }
    }

    fn remove(&mut self, key: (Option<&str>, &str)) {
        if let Ok(held) = self
            .objects
            .find_entry(self.hash(key), |o| key_of(&**o) == key)
        {
            held.remove();
        }
        // A table that emptied a lot gives its memory back (a bulk delete).
        if self.objects.capacity() > 64 && self.objects.len() < self.objects.capacity() / 4 {
            let hasher = self.hasher.clone();
            self.objects
                .shrink_to_fit(|o| hasher.hash_one(key_of(&**o)));
        }
    }
}

/// The readers' side: what the watch last showed of each object. Clones share one table.
pub struct NamedStore<K> {
    table: Arc<RwLock<Table<K>>>,
    /// True once the watch's first list is in the table.
    listed: watch::Receiver<bool>,
}

impl<K> Clone for NamedStore<K> {
    fn clone(&self) -> Self {
        NamedStore {
            table: self.table.clone(),
            listed: self.listed.clone(),
        }
    }
}

/// An empty store that no watch fills (never listed).
impl<K> Default for NamedStore<K> {
    fn default() -> Self {
        NamedStore {
            table: Arc::new(RwLock::new(Table::default())),
            listed: watch::channel(false).1,
        }
    }
}

impl<K: kube::Resource> NamedStore<K> {
    /// The object `key` names (its namespace and name; nothing else of it is read).
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        locks::read(&self.table)
            .get((key.namespace.as_deref(), &key.name))
            .cloned()
    }

    /// Every object held, in no particular order.
    pub fn state(&self) -> Vec<Arc<K>> {
        locks::read(&self.table).objects.iter().cloned().collect()
    }

    /// How many objects are held.
    pub fn len(&self) -> usize {
        locks::read(&self.table).objects.len()
    }

    /// Whether no object is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wait until the watch's first list is in the table: true then, false if its writer
    /// is gone first. Any number of tasks may wait.
    pub async fn wait_until_ready(&self) -> bool {
        self.listed.clone().wait_for(|l| *l).await.is_ok()
    }
}

/// The watch's side: applies each event to the table its [`NamedStore`]s read.
pub struct NamedWriter<K> {
    store: NamedStore<K>,
    listed: watch::Sender<bool>,
    /// A relist under way: its objects so far, swapped in whole at its end, so readers see
    /// the old list until the new one is complete.
    relist: Option<Table<K>>,
}

impl<K> Default for NamedWriter<K> {
    fn default() -> Self {
        let (listed, ready) = watch::channel(false);
        NamedWriter {
            store: NamedStore {
                table: Arc::new(RwLock::new(Table::default())),
                listed: ready,
            },
            listed,
            relist: None,
        }
    }
}

impl<K: kube::Resource + Clone> NamedWriter<K> {
    /// A reader of this writer's table.
    pub fn as_reader(&self) -> NamedStore<K> {
        self.store.clone()
    }

    /// Apply one watch event: an object changed or gone, or a step of a (re)list.
    pub fn apply_watcher_event(&mut self, event: &Event<K>) {
        match event {
            Event::Apply(o) => locks::write(&self.store.table).insert(Arc::new(o.clone())),
            Event::Delete(o) => locks::write(&self.store.table).remove(key_of(o)),
            Event::Init => self.relist = Some(Table::default()),
            Event::InitApply(o) => self
                .relist
                .get_or_insert_with(Table::default)
                .insert(Arc::new(o.clone())),
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                // The old table is dropped after the lock is let go.
                let _old = std::mem::replace(&mut *locks::write(&self.store.table), listed);
                self.listed.send_replace(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn version(store: &NamedStore<ConfigMap>, ns: &str, name: &str) -> Option<String> {
        store
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|o| o.metadata.resource_version.clone())
    }

    #[test]
    fn objects_are_found_by_namespace_and_name_replaced_and_removed() {
        let mut writer = NamedWriter::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&Event::Apply(cm("a", "x", "1")));
        writer.apply_watcher_event(&Event::Apply(cm("b", "x", "2")));
        assert_eq!(version(&store, "a", "x").as_deref(), Some("1"));
        assert_eq!(version(&store, "b", "x").as_deref(), Some("2"));
        assert_eq!(version(&store, "c", "x"), None);
        // A newer version replaces the one held.
        writer.apply_watcher_event(&Event::Apply(cm("a", "x", "3")));
        assert_eq!(version(&store, "a", "x").as_deref(), Some("3"));
        assert_eq!(store.len(), 2);
        writer.apply_watcher_event(&Event::Delete(cm("a", "x", "4")));
        assert_eq!(version(&store, "a", "x"), None);
        assert_eq!(store.state().len(), 1);
    }

    #[test]
    fn a_relist_replaces_the_table_at_its_end() {
        let mut writer = NamedWriter::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&Event::Apply(cm("a", "gone", "1")));
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(cm("a", "kept", "2")));
        assert!(!*store.listed.borrow());
        // Until the relist ends, readers see the old table.
        assert_eq!(version(&store, "a", "gone").as_deref(), Some("1"));
        assert_eq!(version(&store, "a", "kept"), None);
        writer.apply_watcher_event(&Event::InitDone);
        assert!(*store.listed.borrow());
        assert_eq!(version(&store, "a", "gone"), None);
        assert_eq!(version(&store, "a", "kept").as_deref(), Some("2"));
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn readers_wait_until_the_first_list_is_in() {
        let mut writer = NamedWriter::<ConfigMap>::default();
        let store = writer.as_reader();
        let waiter = tokio::spawn(async move {
            let ready = store.wait_until_ready().await;
            (ready, store.len())
        });
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(cm("a", "x", "1")));
        writer.apply_watcher_event(&Event::InitDone);
        assert_eq!(waiter.await.ok(), Some((true, 1)));
        // A store no watch fills is never ready; its waiters are not left hanging.
        assert!(!NamedStore::<ConfigMap>::default().wait_until_ready().await);
    }

    #[test]
    fn a_table_emptied_by_a_bulk_delete_shrinks() {
        let mut writer = NamedWriter::default();
        let store = writer.as_reader();
        for i in 0..1000 {
            writer.apply_watcher_event(&Event::Apply(cm("n", &format!("c{i}"), "1")));
        }
        let full = locks::read(&store.table).objects.capacity();
        for i in 0..990 {
            writer.apply_watcher_event(&Event::Delete(cm("n", &format!("c{i}"), "1")));
        }
        assert!(locks::read(&store.table).objects.capacity() < full / 4);
        assert_eq!(store.len(), 10);
        assert!(version(&store, "n", "c995").is_some());
    }
}
