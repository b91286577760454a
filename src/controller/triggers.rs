//! Which event wakes which reconcile, and why: every edge of the controllers' trigger graph,
//! named in one place.
//!
//! Data flow: [`edges`] makes one channel per edge. Its senders ([`ToCards`],
//! [`ToDirectories`]) go to the watch or task that notices the event; its receivers
//! ([`CardTriggers`], [`DirectoryTriggers`]) are merged into the two controllers' trigger
//! streams by [`crate::controller::run`]. An edge sends an object's reference only; the
//! reconcile reads the object from the store, so a burst of events for one object costs one
//! reconcile (the controller's queue deduplicates them). A [`Gate`] lets the card controller's
//! queue take only a few references more than it can reconcile at once: the rest wait in
//! their edges' channels, where a waiting reference costs a fifth of what the queue spends on
//! one (a restart or a bulk apply queues every card).

use std::collections::{HashSet, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::task::AtomicWaker;
use futures::Stream;
use kube::runtime::reflector::ObjectRef;

use crate::crd::{AgentCard, AgentDirectory};

/// Where the events that wake a card's reconcile are sent, one sender per edge.
#[derive(Clone)]
pub struct ToCards {
    /// The card itself changed: applied, relisted, deleted while held by a finalizer
    /// ([`crate::controller::watches::fan_out_cards`]).
    pub card_changed: UnboundedSender<ObjectRef<AgentCard>>,
    /// Its namespace's allowed-hosts annotation changed: the card may now hold, or lose, its
    /// host ([`crate::controller::watches::fan_out_namespaces`]).
    pub namespace_changed: UnboundedSender<ObjectRef<AgentCard>>,
    /// Its ConfigMap was edited or deleted by someone else: written again
    /// ([`crate::controller::watches::fan_out_configmaps`]).
    pub configmap_touched: UnboundedSender<ObjectRef<AgentCard>>,
    /// The signing keys, or the active key, changed: every card is signed again
    /// ([`crate::controller::watches::resign_all_on_demand`]).
    pub keys_changed: UnboundedSender<ObjectRef<AgentCard>>,
    /// The resync walk: each card looked at again about once an hour, evenly spread
    /// ([`crate::controller::watches::resync`]).
    pub resync: UnboundedSender<ObjectRef<AgentCard>>,
    /// A card or directory released a host or prefix this card waits for
    /// ([`crate::controller::routes::ownership`]).
    pub host_freed: UnboundedSender<ObjectRef<AgentCard>>,
    /// One of its HTTPRoutes changed: put back when edited, and a Gateway's verdict is
    /// reported in `Routed` ([`crate::controller::routes::watch`]).
    pub httproute_changed: UnboundedSender<ObjectRef<AgentCard>>,
    /// One of its Ingresses was edited or deleted: put back
    /// ([`crate::controller::routes::watch`]).
    pub ingress_touched: UnboundedSender<ObjectRef<AgentCard>>,
    /// The ready endpoints of the agent's Service changed: `BackendReady` is judged again
    /// ([`crate::controller::agentcard::backends`]).
    pub backend_changed: UnboundedSender<ObjectRef<AgentCard>>,
    /// An AgentCardApproval naming it changed, or a directory began or stopped requiring
    /// approval: its verdicts are judged again
    /// ([`crate::controller::agentcard::approval::watch`]).
    pub approval_changed: UnboundedSender<ObjectRef<AgentCard>>,
}

/// The receiving ends of [`ToCards`], in the same order.
pub struct CardTriggers {
    card_changed: UnboundedReceiver<ObjectRef<AgentCard>>,
    namespace_changed: UnboundedReceiver<ObjectRef<AgentCard>>,
    configmap_touched: UnboundedReceiver<ObjectRef<AgentCard>>,
    keys_changed: UnboundedReceiver<ObjectRef<AgentCard>>,
    resync: UnboundedReceiver<ObjectRef<AgentCard>>,
    host_freed: UnboundedReceiver<ObjectRef<AgentCard>>,
    httproute_changed: UnboundedReceiver<ObjectRef<AgentCard>>,
    ingress_touched: UnboundedReceiver<ObjectRef<AgentCard>>,
    backend_changed: UnboundedReceiver<ObjectRef<AgentCard>>,
    approval_changed: UnboundedReceiver<ObjectRef<AgentCard>>,
}

impl CardTriggers {
    /// Every edge merged: the card controller's trigger stream.
    pub fn merged(self) -> impl Stream<Item = ObjectRef<AgentCard>> + Send + 'static {
        futures::stream::select_all([
            self.card_changed,
            self.namespace_changed,
            self.configmap_touched,
            self.keys_changed,
            self.resync,
            self.host_freed,
            self.httproute_changed,
            self.ingress_touched,
            self.backend_changed,
            self.approval_changed,
        ])
    }
}

/// Where the events that wake a directory's reconcile are sent, one sender per edge.
#[derive(Clone)]
pub struct ToDirectories {
    /// The directory itself changed (applied, or relisted once the list is whole)
    /// ([`crate::controller::agentdirectory::watch`]).
    pub directory_changed: UnboundedSender<ObjectRef<AgentDirectory>>,
    /// How many cards it lists changed: its status counts them
    /// ([`crate::controller::agentdirectory::count`]; the controller debounces these).
    pub count_changed: UnboundedSender<ObjectRef<AgentDirectory>>,
    /// A card or directory released a host this directory waits for
    /// ([`crate::controller::routes::ownership`]).
    pub host_freed: UnboundedSender<ObjectRef<AgentDirectory>>,
    /// Its HTTPRoute changed ([`crate::controller::routes::watch`]).
    pub httproute_changed: UnboundedSender<ObjectRef<AgentDirectory>>,
    /// Its Ingress was edited or deleted ([`crate::controller::routes::watch`]).
    pub ingress_touched: UnboundedSender<ObjectRef<AgentDirectory>>,
}

/// The receiving ends of [`ToDirectories`], in the same order.
pub struct DirectoryTriggers {
    directory_changed: UnboundedReceiver<ObjectRef<AgentDirectory>>,
    count_changed: UnboundedReceiver<ObjectRef<AgentDirectory>>,
    host_freed: UnboundedReceiver<ObjectRef<AgentDirectory>>,
    httproute_changed: UnboundedReceiver<ObjectRef<AgentDirectory>>,
    ingress_touched: UnboundedReceiver<ObjectRef<AgentDirectory>>,
}

impl DirectoryTriggers {
    /// Every edge merged: the directory controller's trigger stream.
    pub fn merged(self) -> impl Stream<Item = ObjectRef<AgentDirectory>> + Send + 'static {
        futures::stream::select_all([
            self.directory_changed,
            self.count_changed,
            self.host_freed,
            self.httproute_changed,
            self.ingress_touched,
        ])
    }
}

/// One channel per edge of both controllers.
pub fn edges() -> (ToCards, CardTriggers, ToDirectories, DirectoryTriggers) {
    let (card_changed, card_changed_rx) = unbounded();
    let (namespace_changed, namespace_changed_rx) = unbounded();
    let (configmap_touched, configmap_touched_rx) = unbounded();
    let (keys_changed, keys_changed_rx) = unbounded();
    let (resync, resync_rx) = unbounded();
    let (card_host_freed, card_host_freed_rx) = unbounded();
    let (card_httproute, card_httproute_rx) = unbounded();
    let (card_ingress, card_ingress_rx) = unbounded();
    let (backend_changed, backend_changed_rx) = unbounded();
    let (approval_changed, approval_changed_rx) = unbounded();
    let (directory_changed, directory_changed_rx) = unbounded();
    let (count_changed, count_changed_rx) = unbounded();
    let (dir_host_freed, dir_host_freed_rx) = unbounded();
    let (dir_httproute, dir_httproute_rx) = unbounded();
    let (dir_ingress, dir_ingress_rx) = unbounded();
    (
        ToCards {
            card_changed,
            namespace_changed,
            configmap_touched,
            keys_changed,
            resync,
            host_freed: card_host_freed,
            httproute_changed: card_httproute,
            ingress_touched: card_ingress,
            backend_changed,
            approval_changed,
        },
        CardTriggers {
            card_changed: card_changed_rx,
            namespace_changed: namespace_changed_rx,
            configmap_touched: configmap_touched_rx,
            keys_changed: keys_changed_rx,
            resync: resync_rx,
            host_freed: card_host_freed_rx,
            httproute_changed: card_httproute_rx,
            ingress_touched: card_ingress_rx,
            backend_changed: backend_changed_rx,
            approval_changed: approval_changed_rx,
        },
        ToDirectories {
            directory_changed,
            count_changed,
            host_freed: dir_host_freed,
            httproute_changed: dir_httproute,
            ingress_touched: dir_ingress,
        },
        DirectoryTriggers {
            directory_changed: directory_changed_rx,
            count_changed: count_changed_rx,
            host_freed: dir_host_freed_rx,
            httproute_changed: dir_httproute_rx,
            ingress_touched: dir_ingress_rx,
        },
    )
}

/// How many references a controller's queue holds at most through a [`Gate`], for a
/// controller running `concurrency` reconciles at once (0: unbounded, no gate): enough that
/// a reconcile ending finds the next one queued.
pub fn gate_limit(concurrency: u16) -> usize {
    match concurrency {
        0 => usize::MAX,
        n => usize::from(n).saturating_mul(4).max(64),
    }
}

/// Holds the card controller's triggers back while its queue has `limit` references it has
/// not answered yet. kube's controller queue takes every trigger at once and keeps two copies
/// of each reference (its map and its delay queue, about 700 bytes a card): at a restart or
/// a bulk apply, one per card. Through the gate the queue holds at most `limit`; the rest
/// wait here, in arrival order, each card once (a `namespace/name` key, about 80 bytes) —
/// a card triggered again while it waits is still one reconcile, as it was in the queue.
/// A reference is answered when the controller reports it (a reconcile ended, or the card
/// was gone: [`Gate::answered`]).
pub struct Gate {
    state: Mutex<GateState>,
    limit: usize,
    waker: AtomicWaker,
}

#[derive(Default)]
struct GateState {
    /// Triggered, not let through yet: in arrival order, and as a set.
    waiting: VecDeque<Arc<str>>,
    waiting_set: HashSet<Arc<str>>,
    /// Let through and not answered yet.
    queued: HashSet<ObjectRef<AgentCard>>,
}

/// A card's reference as a compact key, `namespace/name` (about 48 bytes with its `Arc`; an
/// `ObjectRef` is 96 bytes inline and two allocations): what the gate and the cards-by-host
/// index hold per card.
pub fn card_key(r: &ObjectRef<AgentCard>) -> Arc<str> {
    format!("{}/{}", r.namespace.as_deref().unwrap_or_default(), r.name).into()
}

/// The reference a [`card_key`] stands for (a namespace and a name hold no `/`).
pub fn card_ref(key: &str) -> ObjectRef<AgentCard> {
    match key.split_once('/') {
        Some(("", name)) => ObjectRef::new(name),
        Some((ns, name)) => ObjectRef::new(name).within(ns),
        None => ObjectRef::new(key),
    }
}

impl Gate {
    /// A gate letting `limit` references wait in the queue.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Gate {
            state: Mutex::new(GateState::default()),
            limit: limit.max(1),
            waker: AtomicWaker::new(),
        })
    }

    /// `triggers`, held back while the queue is full.
    pub fn hold<S>(self: &Arc<Self>, triggers: S) -> Gated<S>
    where
        S: Stream<Item = ObjectRef<AgentCard>> + Unpin,
    {
        Gated {
            gate: self.clone(),
            inner: Some(triggers),
        }
    }

    /// The controller reported `r`: one place in the queue is free again.
    pub fn answered(&self, r: &ObjectRef<AgentCard>) {
        let freed = {
            let mut state = crate::locks::lock(&self.state);
            state.queued.remove(r) && !state.waiting.is_empty()
        };
        if freed {
            self.waker.wake();
        }
    }

    /// How many references are let through and not answered, and how many cards wait.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let state = crate::locks::lock(&self.state);
        (state.queued.len(), state.waiting.len())
    }
}

/// A trigger stream behind a [`Gate`].
pub struct Gated<S> {
    gate: Arc<Gate>,
    /// `None` once it ended.
    inner: Option<S>,
}

impl<S> Stream for Gated<S>
where
    S: Stream<Item = ObjectRef<AgentCard>> + Unpin,
{
    type Item = ObjectRef<AgentCard>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Registered before the queue is looked at: an answer in between wakes this task.
        this.gate.waker.register(cx.waker());
        // Take in every trigger there is (the edges' channels keep none waiting).
        while let Some(inner) = this.inner.as_mut() {
            match Pin::new(inner).poll_next(cx) {
                Poll::Ready(Some(r)) => {
                    let key = card_key(&r);
                    let mut state = crate::locks::lock(&this.gate.state);
                    if state.waiting_set.insert(key.clone()) {
                        state.waiting.push_back(key);
                    }
                }
                Poll::Ready(None) => this.inner = None,
                Poll::Pending => break,
            }
        }
        let mut state = crate::locks::lock(&this.gate.state);
        if state.queued.len() < this.gate.limit {
            if let Some(key) = state.waiting.pop_front() {
                state.waiting_set.remove(&key);
                let r = card_ref(&key);
                state.queued.insert(r.clone());
                // Room for 100,000 waiting cards is given back as they leave.
                let len = state.waiting.len();
                if state.waiting.capacity() > 64 && len < state.waiting.capacity() / 4 {
                    state.waiting.shrink_to(len * 2);
                    state.waiting_set.shrink_to(len * 2);
                }
                return Poll::Ready(Some(r));
            }
        }
        if this.inner.is_none() && state.waiting.is_empty() {
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    /// Each named edge reaches its controller's stream, and only that one.
    #[tokio::test]
    async fn every_edge_reaches_its_controller() {
        let (to_cards, cards, to_dirs, dirs) = edges();
        let card = |n: &str| ObjectRef::<AgentCard>::new(n).within("ns");
        let senders = [
            &to_cards.card_changed,
            &to_cards.namespace_changed,
            &to_cards.configmap_touched,
            &to_cards.keys_changed,
            &to_cards.resync,
            &to_cards.host_freed,
            &to_cards.httproute_changed,
            &to_cards.ingress_touched,
            &to_cards.backend_changed,
            &to_cards.approval_changed,
        ];
        for (i, tx) in senders.iter().enumerate() {
            tx.unbounded_send(card(&format!("c{i}"))).unwrap();
        }
        let dir_senders = [
            &to_dirs.directory_changed,
            &to_dirs.count_changed,
            &to_dirs.host_freed,
            &to_dirs.httproute_changed,
            &to_dirs.ingress_touched,
        ];
        for (i, tx) in dir_senders.iter().enumerate() {
            tx.unbounded_send(ObjectRef::new(&format!("d{i}"))).unwrap();
        }
        drop((to_cards, to_dirs));
        let mut got: Vec<String> = cards.merged().map(|r| r.name).collect().await;
        got.sort();
        assert_eq!(got, (0..10).map(|i| format!("c{i}")).collect::<Vec<_>>());
        let mut got: Vec<String> = dirs.merged().map(|r| r.name).collect().await;
        got.sort();
        assert_eq!(got, (0..5).map(|i| format!("d{i}")).collect::<Vec<_>>());
    }

    fn in_ns(name: &str) -> ObjectRef<AgentCard> {
        ObjectRef::new(name).within("ns")
    }

    fn next(g: &mut Gated<UnboundedReceiver<ObjectRef<AgentCard>>>) -> Option<String> {
        futures::FutureExt::now_or_never(g.next())
            .flatten()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
    }

    #[tokio::test]
    async fn a_gate_lets_through_as_many_cards_as_are_answered_each_waiting_card_once() {
        let (tx, rx) = unbounded();
        let gate = Gate::new(2);
        let mut gated = gate.hold(rx);
        for name in ["a", "b", "c", "b", "d", "c"] {
            tx.unbounded_send(in_ns(name)).unwrap();
        }
        assert_eq!(next(&mut gated).as_deref(), Some("ns/a"));
        assert_eq!(next(&mut gated).as_deref(), Some("ns/b"));
        // Two unanswered: the queue is full; c and d wait, each once (sent twice).
        assert_eq!(next(&mut gated), None);
        assert_eq!(gate.counts(), (2, 2));
        // An answer for a card the gate never let through frees nothing.
        gate.answered(&in_ns("z"));
        assert_eq!(next(&mut gated), None);
        // "a" again while queued: it waits behind c and d.
        tx.unbounded_send(in_ns("a")).unwrap();
        gate.answered(&in_ns("a"));
        assert_eq!(next(&mut gated).as_deref(), Some("ns/c"));
        assert_eq!(next(&mut gated), None);
        gate.answered(&in_ns("b"));
        assert_eq!(next(&mut gated).as_deref(), Some("ns/d"));
        assert_eq!(gate.counts(), (2, 1));
        drop(tx);
        gate.answered(&in_ns("c"));
        assert_eq!(next(&mut gated).as_deref(), Some("ns/a"));
        // The edges ended and nothing waits: the stream ends.
        assert_eq!(futures::FutureExt::now_or_never(gated.next()), Some(None));
        // A cluster-scoped reference (none is a card, but it round-trips).
        assert_eq!(
            card_ref(&card_key(&ObjectRef::new("x"))),
            ObjectRef::new("x")
        );
    }

    #[tokio::test]
    async fn an_answer_wakes_a_stream_held_back() {
        let (tx, rx) = unbounded();
        let gate = Gate::new(1);
        let mut gated = gate.hold(rx);
        tx.unbounded_send(in_ns("a")).unwrap();
        tx.unbounded_send(in_ns("b")).unwrap();
        assert_eq!(gated.next().await.map(|r| r.name).as_deref(), Some("a"));
        let answer = {
            let gate = gate.clone();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                gate.answered(&in_ns("a"));
            })
        };
        // Pending until the answer comes, then "b".
        assert_eq!(gated.next().await.map(|r| r.name).as_deref(), Some("b"));
        answer.await.unwrap();
    }

    #[test]
    fn the_queue_holds_four_reconciles_of_work_and_no_gate_when_unbounded() {
        assert_eq!(gate_limit(32), 128);
        assert_eq!(gate_limit(1), 64);
        assert_eq!(gate_limit(0), usize::MAX);
    }
}
