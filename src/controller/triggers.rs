//! Which event wakes which reconcile, and why: every edge of the controllers' trigger graph,
//! named in one place.
//!
//! Data flow: [`edges`] makes one channel per edge. Its senders ([`ToCards`],
//! [`ToDirectories`]) go to the watch or task that notices the event; its receivers
//! ([`CardTriggers`], [`DirectoryTriggers`]) are merged into the two controllers' trigger
//! streams by [`crate::controller::run`]. An edge sends an object's reference only; the
//! reconcile reads the object from the store, so a burst of events for one object costs one
//! reconcile (the controller's queue deduplicates them).

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
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
}
