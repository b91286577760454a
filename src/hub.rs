//! One watch per kind for the whole process, shared by the card server's feed (every replica)
//! and the controllers (the lease holder only).
//!
//! Data flow: a watcher stream → compaction (what no reader needs, such as `managedFields`, is
//! dropped before it is stored) → the reflector store → [`Hub`] forwards each event, the object
//! behind an `Arc`, to every subscriber. A subscriber that joins late (the controllers, when
//! this replica gains the lease) first gets the store's content as a relist (`Init`,
//! `InitApply`…, `InitDone`), then the live events: nothing is missed, and nothing is listed
//! from the API server twice. The store is updated before an event is forwarded, so a
//! subscriber reacting to an event reads at least that version from the store; a relist's
//! objects are forwarded at its end, once the store holds them. Subscribers get the very
//! objects the store holds (one `Arc` each), not copies.

use std::sync::{Arc, Mutex};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;

use crate::contract::PUBLISHED_SELECTOR;
use crate::crd::{AgentCard, AgentDirectory};
use crate::process::AbortOnDrop;
use crate::store::SeenConfigMap;
use crate::store::{compact_card, compact_card_for_serving, compact_meta};

/// A watch event with the object shared.
pub type Shared<K> = Event<Arc<K>>;

/// What a process watches: every namespace, or (`run --watch-namespace`) one namespace's
/// cards and card ConfigMaps, with the operator's own namespace for the JWKS.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// The one namespace whose cards are watched (every namespace when `None`).
    pub namespace: Option<String>,
    /// The operator's namespace (its ConfigMaps are kept in every scope).
    pub operator_namespace: String,
    /// Objects per page of a watch's lists (its first, and any relist after the API server
    /// has compacted its resource version); 0 stands for [`DEFAULT_LIST_PAGE_SIZE`].
    pub list_page_size: u32,
    /// A serving-only replica (`serve --from-cluster`, no controller): cards are stored as
    /// the card server reads them ([`compact_card_for_serving`]).
    pub serving_only: bool,
}

/// Objects per page of the watches' lists unless `--list-page-size` says otherwise: neither
/// the API server nor this process holds a response of every object (at 100,000 cards one
/// would be hundreds of megabytes). A page is held whole as it arrives, before the objects
/// are trimmed for the stores (an AgentCard with its `managedFields` takes about 16 KB then):
/// pages of 2,000 cost a replica some 33 MB at the start (measured at 10,000 cards), pages
/// of 500 a quarter of it. Larger pages take fewer round trips: at 100,000 cards a serving
/// replica served every card 33.5 s after its start in pages of 500, 23.0 s in pages of
/// 2,000 (README, Sizing).
pub const DEFAULT_LIST_PAGE_SIZE: u32 = 500;

impl Scope {
    /// A watch of this scope: lists in pages of [`Scope::list_page_size`], most recent
    /// semantics (never `resourceVersion=0`, which the API server answers in one piece
    /// whatever the `limit`).
    pub fn watch_config(&self) -> watcher::Config {
        let page = match self.list_page_size {
            0 => DEFAULT_LIST_PAGE_SIZE,
            n => n,
        };
        watcher::Config::default().page_size(page)
    }

    /// Whether an object of namespace `ns` is kept: every one without a namespace scope, else
    /// those of the watched namespace and of the operator's.
    pub fn keeps(&self, ns: Option<&str>) -> bool {
        match &self.namespace {
            None => true,
            Some(watched) => ns == Some(watched.as_str()) || ns == Some(&self.operator_namespace),
        }
    }

    /// A watch stream's filter: events of objects [`Scope::keeps`] rejects are dropped before
    /// any store holds them.
    pub fn event_filter<K: kube::Resource, E>(
        &self,
    ) -> impl FnMut(&Result<Event<K>, E>) -> std::future::Ready<bool> {
        let scope = self.clone();
        move |event| {
            std::future::ready(match event {
                Ok(Event::Apply(o) | Event::InitApply(o) | Event::Delete(o)) => {
                    scope.keeps(o.meta().namespace.as_deref())
                }
                _ => true,
            })
        }
    }
}

struct Subscribers<K> {
    senders: Vec<UnboundedSender<Shared<K>>>,
    synced: bool,
}

/// One kind's watch: its store, and the subscribers its events go to.
pub struct Hub<K: kube::Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    subscribers: Arc<Mutex<Subscribers<K>>>,
    listed: tokio::sync::watch::Receiver<bool>,
    _task: AbortOnDrop,
}

impl<K> Hub<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    /// Start watching `api` (with `config`), each object trimmed by `compact` before it is
    /// stored and forwarded, and only the objects `scope` keeps stored at all.
    pub fn start(
        api: Api<K>,
        config: watcher::Config,
        compact: impl FnMut(&mut K) + Send + 'static,
        scope: &Scope,
    ) -> Hub<K> {
        let (store, mut writer) = reflector::store();
        let subscribers = Arc::new(Mutex::new(Subscribers {
            senders: Vec::new(),
            synced: false,
        }));
        let feed = watcher(api, config)
            .default_backoff()
            .filter(scope.event_filter())
            .modify(compact);
        let forward = subscribers.clone();
        let reader = store.clone();
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let span = tracing::info_span!("watch", kind = %K::kind(&()));
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move {
                futures::pin_mut!(feed);
                // The objects of a relist, forwarded once the store holds them (at its end).
                let mut relisted: Vec<ObjectRef<K>> = Vec::new();
                while let Some(event) = feed.next().await {
                    let event = match event {
                        Ok(e) => e,
                        Err(e) => {
                            tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying with backoff");
                            continue;
                        }
                    };
                    writer.apply_watcher_event(&event);
                    // Subscribers get the store's own `Arc`s: what they keep of an object (the
                    // card server keeps the card bytes) shares its memory with the store.
                    let stored = |o: &K| reader.get(&name_ref(o));
                    let shared: Vec<Shared<K>> = match event {
                        Event::Init => {
                            relisted.clear();
                            vec![Event::Init]
                        }
                        Event::InitApply(o) => {
                            relisted.push(name_ref(&o));
                            Vec::new()
                        }
                        Event::InitDone => std::mem::take(&mut relisted)
                            .iter()
                            .filter_map(|r| reader.get(r))
                            .map(Event::InitApply)
                            .chain([Event::InitDone])
                            .collect(),
                        Event::Apply(o) => {
                            vec![Event::Apply(stored(&o).unwrap_or_else(|| Arc::new(o)))]
                        }
                        Event::Delete(o) => vec![Event::Delete(Arc::new(o))],
                    };
                    let mut subs = crate::locks::lock(&forward);
                    for event in shared {
                        if matches!(event, Event::InitDone) {
                            subs.synced = true;
                            listed_tx.send_replace(true);
                        }
                        subs.senders
                            .retain(|tx| tx.unbounded_send(event.clone()).is_ok());
                    }
                }
            },
            span,
        ));
        Hub {
            store,
            subscribers,
            listed,
            _task: AbortOnDrop(task),
        }
    }

    /// True once the store holds a first full list. Any number of tasks may wait on it (a
    /// store's own `wait_until_ready` wakes only its latest waiter in kube-runtime 5).
    pub fn listed(&self) -> tokio::sync::watch::Receiver<bool> {
        self.listed.clone()
    }

    /// The store every reader shares.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// The events from now on, after the store's content as a relist when the watch has
    /// listed already. Dropping the receiver unsubscribes.
    pub fn subscribe(&self) -> UnboundedReceiver<Shared<K>> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut subs = crate::locks::lock(&self.subscribers);
        if subs.synced {
            let _ = tx.unbounded_send(Event::Init);
            for o in self.store.state() {
                let _ = tx.unbounded_send(Event::InitApply(o));
            }
            let _ = tx.unbounded_send(Event::InitDone);
        }
        subs.senders.push(tx);
        rx
    }
}

/// `o`'s reference by namespace and name only: what a store looks objects up by, and what the
/// indexes and the controllers' queues hold (`ObjectRef::from_obj` also copies the uid and
/// resourceVersion, which no lookup or comparison reads).
pub fn name_ref<K: kube::Resource<DynamicType = ()>>(o: &K) -> ObjectRef<K> {
    let meta = o.meta();
    let r = ObjectRef::new(meta.name.as_deref().unwrap_or_default());
    match meta.namespace.as_deref() {
        Some(ns) => r.within(ns),
        None => r,
    }
}

/// The watches the card server and the controllers share: every AgentCard, Namespace and
/// AgentDirectory, and the ConfigMaps the operator publishes (cards and the JWKS).
pub struct Hubs {
    /// Every AgentCard (compacted).
    pub cards: Hub<AgentCard>,
    /// Every Namespace.
    pub namespaces: Hub<Namespace>,
    /// Every AgentDirectory.
    pub directories: Hub<AgentDirectory>,
    /// Every ConfigMap with a published card or the JWKS, as the stores keep a ConfigMap.
    pub configmaps: Hub<SeenConfigMap>,
}

impl Hubs {
    /// Start the four watches, for `scope`: with one namespace, its cards are listed from
    /// that namespace alone, its Namespace alone, and of the published ConfigMaps only those
    /// of that namespace and of the operator's are stored (two namespaces cannot share one
    /// watch).
    pub fn start(client: &Client, scope: &Scope) -> Arc<Hubs> {
        let cards = match &scope.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let namespaces = match &scope.namespace {
            Some(ns) => scope.watch_config().fields(&format!("metadata.name={ns}")),
            None => scope.watch_config(),
        };
        let operator_namespace = scope.operator_namespace.clone();
        let compact: fn(&mut AgentCard) = if scope.serving_only {
            compact_card_for_serving
        } else {
            compact_card
        };
        Arc::new(Hubs {
            // Lists page: neither the API server nor this process holds one response with
            // every card.
            cards: Hub::start(cards, scope.watch_config(), compact, &Scope::default()),
            namespaces: Hub::start(
                Api::all(client.clone()),
                namespaces,
                |ns: &mut Namespace| compact_meta(&mut ns.metadata),
                &Scope::default(),
            ),
            directories: Hub::start(
                Api::all(client.clone()),
                scope.watch_config(),
                |d: &mut AgentDirectory| d.metadata.managed_fields = None,
                &Scope::default(),
            ),
            configmaps: Hub::start(
                Api::all(client.clone()),
                scope.watch_config().labels(PUBLISHED_SELECTOR),
                // Reduced while it is deserialised (`SeenConfigMap: From<ConfigMap>`), then to
                // what the operator wrote: a tenant's own ConfigMaps labelled as the
                // operator's are kept as a few bytes each, whatever their size.
                move |cm: &mut SeenConfigMap| cm.keep_only_ours(&operator_namespace),
                scope,
            ),
        })
    }
}
