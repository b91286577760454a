//! One watch per kind for the whole process, shared by the card server's feed (every replica)
//! and the controllers (the lease holder only).
//!
//! Data flow: a watcher stream (a streaming list where the API server allows it, else pages,
//! see [`list_and_watch`]) → compaction (what no reader needs, such as `managedFields`, is
//! dropped before it is stored) → the store (kube's reflector store, or for the card ConfigMaps,
//! which no kube `Controller` reads, a [`NamedStore`] without kube's key per object) → [`Hub`]
//! forwards each event, the object behind an `Arc`, to every subscriber. A subscriber that
//! joins late (the controllers, when this replica gains the lease) first gets the store's
//! content as a relist (`Init`, `InitApply`…, `InitDone`), then the live events: nothing is
//! missed, and nothing is listed from the API server twice. The store is updated before an
//! event is forwarded, so a subscriber reacting to an event reads at least that version from
//! the store; a relist's objects are forwarded at its end, once the store holds them.
//! Subscribers get the very objects the store holds (one `Arc` each), not copies.
//!
//! A hub that keeps nothing ([`Keep::Nothing`], a serving replica's cards and ConfigMaps) has
//! no store: its one subscriber, registered before the watch starts, gets each event as it
//! comes and keeps what it reads of each object itself.

use std::sync::{Arc, Mutex};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;

use crate::contract::PUBLISHED_SELECTOR;
use crate::crd::{AgentCard, AgentDirectory};
use crate::process::AbortOnDrop;
use crate::store::{compact_card, compact_meta, CardFields, ServedCard, WireCard};
use crate::store::{NamedStore, NamedWriter, SeenConfigMap};

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
    /// How the watches get their first list (and any relist).
    pub initial_list: InitialList,
}

/// How a watch gets the objects there are before it follows their changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum InitialList {
    /// A streaming list (Kubernetes `WatchList`: a watch whose first events are every object,
    /// then a bookmark): one request, each object decoded on its own as it comes, no page held
    /// whole. An API server that refuses it (`WatchList` off: 1.27–1.31 and 1.33 by default)
    /// gets pages instead, from its first refusal on.
    #[default]
    Auto,
    /// Lists in pages of `--list-page-size`, then a watch from the list's resource version.
    Pages,
}

/// Objects per page of the watches' lists unless `--list-page-size` says otherwise, when they
/// list in pages (an API server without streaming lists, or `--initial-list pages`): neither
/// the API server nor this process holds a response of every object (at 100,000 cards one
/// would be hundreds of megabytes). A page is held whole as it arrives, before the objects
/// are trimmed for the stores (an AgentCard with its `managedFields` takes about 16 KB then):
/// pages of 2,000 cost a replica some 33 MB at the start (measured at 10,000 cards), pages
/// of 500 a quarter of it. Larger pages take fewer round trips: at 100,000 cards a serving
/// replica served every card 33.5 s after its start in pages of 500, 23.0 s in pages of
/// 2,000 (README, Sizing).
pub const DEFAULT_LIST_PAGE_SIZE: u32 = 500;

impl Scope {
    /// A watch of this scope. When it lists (see [`Scope::initial_list`]) it lists in pages
    /// of [`Scope::list_page_size`], most recent semantics (never `resourceVersion=0`, which
    /// the API server answers in one piece whatever the `limit`).
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

/// What a watch of this module can watch and share: a kind without dynamic type that kube's
/// watcher decodes and its store holds, shared across tasks.
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

struct Subscribers<K> {
    senders: Vec<UnboundedSender<Shared<K>>>,
    synced: bool,
    /// [`Keep::Nothing`]: the one subscriber's receiver, registered before the watch started
    /// (so it misses nothing), until [`Hub::subscribe`] hands it out.
    first: Option<UnboundedReceiver<Shared<K>>>,
}

/// What a hub keeps of the objects it watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// A reflector store every reader shares (the controllers read objects from it), and
    /// from which a subscriber that joins late gets a relist.
    Store,
    /// The same, in a [`NamedStore`] ([`Hub::named`]): for a kind no kube `Controller` reads
    /// (the card ConfigMaps, one or two per card), without kube's per-object key.
    Named,
    /// No store: one subscriber, which keeps what it reads of each object itself (a serving
    /// replica's view of the cards and their ConfigMaps). Each event goes to it as it comes,
    /// a relist's objects included, and no object outlives what that subscriber keeps of it:
    /// at 100,000 cards a stored ConfigMap and the store's tables cost about a kilobyte a
    /// card. [`Hub::store`] stays empty.
    Nothing,
}

/// One kind's watch: its store, and the subscribers its events go to.
pub struct Hub<K: Watched> {
    /// The store the watch fills (an empty kube store for [`Keep::Nothing`]).
    held: Reader<K>,
    keep: Keep,
    subscribers: Arc<Mutex<Subscribers<K>>>,
    listed: tokio::sync::watch::Receiver<bool>,
    _task: AbortOnDrop,
}

impl<K: Watched> Hub<K> {
    /// Start watching `api` (with `config`, its first list as `initial` says), each object
    /// trimmed by `compact` before it is stored and forwarded, and only the objects `scope`
    /// keeps stored at all; `keep` says whether a store holds them.
    pub fn start(
        api: Api<K>,
        config: watcher::Config,
        initial: InitialList,
        compact: impl FnMut(&mut K) + Send + 'static,
        scope: &Scope,
        keep: Keep,
    ) -> Hub<K> {
        Hub::start_as(api, config, initial, compact, scope, keep)
    }

    /// [`Hub::start`] with each object read as `W`, the form its JSON is decoded into (a form
    /// that skips what no reader needs, such as [`WireCard`]), and then stored as `K`.
    pub fn start_as<W: Watched + Into<K>>(
        api: Api<W>,
        config: watcher::Config,
        initial: InitialList,
        compact: impl FnMut(&mut K) + Send + 'static,
        scope: &Scope,
        keep: Keep,
    ) -> Hub<K> {
        let mut stores = match keep {
            Keep::Named => Stores::Named(NamedWriter::default()),
            Keep::Store | Keep::Nothing => Stores::Kube(reflector::store().1),
        };
        let held = stores.reader();
        let (senders, first) = match keep {
            Keep::Store | Keep::Named => (Vec::new(), None),
            Keep::Nothing => {
                let (tx, rx) = futures::channel::mpsc::unbounded();
                (vec![tx], Some(rx))
            }
        };
        let subscribers = Arc::new(Mutex::new(Subscribers {
            senders,
            synced: false,
            first,
        }));
        let feed = list_and_watch(api, config, initial)
            .default_backoff()
            .map_ok(converted)
            .filter(scope.event_filter())
            .modify(compact);
        let forward = subscribers.clone();
        let reader = stores.reader();
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let span = tracing::info_span!("watch", kind = %K::kind(&()));
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move {
                futures::pin_mut!(feed);
                while let Some(event) = feed.next().await {
                    let event = match event {
                        Ok(e) => e,
                        Err(e) => {
                            tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying with backoff");
                            continue;
                        }
                    };
                    if keep == Keep::Nothing {
                        forward_unstored(&forward, &listed_tx, event);
                        continue;
                    }
                    stores.apply(&event);
                    // Subscribers get the store's own `Arc`s: what they keep of an object (the
                    // card server keeps the card bytes) shares its memory with the store.
                    let stored = |o: &K| reader.get(&name_ref(o));
                    // A relist's objects are forwarded once the store holds them, at its end:
                    // the store then holds exactly what was listed, so its content is the
                    // relist (one `Arc` each, where a list of their names took some 120 bytes
                    // an object at the moment memory peaks).
                    let shared: Vec<Shared<K>> = match event {
                        Event::Init => vec![Event::Init],
                        Event::InitApply(_) => Vec::new(),
                        Event::InitDone => reader
                            .state()
                            .into_iter()
                            .map(Event::InitApply)
                            .chain([Event::InitDone])
                            .collect(),
                        Event::Apply(o) => {
                            vec![Event::Apply(stored(&o).unwrap_or_else(|| Arc::new(o)))]
                        }
                        Event::Delete(o) => vec![Event::Delete(Arc::new(o))],
                    };
                    dispatch(&forward, &listed_tx, shared);
                }
            },
            span,
        ));
        Hub {
            held,
            keep,
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

    /// The store every reader shares (empty unless the hub keeps [`Keep::Store`]).
    pub fn store(&self) -> Store<K> {
        match &self.held {
            Reader::Kube(store) => store.clone(),
            Reader::Named(_) => reflector::store().0,
        }
    }

    /// The store every reader shares of a hub that keeps [`Keep::Named`] (else empty).
    pub fn named(&self) -> NamedStore<K> {
        match &self.held {
            Reader::Named(store) => store.clone(),
            Reader::Kube(_) => NamedStore::default(),
        }
    }

    /// The events from now on, after the store's content as a relist when the watch has
    /// listed already. Dropping the receiver unsubscribes. A hub that keeps nothing has one
    /// subscriber, registered at its start: the first call gets every event; a later one
    /// could not be given what came before, and gets a stream that ends at once (logged).
    pub fn subscribe(&self) -> UnboundedReceiver<Shared<K>> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut subs = crate::locks::lock(&self.subscribers);
        if self.keep == Keep::Nothing {
            return subs.first.take().unwrap_or_else(|| {
                tracing::error!(kind = %K::kind(&()), "a second subscriber of a watch that keeps no store gets nothing");
                rx
            });
        }
        if subs.synced {
            let _ = tx.unbounded_send(Event::Init);
            for o in self.held.state() {
                let _ = tx.unbounded_send(Event::InitApply(o));
            }
            let _ = tx.unbounded_send(Event::InitDone);
        }
        subs.senders.push(tx);
        rx
    }
}

/// A hub's store, as its watch task writes and reads it.
enum Stores<K: Watched> {
    Kube(reflector::store::Writer<K>),
    Named(NamedWriter<K>),
}

/// A reader of either store, by namespace and name.
enum Reader<K: Watched> {
    Kube(Store<K>),
    Named(NamedStore<K>),
}

impl<K: Watched> Stores<K> {
    fn apply(&mut self, event: &Event<K>) {
        match self {
            Stores::Kube(writer) => writer.apply_watcher_event(event),
            Stores::Named(writer) => writer.apply_watcher_event(event),
        }
    }

    fn reader(&self) -> Reader<K> {
        match self {
            Stores::Kube(writer) => Reader::Kube(writer.as_reader()),
            Stores::Named(writer) => Reader::Named(writer.as_reader()),
        }
    }
}

impl<K: Watched> Reader<K> {
    fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        match self {
            Reader::Kube(store) => store.get(key),
            Reader::Named(store) => store.get(key),
        }
    }

    fn state(&self) -> Vec<Arc<K>> {
        match self {
            Reader::Kube(store) => store.state(),
            Reader::Named(store) => store.state(),
        }
    }
}

/// Forward `event` of a hub that keeps nothing ([`Keep::Nothing`]) to its subscriber as it
/// comes, a relist's objects included (no store to read them back from at its end).
fn forward_unstored<K>(
    forward: &Mutex<Subscribers<K>>,
    listed_tx: &tokio::sync::watch::Sender<bool>,
    event: Event<K>,
) {
    dispatch(forward, listed_tx, [converted::<K, Arc<K>>(event)]);
}

/// Send `events` to every subscriber (dropping those gone); the end of a list marks the hub
/// listed.
fn dispatch<K>(
    subscribers: &Mutex<Subscribers<K>>,
    listed_tx: &tokio::sync::watch::Sender<bool>,
    events: impl IntoIterator<Item = Shared<K>>,
) {
    let mut subs = crate::locks::lock(subscribers);
    for event in events {
        if matches!(event, Event::InitDone) {
            subs.synced = true;
            listed_tx.send_replace(true);
        }
        subs.senders
            .retain(|tx| tx.unbounded_send(event.clone()).is_ok());
    }
}

/// `event` with its object moved into another form: the form the store keeps, or shared.
fn converted<W: Into<K>, K>(event: Event<W>) -> Event<K> {
    match event {
        Event::Apply(o) => Event::Apply(o.into()),
        Event::Delete(o) => Event::Delete(o.into()),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.into()),
        Event::InitDone => Event::InitDone,
    }
}

/// The events of a watch of `api` (with `config`), its first list (and every relist) made as
/// `initial` says. With [`InitialList::Auto`] the API server is asked for a streaming list;
/// when it refuses that request (`WatchList` off: 422 Invalid, or 400 from a server that
/// knows the parameter but not the value) before the watch ever delivered anything, the
/// watch goes on in pages, for good (each refusal would cost a round trip and a backoff).
/// Any other error is the watch's own: it is passed on, and the backoff retries as it is.
pub fn list_and_watch<K: Watched>(
    api: Api<K>,
    config: watcher::Config,
    initial: InitialList,
) -> futures::stream::BoxStream<'static, watcher::Result<Event<K>>> {
    if initial == InitialList::Pages {
        return watcher(api, config).boxed();
    }
    let streamed = watcher(api.clone(), config.clone().streaming_lists()).boxed();
    // The fallback, until the streaming list has worked once.
    let fallback = Some((api, config));
    futures::stream::unfold(
        (streamed, fallback),
        |(mut events, mut fallback)| async move {
            loop {
                let event = events.next().await?;
                match (&event, fallback.take()) {
                    (Err(e), Some((api, config))) if refuses_streaming_lists(e) => {
                        tracing::warn!(
                            kind = %K::kind(&()),
                            error = %e,
                            "the API server refuses streaming lists (WatchList); listing in pages"
                        );
                        events = watcher(api, config).boxed();
                    }
                    (Ok(_), _) => return Some((event, (events, None))),
                    (Err(_), keep) => return Some((event, (events, keep))),
                }
            }
        },
    )
    .boxed()
}

/// Whether `e` is an API server's refusal of a streaming list request (rather than a failure
/// of the watch): the request was rejected as invalid.
fn refuses_streaming_lists(e: &watcher::Error) -> bool {
    matches!(
        e,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if status.code == 422 || status.code == 400
    )
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
pub struct Hubs<C: StoredCard = AgentCard> {
    /// Every AgentCard, in its stored form (compacted).
    pub cards: Hub<C>,
    /// Every Namespace.
    pub namespaces: Hub<Namespace>,
    /// Every AgentDirectory.
    pub directories: Hub<AgentDirectory>,
    /// Every ConfigMap with a published card or the JWKS, as the stores keep a ConfigMap
    /// (the controllers read them from [`Hub::named`]).
    pub configmaps: Hub<SeenConfigMap>,
    /// How these watches get their first list, for the ones the controllers start later.
    pub initial_list: InitialList,
}

/// A form the card store keeps AgentCards in: the full `AgentCard` where controllers run, the
/// [`ServedCard`] the card server alone needs on a serving-only replica.
pub trait StoredCard:
    Watched + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope> + CardFields
{
    /// Whether a store holds the cards and the published ConfigMaps: the controllers read
    /// them from stores; a serving replica's view keeps what it reads of each itself.
    const KEEP: Keep;

    /// The form the card watch decodes a card's JSON into, then moves into this one.
    type Wire: Watched + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope> + Into<Self>;

    /// Trim a card before the store holds it.
    fn compact(&mut self);

    /// Trim a published ConfigMap before the store holds it, for the readers a process with
    /// this card form has: every ConfigMap is first reduced to what the operator wrote
    /// ([`SeenConfigMap::keep_only_ours`]).
    fn compact_configmap(cm: &mut SeenConfigMap, operator_namespace: &str) {
        cm.keep_only_ours(operator_namespace)
    }
}

/// The operator's form: the controllers read all of it ([`compact_card`]).
impl StoredCard for AgentCard {
    const KEEP: Keep = Keep::Store;
    type Wire = WireCard;

    fn compact(&mut self) {
        compact_card(self)
    }
}

/// A serving-only replica's form ([`ServedCard::compact`]); its card ConfigMaps keep what the
/// card server reads ([`SeenConfigMap::keep_only_served`]).
impl StoredCard for ServedCard {
    const KEEP: Keep = Keep::Nothing;
    type Wire = ServedCard;

    fn compact(&mut self) {
        ServedCard::compact(self)
    }

    fn compact_configmap(cm: &mut SeenConfigMap, operator_namespace: &str) {
        cm.keep_only_served(operator_namespace)
    }
}

impl<C: StoredCard> Hubs<C> {
    /// Start the four watches, for `scope`: with one namespace, its cards are listed from
    /// that namespace alone, its Namespace alone, and of the published ConfigMaps only those
    /// of that namespace and of the operator's are stored (two namespaces cannot share one
    /// watch).
    pub fn start(client: &Client, scope: &Scope) -> Arc<Hubs<C>> {
        let cards: Api<C::Wire> = match &scope.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let namespaces = match &scope.namespace {
            Some(ns) => scope.watch_config().fields(&format!("metadata.name={ns}")),
            None => scope.watch_config(),
        };
        let operator_namespace = scope.operator_namespace.clone();
        Arc::new(Hubs {
            // Lists page: neither the API server nor this process holds one response with
            // every card.
            cards: Hub::start_as(
                cards,
                scope.watch_config(),
                scope.initial_list,
                C::compact,
                &Scope::default(),
                C::KEEP,
            ),
            namespaces: Hub::start(
                Api::all(client.clone()),
                namespaces,
                scope.initial_list,
                |ns: &mut Namespace| compact_meta(&mut ns.metadata),
                &Scope::default(),
                Keep::Store,
            ),
            directories: Hub::start(
                Api::all(client.clone()),
                scope.watch_config(),
                scope.initial_list,
                |d: &mut AgentDirectory| d.metadata.managed_fields = None,
                &Scope::default(),
                // Federation reads the directories from the store, in every process.
                Keep::Store,
            ),
            configmaps: Hub::start(
                Api::all(client.clone()),
                scope.watch_config().labels(PUBLISHED_SELECTOR),
                scope.initial_list,
                // Reduced while it is deserialised (`SeenConfigMap: From<ConfigMap>`), then to
                // what the operator wrote: a tenant's own ConfigMaps labelled as the
                // operator's are kept as a few bytes each, whatever their size.
                move |cm: &mut SeenConfigMap| C::compact_configmap(cm, &operator_namespace),
                scope,
                // Read by the controllers ([`Hub::named`]), never by a kube `Controller`.
                match C::KEEP {
                    Keep::Nothing => Keep::Nothing,
                    _ => Keep::Named,
                },
            ),
            initial_list: scope.initial_list,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::client::Body;
    use serde_json::{json, Value};

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    fn respond(code: u16, body: &Value) -> Response<Body> {
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let mut response = Response::new(Body::from(bytes));
        *response.status_mut() = http::StatusCode::from_u16(code).unwrap_or_default();
        response
    }

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "n", "resourceVersion": "5"}})
    }

    /// The API server's side: each request's query, answered by `answer` (a watch answered
    /// `None` is left open, as a quiet watch is).
    fn serve(
        mut handle: Handle,
        answer: impl Fn(usize, &str) -> Option<Response<Body>> + Send + 'static,
    ) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut open = Vec::new();
            let mut n = 0;
            while let Some((request, send)) = handle.next_request().await {
                let query = request.uri().query().unwrap_or_default().to_string();
                let _ = tx.send(query.clone());
                match answer(n, &query) {
                    Some(response) => send.send_response(response),
                    None => open.push(send),
                }
                n += 1;
            }
        });
        rx
    }

    /// A streaming list's answer: ConfigMaps `a` and `b`, then the bookmark that ends it.
    fn streaming_list_of_a_and_b() -> Response<Body> {
        let line = |v: Value| serde_json::to_string(&v).unwrap_or_default() + "\n";
        let body = [
            line(json!({"type": "ADDED", "object": cm("a")})),
            line(json!({"type": "ADDED", "object": cm("b")})),
            line(
                json!({"type": "BOOKMARK", "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"resourceVersion": "6",
                             "annotations": {"k8s.io/initial-events-end": "true"}}}}),
            ),
        ]
        .concat();
        Response::new(Body::from(body.into_bytes()))
    }

    /// The names of the objects of the first list, from `Init` to `InitDone`.
    async fn first_list(
        events: &mut futures::stream::BoxStream<'static, watcher::Result<Event<ConfigMap>>>,
    ) -> Vec<String> {
        let mut names = Vec::new();
        while let Some(event) = events.next().await {
            match event.expect("no watch error passed on") {
                Event::InitApply(o) => names.push(o.metadata.name.unwrap_or_default()),
                Event::InitDone => return names,
                _ => {}
            }
        }
        panic!("the watch ended before its first list was done")
    }

    #[tokio::test]
    async fn a_streaming_list_is_one_watch_request() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<ConfigMap> = Api::all(kube::Client::new(service, "default"));
        let queries = serve(handle, |n, _| (n == 0).then(streaming_list_of_a_and_b));
        let config = watcher::Config::default().page_size(1);
        let mut events = list_and_watch(api, config, InitialList::Auto);
        assert_eq!(first_list(&mut events).await, ["a", "b"]);
        let mut queries = queries;
        let first = queries.recv().await.unwrap_or_default();
        assert!(
            first.contains("watch=true") && first.contains("sendInitialEvents=true"),
            "{first}"
        );
        assert!(
            queries.try_recv().is_err(),
            "nothing listed beside the stream"
        );
    }

    /// A hub over an API server whose streaming list holds ConfigMaps `a` and `b`, then stays
    /// quiet; waits until the hub has listed them.
    async fn listed_hub(keep: Keep) -> Hub<ConfigMap> {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<ConfigMap> = Api::all(kube::Client::new(service, "default"));
        let _queries = serve(handle, |n, _| (n == 0).then(streaming_list_of_a_and_b));
        let config = watcher::Config::default();
        let hub = Hub::start(
            api,
            config,
            InitialList::Auto,
            |_| {},
            &Scope::default(),
            keep,
        );
        let mut listed = hub.listed();
        listed.wait_for(|l| *l).await.expect("the hub lists");
        hub
    }

    /// The objects a subscriber got up to the end of the first list, with how many hold each.
    async fn relisted(rx: &mut UnboundedReceiver<Shared<ConfigMap>>) -> Vec<(String, usize)> {
        let mut got = Vec::new();
        while let Some(event) = rx.next().await {
            match event {
                Event::InitApply(o) => got.push((
                    o.metadata.name.clone().unwrap_or_default(),
                    Arc::strong_count(&o),
                )),
                Event::InitDone => return got,
                _ => {}
            }
        }
        panic!("the events ended before the first list was done")
    }

    #[tokio::test]
    async fn a_hub_that_keeps_nothing_hands_its_subscriber_every_object_and_holds_none() {
        // Subscribed only after the list is done: the subscriber registered at the start got
        // it all the same.
        let hub = listed_hub(Keep::Nothing).await;
        let mut rx = hub.subscribe();
        let got = relisted(&mut rx).await;
        // The subscriber's `Arc` is the only one: no store holds the objects.
        assert_eq!(got, [("a".to_string(), 1), ("b".to_string(), 1)]);
        assert!(hub.store().state().is_empty());
        // A second subscriber could not be given the list: its stream ends.
        assert!(hub.subscribe().next().await.is_none());

        // A hub with a store shares each object with it, and relists it to a late subscriber.
        let hub = listed_hub(Keep::Store).await;
        let mut rx = hub.subscribe();
        let mut got = relisted(&mut rx).await;
        // Relisted from the store, in its (hash) order.
        got.sort();
        assert_eq!(got, [("a".to_string(), 2), ("b".to_string(), 2)]);
        assert_eq!(hub.store().state().len(), 2);

        // So does a hub with a store by name, in that store.
        let hub = listed_hub(Keep::Named).await;
        let mut rx = hub.subscribe();
        let mut got = relisted(&mut rx).await;
        got.sort();
        assert_eq!(got, [("a".to_string(), 2), ("b".to_string(), 2)]);
        assert_eq!(hub.named().len(), 2);
        assert!(hub.store().state().is_empty());
        let a = hub.named().get(&ObjectRef::new("a").within("n"));
        assert_eq!(
            a.and_then(|o| o.metadata.resource_version.clone())
                .as_deref(),
            Some("5")
        );
    }

    #[tokio::test]
    async fn a_refused_streaming_list_is_made_in_pages_from_then_on() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<ConfigMap> = Api::all(kube::Client::new(service, "default"));
        // A server with WatchList off: the streaming watch is invalid; lists page.
        let mut queries = serve(handle, |_, query| {
            if query.contains("sendInitialEvents=true") {
                return Some(respond(
                    422,
                    &json!({"kind": "Status", "apiVersion": "v1",
                    "status": "Failure", "reason": "Invalid", "code": 422,
                    "message": "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}),
                ));
            }
            if query.contains("watch=true") {
                return None;
            }
            let (items, cont) = if query.contains("continue=next") {
                (vec![cm("b")], "")
            } else {
                (vec![cm("a")], "next")
            };
            Some(respond(
                200,
                &json!({"apiVersion": "v1", "kind": "ConfigMapList",
                "metadata": {"resourceVersion": "5", "continue": cont}, "items": items}),
            ))
        });
        let config = watcher::Config::default().page_size(1);
        let mut events = list_and_watch(api, config, InitialList::Auto);
        assert_eq!(first_list(&mut events).await, ["a", "b"]);
        let mut asked = Vec::new();
        while let Ok(q) = queries.try_recv() {
            asked.push(q);
        }
        assert_eq!(asked.len(), 3, "{asked:?}");
        assert!(asked[0].contains("sendInitialEvents=true"), "{asked:?}");
        for page in &asked[1..] {
            assert!(
                page.contains("limit=1") && !page.contains("watch=true"),
                "{asked:?}"
            );
        }
        // The watch that follows is a plain one, from the list's version.
        let following = tokio::spawn(async move { events.next().await.is_some() });
        let follow = queries.recv().await.unwrap_or_default();
        following.abort();
        assert!(
            follow.contains("watch=true")
                && follow.contains("resourceVersion=5")
                && !follow.contains("sendInitialEvents"),
            "{follow}"
        );
    }

    #[test]
    fn only_an_invalid_request_counts_as_a_refusal() {
        let error = |code: u16| {
            watcher::Error::WatchStartFailed(kube::Error::Api(
                kube::core::Status::failure("x", "Invalid")
                    .with_code(code)
                    .boxed(),
            ))
        };
        assert!(refuses_streaming_lists(&error(422)));
        assert!(refuses_streaming_lists(&error(400)));
        assert!(!refuses_streaming_lists(&error(403)));
        assert!(!refuses_streaming_lists(&error(500)));
    }
}
