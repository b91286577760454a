//! Starting the card-side fan-outs of the shared watches ([`crate::hub`]): cards, Namespaces
//! and card ConfigMaps, the re-sign-all walk, the resync walk and the forgetting of deleted
//! cards. Each task is named by its span and sends on the trigger edge its doc names
//! ([`crate::controller::triggers::ToCards`]).

use std::sync::{Arc, Mutex};

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;

use super::{CardTargets, CardsByHost, Gone, Scope};
use crate::controller::agentcard;
use crate::controller::agentdirectory::count::Recount;
use crate::controller::backoff::again_after;
use crate::controller::config::Config;
use crate::controller::context::Context;
use crate::controller::triggers::ToCards;
use crate::controller::writes::seen::{Unseen, WriteMemo};
use crate::crd::AgentCardStatus;
use crate::hub::Hubs;
use crate::process::AbortOnDrop;
use crate::store::SeenConfigMap;

/// What the card-side watches keep and give: the cards by host and namespace, the writes not
/// seen yet, and the channels the wiring hands on.
pub struct CardWatches {
    /// The cards by host and namespace.
    pub cards_by_host: Arc<Mutex<CardsByHost>>,
    /// Digests of the objects written and not seen yet.
    pub memo: Arc<WriteMemo>,
    /// The card statuses written and not seen yet.
    pub statuses: Arc<Unseen<AgentCardStatus>>,
    /// The card ConfigMaps written and not seen yet.
    pub configmaps_written: Arc<Unseen<SeenConfigMap>>,
    /// Every directory to count again (the directory watch sends there too).
    pub recount: UnboundedReceiver<Recount>,
    /// Where the directory counts hear of changes.
    pub recount_tx: UnboundedSender<Recount>,
    /// Cards deleted, and relists (for the sweep).
    pub gone: UnboundedReceiver<Gone>,
    /// True once the card ConfigMaps are listed.
    pub configmaps_listed: watch::Receiver<bool>,
    /// Asks for every card to be signed again.
    pub resign_all: UnboundedSender<()>,
}

/// Start the card, Namespace and card ConfigMap fan-outs, the re-sign-all walk and the
/// resync walk; their tasks go to `tasks`.
pub fn start(
    hubs: &Hubs,
    config: &Config,
    to: &ToCards,
    tasks: &mut Vec<AbortOnDrop>,
) -> CardWatches {
    let index = Arc::new(Mutex::new(CardsByHost::default()));
    let scope = Scope {
        namespace: config.watch_namespace.clone(),
        limit: config.max_cards_per_namespace,
        byte_limit: config.max_namespace_card_bytes,
    };
    let memo = Arc::new(WriteMemo::default());
    let statuses = Arc::new(Unseen::<AgentCardStatus>::default());
    let configmaps_written = Arc::new(Unseen::<SeenConfigMap>::default());
    let (recount_tx, recount) = unbounded::<Recount>();
    let (gone_tx, gone) = unbounded::<Gone>();
    let targets = CardTargets {
        cards: to.card_changed.clone(),
        directories: recount_tx.clone(),
        gone: gone_tx,
    };
    let (listed_tx, configmaps_listed) = watch::channel(false);
    let (resign_task, resign_all) = resign_all_on_demand(&index, &to.keys_changed);
    tasks.extend([
        AbortOnDrop::spawn(
            tracing::info_span!("card_watch"),
            super::fan_out_cards(
                hubs.cards.subscribe(),
                hubs.cards.store(),
                index.clone(),
                scope.clone(),
                statuses.clone(),
                targets,
            ),
        ),
        AbortOnDrop::spawn(
            tracing::info_span!("namespace_watch"),
            super::fan_out_namespaces(
                hubs.namespaces.subscribe(),
                index.clone(),
                to.namespace_changed.clone(),
                recount_tx.clone(),
            ),
        ),
        AbortOnDrop::spawn(
            tracing::info_span!("card_configmap_watch"),
            super::fan_out_configmaps(
                hubs.configmaps.subscribe(),
                scope,
                memo.clone(),
                configmaps_written.clone(),
                to.configmap_touched.clone(),
                listed_tx,
            ),
        ),
        resign_task,
        AbortOnDrop::spawn(
            tracing::info_span!("resync"),
            super::resync(index.clone(), agentcard::RESYNC, to.resync.clone()),
        ),
    ]);
    CardWatches {
        cards_by_host: index,
        memo,
        statuses,
        configmaps_written,
        recount,
        recount_tx,
        gone,
        configmaps_listed,
        resign_all,
    }
}

/// Re-sign every card of the controller's (not every card in the shared store) each time the
/// returned sender is sent to.
fn resign_all_on_demand(
    index: &Arc<Mutex<CardsByHost>>,
    keys_changed: &UnboundedSender<ObjectRef<crate::crd::AgentCard>>,
) -> (AbortOnDrop, UnboundedSender<()>) {
    let (tx, mut rx) = unbounded::<()>();
    let (index, keys_changed) = (index.clone(), keys_changed.clone());
    let task = AbortOnDrop::spawn(tracing::info_span!("resign_all"), async move {
        while rx.next().await.is_some() {
            let keys = crate::locks::lock(&index).shared_keys();
            for key in keys {
                let _ = keys_changed.unbounded_send(crate::controller::triggers::card_ref(&key));
            }
        }
    });
    (task, tx)
}

/// Cards that are gone: each delete event forgets its card (claims, routes in the operator's
/// namespace); each (re-)list sweeps the routes of cards deleted while no event could tell
/// (see [`crate::controller::routes::sweep`]). Starts once `stores_listed` says the stores are
/// listed; a forget that fails is tried again with backoff.
pub fn forget_gone(
    ctx: &Arc<Context>,
    scope: Option<String>,
    mut stores_listed: watch::Receiver<bool>,
    gone: UnboundedReceiver<Gone>,
) -> AbortOnDrop {
    let ctx = ctx.clone();
    let (retry, retries) = unbounded::<Gone>();
    AbortOnDrop::spawn(tracing::info_span!("forget_deleted_cards"), async move {
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
                    crate::controller::routes::sweep::sweep(
                        &ctx.client,
                        &ctx.written,
                        &ctx.cards,
                        scope.as_deref(),
                    )
                    .await;
                }
            }
        }
    })
}
