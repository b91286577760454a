//! The controllers' wiring, top to bottom: the trigger edges ([`super::triggers`]), the
//! watches that feed them (the card-side fan-outs of [`crate::hub`]'s shared watches, the
//! signing keys', the routes', the directories', the agents' backends), the [`Context`] built
//! from what they keep, the tasks that forget deleted objects and count directories, and last
//! the two controllers on their merged triggers. Event logic lives with each watch, not here.
//! Every task is held by an [`AbortOnDrop`] in `run`'s frame: when `run` ends or is dropped
//! (the lease is lost), they all stop.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::controller::Error as ControllerError;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::Client;
use tokio::sync::watch;

use super::agentcard::{self, backends};
use super::agentdirectory::{self, count};
use super::config::Config;
use super::context::{Context, Parts};
use super::error::Error;
use super::events::Events;
use super::keys::signing::KeySource;
use super::keys::watch::{self as key_watch, PublisherInputs};
use super::metrics::ControllerMetrics;
use super::routes::ownership::{Ownership, OwnershipInputs};
use super::routes::watch as route_watch;
use super::triggers::{self, gate_limit, Gate};
use super::watches::approvals as approval_watch;
use super::watches::start as card_watch;
use super::writes::seen::Written;
use crate::contract::MANAGER;
use crate::crd::{AgentCard, AgentCardApproval, AgentDirectory};
use crate::directory::federation::Federation;
use crate::hub::Hubs;
use crate::process::AbortOnDrop;

/// How long the directory controller waits for more card events before it counts again.
const DIRECTORY_DEBOUNCE: Duration = Duration::from_millis(500);

/// Run the controllers until the process stops or `run` fails to start.
pub async fn run(
    client: Client,
    hubs: Arc<Hubs>,
    config: Config,
    metrics: Arc<ControllerMetrics>,
    federation: Arc<Federation>,
) -> Result<(), Error> {
    key_watch::ensure_signing_secret(&client, &config).await?;
    let mut tasks = Vec::new();
    let (to_cards, card_triggers, to_dirs, dir_triggers) = triggers::edges();

    let cards = card_watch::start(&hubs, &config, &to_cards, &mut tasks);
    // One recorder for the whole process: the card controller and the key rotation share it.
    let recorder = Arc::new(Events::queued(
        client.clone(),
        Reporter {
            controller: MANAGER.into(),
            instance: Some(config.instance.clone()),
        },
        metrics.events_dropped.clone(),
    ));
    let signing = key_watch::start(
        &client,
        &config,
        PublisherInputs {
            cards: hubs.cards.store(),
            configmaps: hubs.configmaps.named(),
            configmaps_listed: cards.configmaps_listed.clone(),
            resign_all: cards.resign_all.clone(),
            recorder: recorder.clone(),
            gauges: metrics.signing.clone(),
        },
        &mut tasks,
    );
    let routes = route_watch::start(
        &client,
        &config,
        &cards.memo,
        hubs.cards.store(),
        (&to_cards, &to_dirs),
        &mut tasks,
    );
    let dirs = agentdirectory::watch::start(&hubs, &to_dirs, cards.recount_tx.clone());
    tasks.push(dirs.task);
    // The approvals: only the lease holder reads them (the card server lists by the verdicts
    // the card status holds).
    let approvals = crate::hub::Hub::<AgentCardApproval>::start(
        kube::Api::all(client.clone()),
        watcher::Config::default(),
        hubs.initial_list,
        |_| {},
        &crate::hub::Scope::default(),
        crate::hub::Keep::Store,
    );
    tasks.extend([
        AbortOnDrop::spawn(
            tracing::info_span!("approval_watch"),
            approval_watch::fan_out(
                approvals.subscribe(),
                hubs.directories.store(),
                hubs.cards.store(),
                to_cards.approval_changed.clone(),
            ),
        ),
        AbortOnDrop::spawn(
            tracing::info_span!("admission_watch"),
            approval_watch::on_admission(
                hubs.directories.subscribe(),
                hubs.cards.store(),
                to_cards.approval_changed.clone(),
            ),
        ),
    ]);

    let ctx = Arc::new(Context::new(
        &config,
        Parts {
            ownership: Ownership::new(OwnershipInputs {
                shared_hosts: config.shared_hosts.clone(),
                cards: hubs.cards.store(),
                directories: hubs.directories.store(),
                cards_by_host: cards.cards_by_host.clone(),
                peers: to_cards.host_freed.clone(),
                directory_peers: to_dirs.host_freed.clone(),
                directories_wait: agentdirectory::watch::directories_wait(&client).await,
                directories_listed: dirs.listed,
                cards_listed: hubs.cards.listed(),
            }),
            written: Written {
                operator_namespace: config.settings.operator_namespace.clone(),
                configmaps: hubs.configmaps.named(),
                ingresses: routes.ingresses,
                routes: routes.httproutes,
                memo: cards.memo.clone(),
                configmaps_written: cards.configmaps_written.clone(),
                statuses: cards.statuses.clone(),
            },
            signing,
            client,
            recorder,
            metrics,
            cards: hubs.cards.store(),
            cards_by_host: cards.cards_by_host.clone(),
            namespaces: hubs.namespaces.store(),
            directories: hubs.directories.store(),
            federation,
            approvals: agentcard::approval::Approvals {
                store: approvals.store(),
                listed: approvals.listed(),
            },
        },
    )?);

    let (stores_listed, stores_listed_rx) = watch::channel(false);
    tasks.extend([
        card_watch::forget_gone(
            &ctx,
            config.watch_namespace.clone(),
            stores_listed_rx,
            cards.gone,
        ),
        agentdirectory::watch::forget_deleted(&ctx, dirs.gone),
        AbortOnDrop::spawn(
            tracing::info_span!("directory_counts"),
            count::run(
                count::Stores {
                    cards: hubs.cards.store(),
                    namespaces: hubs.namespaces.store(),
                    directories: hubs.directories.store(),
                },
                ctx.counts.clone(),
                cards.recount,
                to_dirs.count_changed.clone(),
            ),
        ),
        backends::watch(
            &ctx.client,
            config.watch_namespace.as_deref(),
            ctx.backends.clone(),
            ctx.cards.clone(),
            ctx.cards_by_host.clone(),
            to_cards.backend_changed.clone(),
        ),
    ]);
    wait_for_stores(&ctx, &ctx.signing.source, cards.configmaps_listed).await;
    let _ = stores_listed.send(true);
    // The controllers hold the receiving ends only: a sender dropped here is one no watch uses.
    drop((to_cards, to_dirs));

    // Discovery runs beside them while the AgentDiscovery CRD is installed (it ends at once
    // without it; that ends nothing else).
    let discovery = super::discovery::run(
        ctx.client.clone(),
        config.watch_namespace.clone(),
        (hubs.cards.store(), hubs.cards.subscribe()),
        (hubs.namespaces.store(), hubs.namespaces.subscribe()),
        ctx.metrics.clone(),
    );
    let discovery = tracing::Instrument::instrument(
        async move {
            discovery.await;
            futures::future::pending::<()>().await;
        },
        tracing::info_span!("discovery_controller"),
    );
    // The card and directory controllers run until the process stops; either ending ends the
    // controllers.
    tokio::select! {
        () = run_card_controller(&ctx, &config, card_triggers.merged()) => {}
        () = run_directory_controller(&ctx, dir_triggers.merged()) => {}
        () = discovery => {}
    }
    drop((tasks, cards.resign_all));
    Ok(())
}

/// Start reconciling only with the stores the reconciler reads: a reconcile before the
/// Ingresses or ConfigMaps are listed would take them for missing and create them again (a
/// conflict and a GET each, for every card, at every start). Bounded: a store wakes only its
/// latest waiter.
async fn wait_for_stores(
    ctx: &Context,
    source: &KeySource,
    mut configmaps_listed: watch::Receiver<bool>,
) {
    tracing::debug!("waiting for the stores to be listed");
    let bound = Duration::from_secs(30);
    let _ = ctx.namespaces.wait_until_ready().await;
    if let KeySource::Secret { secrets, .. } = source {
        let _ = tokio::time::timeout(bound, secrets.wait_until_ready()).await;
    }
    let _ = tokio::time::timeout(bound, ctx.written.ingresses.wait_until_ready()).await;
    let _ = tokio::time::timeout(bound, configmaps_listed.wait_for(|l| *l)).await;
    tracing::debug!("the stores are listed: reconciling");
    if let Some(routes) = &ctx.written.routes {
        let _ = tokio::time::timeout(bound, routes.wait_until_ready()).await;
    }
}

/// The card controller, on its triggers. Bounded by default (`--concurrency`): each
/// reconcile in flight holds API connections and buffers.
async fn run_card_controller(
    ctx: &Arc<Context>,
    config: &Config,
    triggers: impl Stream<Item = ObjectRef<AgentCard>> + Send + 'static,
) {
    // The queue takes a few reconciles of work at a time; the rest waits in the edges.
    let gate = Gate::new(gate_limit(config.concurrency));
    Controller::for_stream(
        futures::stream::pending::<Result<AgentCard, watcher::Error>>(),
        ctx.cards.clone(),
    )
    .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency))
    .reconcile_on(gate.hold(Box::pin(triggers)))
    .run(agentcard::reconcile, agentcard::error_policy, ctx.clone())
    .for_each(|res| {
        match &res {
            Ok((r, _)) => gate.answered(r),
            Err(ControllerError::ReconcilerFailed(_, r) | ControllerError::ObjectNotFound(r)) => {
                // Reported with its type erased: the card of the same namespace and name.
                let card = ObjectRef::new(&r.name);
                gate.answered(&match r.namespace.as_deref() {
                    Some(ns) => card.within(ns),
                    None => card,
                })
            }
            Err(_) => {}
        }
        if let Err(e) = res {
            tracing::debug!(error = %e, "controller event");
        }
        futures::future::ready(())
    })
    .await;
}

/// The directory controller, on its triggers; debounced, so a bulk apply costs a few status
/// writes, not one per card.
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
