//! The controllers' wiring: one short function per task [`run`] starts. Data flows from the
//! watches (the process's shared ones in [`crate::hub`], and the ones only the controllers
//! need: signing Secret, JWKS ConfigMap, the Ingresses and HTTPRoutes the operator writes)
//! through [`super::watches`]' fan-outs into trigger channels, and from those into the card
//! and directory controllers, which reconcile with one shared [`Context`]. Every task is held
//! by an [`AbortOnDrop`] in `run`'s frame: when `run` ends or is dropped (the lease is lost),
//! they all stop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::{SinkExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use super::agentcard::{self, source::Sources};
use super::agentdirectory;
use super::agentdirectory::count::{Counts, Recount};
use super::backoff::{backoff_delay, Backoff};
use super::config::Config;
use super::context::Context;
use super::error::Error;
use super::events::Events;
use super::jwks::Publisher;
use super::keys::{self, KeyCache};
use super::limits::Limits;
use super::metrics::ControllerMetrics;
use super::ownership::{Ownership, OwnershipInputs};
use super::routing::{self, RouteKind};
use super::signing::{PublishedKeys, Signing};
use super::watches::{self, CardIndex, CardTargets, Gone, Scope, WrittenFor};
use super::written::{Unseen, WriteMemo, Written};
use crate::contract::{ANN_CARD, ANN_DIRECTORY, LABEL_MANAGED_BY, MANAGER};
use crate::crd::{AgentCard, AgentCardStatus, AgentDirectory};
use crate::hub::Hubs;
use crate::process::AbortOnDrop;
use crate::store::{SeenConfigMap, SeenIngress};

/// How long the directory controller waits for more card events before it counts again.
const DIRECTORY_DEBOUNCE: Duration = Duration::from_millis(500);

/// A trigger channel: what its receiver reconciles.
fn channel<T>() -> (UnboundedSender<T>, UnboundedReceiver<T>) {
    unbounded()
}

/// Run the controllers until the process stops or `run` fails to start.
pub async fn run(
    client: Client,
    hubs: Arc<Hubs>,
    config: Config,
    metrics: Arc<ControllerMetrics>,
    federation: Arc<crate::directory::federation::Federation>,
) -> Result<(), Error> {
    ensure_signing_secret(&client, &config).await?;
    let mut tasks = Vec::new();
    let cards = start_card_watches(&hubs, &config, &mut tasks);
    let keys = start_key_watches(&client, &hubs, &config, &cards, &metrics, &mut tasks);
    let routes = start_route_watches(&client, &config, &cards.memo, &mut tasks);
    let dirs = watch_directories(&hubs, cards.recount_tx.clone());
    tasks.push(dirs.task);
    let (peers, peers_rx) = channel::<ObjectRef<AgentCard>>();
    let (dir_peers, dir_peers_rx) = channel::<ObjectRef<AgentDirectory>>();
    let ownership = Ownership::new(OwnershipInputs {
        shared_hosts: config.shared_hosts.clone(),
        cards: hubs.cards.store(),
        directories: hubs.directories.store(),
        index: cards.index.clone(),
        peers,
        directory_peers: dir_peers,
        directories_wait: directories_wait(&client).await,
        directories_listed: dirs.listed,
        cards_listed: hubs.cards.listed(),
    });
    let written = Written {
        operator_namespace: config.settings.operator_namespace.clone(),
        configmaps: hubs.configmaps.store(),
        ingresses: routes.ingresses,
        routes: routes.routes,
        memo: cards.memo.clone(),
        configmaps_written: cards.configmaps_written.clone(),
        statuses: cards.statuses.clone(),
    };
    let backends = Arc::new(super::backends::Backends::default());
    let ctx = Arc::new(Context {
        ownership,
        signing: keys.signing,
        written,
        limits: Limits {
            max_cards_per_namespace: config.max_cards_per_namespace,
            max_card_bytes: config.max_card_bytes,
            max_namespace_card_bytes: config.max_namespace_card_bytes,
        },
        backoff: Backoff::default(),
        verdicts: Default::default(),
        sources: Sources::new(client.clone(), config.source_allow_unmanaged_endpoints)
            .map_err(|e| Error::Internal(format!("building the source HTTP client: {e}")))?,
        federation,
        backends: backends.clone(),
        client,
        recorder: keys.recorder,
        metrics,
        settings: config.settings.clone(),
        allowed_hosts: config.allowed_hosts.clone(),
        cards: hubs.cards.store(),
        index: cards.index.clone(),
        namespaces: hubs.namespaces.store(),
        directories: hubs.directories.store(),
        counts: Arc::new(Counts::default()),
    });
    let (stores_listed, stores_listed_rx) = watch::channel(false);
    tasks.push(sweep_deleted_cards(
        &ctx,
        config.watch_namespace.clone(),
        stores_listed_rx,
        cards.gone,
    ));
    tasks.push(forget_deleted_directories(&ctx, dirs.gone));
    let (counted, counted_rx) = channel::<ObjectRef<AgentDirectory>>();
    tasks.push(AbortOnDrop(tokio::spawn(agentdirectory::count::run(
        agentdirectory::count::Sources {
            cards: hubs.cards.store(),
            namespaces: hubs.namespaces.store(),
            directories: hubs.directories.store(),
        },
        ctx.counts.clone(),
        cards.recount,
        counted,
    ))));
    let (backend_refs, backend_refs_rx) = channel::<ObjectRef<AgentCard>>();
    tasks.push(super::backends::watch(
        &ctx.client,
        config.watch_namespace.as_deref(),
        backends,
        ctx.cards.clone(),
        ctx.index.clone(),
        backend_refs,
    ));
    wait_for_stores(&ctx, &ctx.signing.secrets, cards.configmaps_listed).await;
    let _ = stores_listed.send(true);

    let repairs = repair_requests(routes.touched, &ctx, routes.directories.clone());
    let directory_triggers = futures::stream::select_all([
        dirs.refs.boxed(),
        counted_rx.boxed(),
        dir_peers_rx.boxed(),
        routes.directory_refs.boxed(),
    ]);
    let card_triggers = futures::stream::select_all([
        cards.refs.boxed(),
        peers_rx.boxed(),
        routes.card_refs.boxed(),
        repairs.boxed(),
        backend_refs_rx.boxed(),
    ]);
    drop(routes.directories);
    // Both run until the process stops; either ending ends the controllers.
    tokio::select! {
        () = run_card_controller(&ctx, &config, card_triggers) => {}
        () = run_directory_controller(&ctx, directory_triggers) => {}
    }
    drop((tasks, cards.resign_all));
    Ok(())
}

/// What the card-side watches feed: the controller's card index, the writes not seen yet,
/// and the trigger channels they send to.
struct CardWatches {
    index: Arc<Mutex<CardIndex>>,
    memo: Arc<WriteMemo>,
    statuses: Arc<Unseen<AgentCardStatus>>,
    configmaps_written: Arc<Unseen<SeenConfigMap>>,
    /// Cards to reconcile.
    refs: UnboundedReceiver<ObjectRef<AgentCard>>,
    /// Every directory to count again.
    recount: UnboundedReceiver<Recount>,
    /// Where the directory counts hear of changes (the directory watch sends there too).
    recount_tx: UnboundedSender<Recount>,
    /// Cards deleted.
    gone: UnboundedReceiver<Gone>,
    /// True once the card ConfigMaps are listed.
    configmaps_listed: watch::Receiver<bool>,
    /// Asks for every card to be signed again.
    resign_all: UnboundedSender<()>,
}

/// The shared card, Namespace and ConfigMap watches' fan-outs, the re-sign-all walk and the
/// resync walk.
fn start_card_watches(hubs: &Hubs, config: &Config, tasks: &mut Vec<AbortOnDrop>) -> CardWatches {
    let index = Arc::new(Mutex::new(CardIndex::default()));
    let scope = Scope {
        namespace: config.watch_namespace.clone(),
        limit: config.max_cards_per_namespace,
        byte_limit: config.max_namespace_card_bytes,
    };
    let memo = Arc::new(WriteMemo::default());
    let statuses = Arc::new(Unseen::<AgentCardStatus>::default());
    let configmaps_written = Arc::new(Unseen::<SeenConfigMap>::default());
    let (card_refs, refs) = channel::<ObjectRef<AgentCard>>();
    let (dir_recount, recount) = channel::<Recount>();
    let (gone_tx, gone) = channel::<Gone>();
    let targets = CardTargets {
        cards: card_refs.clone(),
        directories: dir_recount.clone(),
        gone: gone_tx,
    };
    tasks.push(watch_cards(hubs, &index, &scope, &statuses, targets));
    tasks.push(watch_namespaces(hubs, &index, &card_refs, &dir_recount));
    let (cm_task, configmaps_listed) =
        watch_configmaps(hubs, &scope, &memo, &configmaps_written, &card_refs);
    let (resign_task, resign_all) = resign_all_on_demand(&index, &card_refs);
    tasks.extend([cm_task, resign_task, resync_cards(&index, &card_refs)]);
    CardWatches {
        index,
        memo,
        statuses,
        configmaps_written,
        refs,
        recount,
        recount_tx: dir_recount.clone(),
        gone,
        configmaps_listed,
        resign_all,
    }
}

/// What the key-side watches give the reconciles.
struct KeyWatches {
    signing: Signing,
    recorder: Arc<Events>,
}

/// The signing Secret and JWKS ConfigMap watches and the JWKS publisher they trigger.
fn start_key_watches(
    client: &Client,
    hubs: &Hubs,
    config: &Config,
    cards: &CardWatches,
    metrics: &ControllerMetrics,
    tasks: &mut Vec<AbortOnDrop>,
) -> KeyWatches {
    let opns = &config.settings.operator_namespace;
    let (jwks_triggers, jwks_triggers_rx) = channel::<()>();
    let cache = Arc::new(KeyCache::default());
    let (secret_task, secrets) =
        watch_signing_secret(client, config, &cache, &jwks_triggers, &cards.resign_all);
    tasks.extend([
        secret_task,
        watch_jwks_configmap(client, opns, jwks_triggers),
    ]);
    // One recorder for the whole process: the card controller and the key rotation share it.
    let recorder = Arc::new(Events::queued(
        client.clone(),
        Reporter {
            controller: MANAGER.into(),
            instance: Some(config.instance.clone()),
        },
        metrics.events_dropped.clone(),
    ));
    let (published_tx, published) = watch::channel(None::<PublishedKeys>);
    let publisher = Publisher {
        client: client.clone(),
        namespace: opns.clone(),
        secret: ObjectRef::new(&config.signing_secret).within(opns),
        secrets: secrets.clone(),
        cache: cache.clone(),
        max_age: config.jwks_max_age,
        cards: hubs.cards.store(),
        configmaps: hubs.configmaps.store(),
        configmaps_listed: cards.configmaps_listed.clone(),
        published: published_tx,
        resign_all: cards.resign_all.clone(),
        recorder: recorder.clone(),
    };
    tasks.push(AbortOnDrop(tokio::spawn(publisher.run(jwks_triggers_rx))));
    KeyWatches {
        signing: Signing {
            namespace: opns.clone(),
            secret: config.signing_secret.clone(),
            secrets,
            cache,
            published,
        },
        recorder,
    }
}

/// What the route watches give: their stores, and who to reconcile when a route changes.
struct RouteWatches {
    ingresses: Store<SeenIngress>,
    routes: Option<Store<DynamicObject>>,
    /// Ingresses edited or deleted (to repair).
    touched: UnboundedReceiver<WrittenFor>,
    /// Cards whose HTTPRoutes changed.
    card_refs: UnboundedReceiver<ObjectRef<AgentCard>>,
    /// Directories whose routes changed.
    directory_refs: UnboundedReceiver<ObjectRef<AgentDirectory>>,
    /// Where directories' route changes are sent (the Ingress repairs send there too).
    directories: UnboundedSender<ObjectRef<AgentDirectory>>,
}

/// The Ingress watch and, with HTTPRoute routing, the HTTPRoute watch.
fn start_route_watches(
    client: &Client,
    config: &Config,
    memo: &Arc<WriteMemo>,
    tasks: &mut Vec<AbortOnDrop>,
) -> RouteWatches {
    let (ingress_task, ingresses, touched) = watch_ingresses(client, config, memo);
    tasks.push(ingress_task);
    let (card_tx, card_refs) = channel::<ObjectRef<AgentCard>>();
    let (directories, directory_refs) = channel::<ObjectRef<AgentDirectory>>();
    let routes = watch_routes(client, config, memo, &card_tx, &directories).map(|(task, store)| {
        tasks.push(task);
        store
    });
    RouteWatches {
        ingresses,
        routes,
        touched,
        card_refs,
        directory_refs,
        directories,
    }
}

/// Read the signing Secret, or create it with a fresh ES256 key when asked to. An API server
/// that fails now (restarting, etcd away) is waited for with backoff: failing here would end
/// the controllers and the process with them. A refusal (invalid name, no rights) does not
/// pass by waiting: it fails.
async fn ensure_signing_secret(client: &Client, config: &Config) -> Result<(), Error> {
    if !config.create_signing_secret {
        return Ok(());
    }
    let opns = &config.settings.operator_namespace;
    let api: Api<Secret> = Api::namespaced(client.clone(), opns);
    let mut failures = 0u32;
    loop {
        match keys::ensure_secret(&api, &config.signing_secret, opns).await {
            Ok(created) => {
                if created {
                    tracing::info!(secret = %config.signing_secret, "created the signing Secret with a fresh ES256 key");
                }
                return Ok(());
            }
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

/// The shared card watch: the index and unseen status writes kept in step, each change sent
/// to the card controller, the directories (a recount) and, for a deleted card, the sweeper.
fn watch_cards(
    hubs: &Hubs,
    index: &Arc<Mutex<CardIndex>>,
    scope: &Scope,
    statuses: &Arc<Unseen<AgentCardStatus>>,
    targets: CardTargets,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(watches::fan_out_cards(
        hubs.cards.subscribe(),
        hubs.cards.store(),
        index.clone(),
        scope.clone(),
        statuses.clone(),
        targets,
    )))
}

/// The shared Namespace watch: labels recount the directories, allowed hosts re-check the
/// namespace's cards.
fn watch_namespaces(
    hubs: &Hubs,
    index: &Arc<Mutex<CardIndex>>,
    card_refs: &UnboundedSender<ObjectRef<AgentCard>>,
    dir_recount: &UnboundedSender<Recount>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(watches::fan_out_namespaces(
        hubs.namespaces.subscribe(),
        index.clone(),
        card_refs.clone(),
        dir_recount.clone(),
    )))
}

/// The shared card ConfigMap watch: an edit or deletion repairs its card; the receiver says
/// when the first list is in.
fn watch_configmaps(
    hubs: &Hubs,
    scope: &Scope,
    memo: &Arc<WriteMemo>,
    configmaps_written: &Arc<Unseen<SeenConfigMap>>,
    card_refs: &UnboundedSender<ObjectRef<AgentCard>>,
) -> (AbortOnDrop, watch::Receiver<bool>) {
    let (listed_tx, listed) = watch::channel(false);
    let task = AbortOnDrop(tokio::spawn(watches::fan_out_configmaps(
        hubs.configmaps.subscribe(),
        scope.clone(),
        memo.clone(),
        configmaps_written.clone(),
        card_refs.clone(),
        listed_tx,
    )));
    (task, listed)
}

/// Re-sign every card of the controller's (not every card in the shared store) each time the
/// returned sender is sent to.
fn resign_all_on_demand(
    index: &Arc<Mutex<CardIndex>>,
    card_refs: &UnboundedSender<ObjectRef<AgentCard>>,
) -> (AbortOnDrop, UnboundedSender<()>) {
    let (tx, mut rx) = channel::<()>();
    let (index, card_refs) = (index.clone(), card_refs.clone());
    let task = AbortOnDrop(tokio::spawn(async move {
        while rx.next().await.is_some() {
            let keys = crate::locks::lock(&index).shared_keys();
            for key in keys {
                let _ = card_refs.unbounded_send(ObjectRef::clone(&key));
            }
        }
    }));
    (task, tx)
}

/// Every card looked at again about once per resync period (see [`watches::resync`]).
fn resync_cards(
    index: &Arc<Mutex<CardIndex>>,
    card_refs: &UnboundedSender<ObjectRef<AgentCard>>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(watches::resync(
        index.clone(),
        agentcard::RESYNC,
        card_refs.clone(),
    )))
}

/// The signing Secret, watched by name: the JWKS is published again after every change, and
/// every card signed again only when the keys or the active key change (or the Secret comes or
/// goes): other label and annotation edits, and relists, leave the cards alone. Acted on once
/// the store holds the change: a relist's objects reach the store only at its end, so a
/// trigger at `InitApply` would find the Secret missing there.
fn watch_signing_secret(
    client: &Client,
    config: &Config,
    cache: &Arc<KeyCache>,
    jwks: &UnboundedSender<()>,
    resign_all: &UnboundedSender<()>,
) -> (AbortOnDrop, Store<Secret>) {
    let opns = &config.settings.operator_namespace;
    let (store, writer) = reflector::store();
    let feed = watcher(
        Api::<Secret>::namespaced(client.clone(), opns),
        watcher::Config::default().fields(&format!("metadata.name={}", config.signing_secret)),
    )
    .default_backoff()
    .reflect(writer);
    let key = ObjectRef::<Secret>::new(&config.signing_secret).within(opns);
    let (keys_store, cache, jwks, mut resign_all) = (
        store.clone(),
        cache.clone(),
        jwks.clone(),
        resign_all.clone(),
    );
    let task = AbortOnDrop(tokio::spawn(async move {
        futures::pin_mut!(feed);
        let mut last_keys = None;
        while let Some(ev) = feed.next().await {
            if !matches!(
                ev,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
            ) {
                continue;
            }
            let secret = keys_store.get(&key);
            if let Some(Err(e)) = secret.as_ref().map(|s| cache.get(s)) {
                tracing::warn!(error = %e, "the signing Secret is unusable; cards keep their last signatures");
            }
            let _ = jwks.unbounded_send(());
            let keys = Some(secret.map(|s| {
                let active = s.annotations().get(keys::ANN_ACTIVE_KEY).cloned();
                (s.data.clone(), active)
            }));
            if keys != last_keys {
                last_keys = keys;
                let _ = resign_all.send(()).await;
            }
        }
    }));
    (task, store)
}

/// The JWKS ConfigMap, watched by name: deleted or edited by anyone, it is written again.
fn watch_jwks_configmap(client: &Client, opns: &str, jwks: UnboundedSender<()>) -> AbortOnDrop {
    let feed = watcher(
        Api::<ConfigMap>::namespaced(client.clone(), opns),
        watcher::Config::default().fields(&format!("metadata.name={}", keys::JWKS_CONFIGMAP)),
    )
    .default_backoff();
    AbortOnDrop(tokio::spawn(async move {
        futures::pin_mut!(feed);
        while let Some(ev) = feed.next().await {
            if matches!(
                ev,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
            ) {
                let _ = jwks.unbounded_send(());
            }
        }
    }))
}

/// The Ingresses the operator writes (every namespace), kept compact: read instead of a GET
/// per reconcile, and an edited or deleted one reported so it is put back.
fn watch_ingresses(
    client: &Client,
    config: &Config,
    memo: &Arc<WriteMemo>,
) -> (
    AbortOnDrop,
    Store<SeenIngress>,
    UnboundedReceiver<WrittenFor>,
) {
    let (store, writer) = reflector::store();
    let memo = memo.clone();
    let feed = watcher(
        Api::<SeenIngress>::all(client.clone()),
        watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}")),
    )
    .default_backoff()
    .filter(config.hub_scope().event_filter())
    .reflect(writer)
    .inspect(move |ev| memo.forget_event("Ingress", ev));
    let (task, touched) = watches::drive(feed, WrittenFor::of::<SeenIngress>);
    (task, store, touched)
}

/// With HTTPRoute routing: the routes the operator writes, for repair, and for the Gateways'
/// verdicts (their status) that the `Routed` conditions report. Each event sends its card or
/// directory to be reconciled (a route outside the operator's namespace only ever names a card
/// of its own namespace).
fn watch_routes(
    client: &Client,
    config: &Config,
    memo: &Arc<WriteMemo>,
    cards: &UnboundedSender<ObjectRef<AgentCard>>,
    directories: &UnboundedSender<ObjectRef<AgentDirectory>>,
) -> Option<(AbortOnDrop, Store<DynamicObject>)> {
    if config.settings.routing.kind != RouteKind::HttpRoute {
        return None;
    }
    let ar = routing::httproute_resource();
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let store = writer.as_reader();
    let memo = memo.clone();
    let feed = watcher(
        Api::<DynamicObject>::all_with(client.clone(), &ar),
        watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}")),
    )
    .default_backoff()
    .filter(config.hub_scope().event_filter())
    .modify(|r: &mut DynamicObject| crate::store::compact_meta(&mut r.metadata))
    .reflect(writer)
    .inspect(move |ev| memo.forget_event("HTTPRoute", ev))
    .touched_objects();
    let opns = config.settings.operator_namespace.clone();
    let (cards, directories) = (cards.clone(), directories.clone());
    let task = AbortOnDrop(tokio::spawn(async move {
        futures::pin_mut!(feed);
        while let Some(ev) = feed.next().await {
            let Ok(route) = ev else { continue };
            let route_ns = route.metadata.namespace.clone().unwrap_or_default();
            let annotation = |k: &str| route.metadata.annotations.as_ref()?.get(k).cloned();
            if let Some(dir) = annotation(ANN_DIRECTORY) {
                if route_ns == opns {
                    let _ = directories.unbounded_send(ObjectRef::new(&dir));
                }
                continue;
            }
            let Some(card) = annotation(ANN_CARD) else {
                continue;
            };
            if let Some((ns, name)) = card.split_once('/') {
                if route_ns == opns || route_ns == ns {
                    let _ = cards.unbounded_send(ObjectRef::new(name).within(ns));
                }
            }
        }
    }));
    Some((task, store))
}

/// The shared AgentDirectory watch: each change reconciles that directory (a relist's at its
/// end, once the store holds them); the receiver says when the first list is in.
fn watch_directories(hubs: &Hubs, recount: UnboundedSender<Recount>) -> DirectoryWatch {
    let (listed_tx, listed) = watch::channel(false);
    let (refs, refs_rx) = channel::<ObjectRef<AgentDirectory>>();
    let (gone_tx, gone) = channel::<Arc<AgentDirectory>>();
    let mut feed = hubs.directories.subscribe();
    let task = AbortOnDrop(tokio::spawn(async move {
        let mut relisted = Vec::new();
        while let Some(event) = feed.next().await {
            match event {
                watcher::Event::InitDone => {
                    let _ = listed_tx.send(true);
                    let _ = recount.unbounded_send(Recount::All);
                    for key in relisted.drain(..) {
                        let _ = refs.unbounded_send(key);
                    }
                }
                watcher::Event::InitApply(d) => relisted.push(ObjectRef::from_obj(d.as_ref())),
                watcher::Event::Apply(d) => {
                    let _ = recount.unbounded_send(Recount::Directory(d.clone()));
                    let _ = refs.unbounded_send(ObjectRef::from_obj(d.as_ref()));
                }
                watcher::Event::Init => relisted.clear(),
                watcher::Event::Delete(d) => {
                    let _ = recount.unbounded_send(Recount::DirectoryGone(d.clone()));
                    let _ = gone_tx.unbounded_send(d);
                }
            }
        }
    }));
    DirectoryWatch {
        task,
        listed,
        refs: refs_rx,
        gone,
    }
}

/// What the shared AgentDirectory watch's fan-out gives the controllers.
struct DirectoryWatch {
    task: AbortOnDrop,
    /// True once the first list is in.
    listed: watch::Receiver<bool>,
    /// Directories to reconcile.
    refs: UnboundedReceiver<ObjectRef<AgentDirectory>>,
    /// Directories deleted.
    gone: UnboundedReceiver<Arc<AgentDirectory>>,
}

/// Directories that are gone: each delete event forgets its directory (its routes now, its
/// host claim), again with backoff when that fails.
fn forget_deleted_directories(
    ctx: &Arc<Context>,
    gone: UnboundedReceiver<Arc<AgentDirectory>>,
) -> AbortOnDrop {
    let ctx = ctx.clone();
    let (retry, retries) = channel::<Arc<AgentDirectory>>();
    AbortOnDrop(tokio::spawn(async move {
        let mut gone = futures::stream::select(gone, retries);
        while let Some(dir) = gone.next().await {
            if let Err(e) = agentdirectory::forget(&dir, &ctx).await {
                let delay = ctx.backoff.next(&agentdirectory::backoff_key(&dir));
                tracing::warn!(directory = %dir.name_any(), category = e.category(), error = %e, retry_in = ?delay, "could not clean up after a deleted directory");
                again_after(&retry, dir, delay);
            }
        }
    }))
}

/// Send `item` to `tx` after `delay`: what failed on an event that will not come again is
/// tried again, with backoff (the API server may be away).
fn again_after<T: Send + 'static>(tx: &UnboundedSender<T>, item: T, delay: Duration) {
    let tx = tx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = tx.unbounded_send(item);
    });
}

/// How long loading the claims waits for the directories: unbounded when the AgentDirectory
/// CRD is installed, none when it is not, bounded when that could not be told.
async fn directories_wait(client: &Client) -> Option<Duration> {
    match Api::<AgentDirectory>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => None,
        Err(kube::Error::Api(s)) if s.code == 404 => Some(Duration::ZERO),
        Err(e) => {
            tracing::warn!(error = %e, "could not tell whether AgentDirectories are installed");
            Some(Duration::from_secs(10))
        }
    }
}

/// Cards that are gone: each delete event forgets its card (claims, routes in the operator's
/// namespace); each (re-)list sweeps the routes of cards deleted while no event could tell
/// (see [`super::sweep`]). Starts once `stores_listed` says the stores are listed; a forget
/// that fails is tried again with backoff.
fn sweep_deleted_cards(
    ctx: &Arc<Context>,
    scope: Option<String>,
    mut stores_listed: watch::Receiver<bool>,
    gone: UnboundedReceiver<Gone>,
) -> AbortOnDrop {
    let ctx = ctx.clone();
    let (retry, retries) = channel::<Gone>();
    AbortOnDrop(tokio::spawn(async move {
        // What the stores do not hold yet cannot be judged (nor waited for here: a store wakes
        // only its latest waiter, and the controllers' start waits on them).
        let _ = stores_listed.wait_for(|l| *l).await;
        let mut gone = futures::stream::select(gone, retries);
        while let Some(event) = gone.next().await {
            match event {
                Gone::Card(card) => {
                    if let Err(e) = agentcard::forget(&card, &ctx).await {
                        let key = agentcard::card::card_key(&card);
                        let delay = ctx.backoff.next(&key);
                        tracing::warn!(card = %key, category = e.category(), error = %e, retry_in = ?delay, "could not clean up after a deleted card");
                        again_after(&retry, Gone::Card(card), delay);
                    }
                }
                Gone::Relisted => {
                    super::sweep::sweep(&ctx.client, &ctx.written, &ctx.cards, scope.as_deref())
                        .await;
                }
            }
        }
    }))
}

/// Start reconciling only with the stores the reconciler reads: a reconcile before the
/// Ingresses or ConfigMaps are listed would take them for missing and create them again (a
/// conflict and a GET each, for every card, at every start). Bounded: a store wakes only its
/// latest waiter.
async fn wait_for_stores(
    ctx: &Context,
    secrets: &Store<Secret>,
    mut configmaps_listed: watch::Receiver<bool>,
) {
    tracing::debug!("waiting for the stores to be listed");
    let bound = Duration::from_secs(30);
    let _ = ctx.namespaces.wait_until_ready().await;
    let _ = tokio::time::timeout(bound, secrets.wait_until_ready()).await;
    let _ = tokio::time::timeout(bound, ctx.written.ingresses.wait_until_ready()).await;
    let _ = tokio::time::timeout(bound, configmaps_listed.wait_for(|l| *l)).await;
    tracing::debug!("the stores are listed: reconciling");
    if let Some(routes) = &ctx.written.routes {
        let _ = tokio::time::timeout(bound, routes.wait_until_ready()).await;
    }
}

/// Someone deleted or edited an Ingress the operator writes: its card is reconciled to put
/// it back (a directory's goes to the directory controller). An Ingress outside the operator's
/// namespace only ever names a card of its own namespace.
fn repair_requests(
    touched: UnboundedReceiver<WrittenFor>,
    ctx: &Context,
    directories: UnboundedSender<ObjectRef<AgentDirectory>>,
) -> impl Stream<Item = ObjectRef<AgentCard>> {
    let (cards, opns) = (ctx.cards.clone(), ctx.settings.operator_namespace.clone());
    touched.filter_map(move |ing: WrittenFor| {
        let owner = if let Some(dir) = &ing.directory {
            if ing.namespace == opns {
                let _ = directories.unbounded_send(ObjectRef::new(dir));
            }
            None
        } else {
            ing.card
                .as_deref()
                .and_then(|c| c.split_once('/'))
                .filter(|(ns, _)| ing.namespace == opns || ing.namespace == *ns)
                .map(|(ns, name)| ObjectRef::<AgentCard>::new(name).within(ns))
                .filter(|r| cards.get(r).is_some())
        };
        std::future::ready(owner)
    })
}

/// The card controller, on the triggers the fan-outs send. Bounded by default
/// (`--concurrency`): each reconcile in flight holds API connections and buffers.
async fn run_card_controller(
    ctx: &Arc<Context>,
    config: &Config,
    triggers: impl Stream<Item = ObjectRef<AgentCard>> + Send + 'static,
) {
    Controller::for_stream(
        futures::stream::pending::<Result<AgentCard, watcher::Error>>(),
        ctx.cards.clone(),
    )
    .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency))
    .reconcile_on(triggers)
    .run(agentcard::reconcile, agentcard::error_policy, ctx.clone())
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "controller event");
        }
    })
    .await;
}

/// The directory controller, on its triggers: its own changes, its routes', its peers' on the
/// hosts it waits for, and a change of its count ([`agentdirectory::count`]; debounced, so a
/// bulk apply costs a few status writes, not one per card).
async fn run_directory_controller(
    ctx: &Arc<Context>,
    triggers: impl Stream<Item = ObjectRef<AgentDirectory>> + Send + 'static,
) {
    Controller::for_stream(
        futures::stream::pending::<Result<AgentDirectory, watcher::Error>>(),
        ctx.directories.clone(),
    )
    .with_config(kube::runtime::controller::Config::default().debounce(DIRECTORY_DEBOUNCE))
    .reconcile_on(triggers)
    .run(
        agentdirectory::reconcile,
        agentdirectory::error_policy,
        ctx.clone(),
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "directory controller event");
        }
    })
    .await;
}
