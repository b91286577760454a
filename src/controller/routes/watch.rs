//! The watches of the routes the operator writes: the Ingresses (every namespace, compact)
//! and, with HTTPRoute routing, the HTTPRoutes. Their stores are what a reconcile reads
//! instead of a GET; their events wake the route's owner.
//!
//! Data flow: each watch reflects into its store and forgets the write memo's entry of what
//! it shows ([`crate::controller::writes::seen::WriteMemo`]); each object an event touched
//! (a relist's at its end) is read for its owner ([`WrittenFor::owner`]) and sent on the
//! owner's trigger edge: `ingress_touched` (someone edited or deleted it: put it back) or
//! `httproute_changed` (also a Gateway's verdict, which `Routed` reports).

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use super::routing::{self, RouteKind};
use crate::contract::{LABEL_MANAGED_BY, MANAGER};
use crate::controller::config::Config;
use crate::controller::triggers::{ToCards, ToDirectories};
use crate::controller::watches::{drive, Owner, WrittenFor};
use crate::controller::writes::seen::WriteMemo;
use crate::crd::AgentCard;
use crate::process::AbortOnDrop;
use crate::store::{NamedStore, NamedWriter, SeenIngress};

/// The route stores the reconciles read.
pub struct RouteStores {
    /// The Ingresses the operator wrote.
    pub ingresses: NamedStore<SeenIngress>,
    /// The HTTPRoutes it wrote (with HTTPRoute routing).
    pub httproutes: Option<Store<DynamicObject>>,
}

/// Start the Ingress watch and, with HTTPRoute routing, the HTTPRoute watch; their tasks go
/// to `tasks`. `cards` is the card store: an Ingress naming a card that is not there wakes
/// nobody.
pub fn start(
    client: &Client,
    config: &Config,
    memo: &Arc<WriteMemo>,
    cards: Store<AgentCard>,
    (to_cards, to_directories): (&ToCards, &ToDirectories),
    tasks: &mut Vec<AbortOnDrop>,
) -> RouteStores {
    let opns = config.settings.operator_namespace.clone();
    let (ingress_task, ingresses, touched) = ingresses(client, config, memo);
    let (cards_tx, dirs_tx) = (
        to_cards.ingress_touched.clone(),
        to_directories.ingress_touched.clone(),
    );
    let ingress_opns = opns.clone();
    let repairs = AbortOnDrop::spawn(tracing::info_span!("ingress_repairs"), async move {
        futures::pin_mut!(touched);
        while let Some(ing) = touched.next().await {
            match ing.owner(&ingress_opns) {
                Some(Owner::Card(card)) if cards.get(&card).is_some() => {
                    let _ = cards_tx.unbounded_send(card);
                }
                Some(Owner::Directory(dir)) => {
                    let _ = dirs_tx.unbounded_send(dir);
                }
                _ => {}
            }
        }
    });
    tasks.extend([ingress_task, repairs]);
    let httproutes = (config.settings.routing.kind == RouteKind::HttpRoute).then(|| {
        let (task, store) = httproutes(client, config, memo, opns, to_cards, to_directories);
        tasks.push(task);
        store
    });
    RouteStores {
        ingresses,
        httproutes,
    }
}

/// The Ingresses the operator writes (every namespace), kept compact: read instead of a GET
/// per reconcile, and each one edited or deleted reported so it is put back.
fn ingresses(
    client: &Client,
    config: &Config,
    memo: &Arc<WriteMemo>,
) -> (
    AbortOnDrop,
    NamedStore<SeenIngress>,
    futures::channel::mpsc::UnboundedReceiver<WrittenFor>,
) {
    // One or two Ingresses per card, read by name: a store without kube's per-object key.
    let mut writer = NamedWriter::default();
    let store = writer.as_reader();
    let memo = memo.clone();
    let feed = watcher(
        Api::<SeenIngress>::all(client.clone()),
        watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}")),
    )
    .default_backoff()
    .filter(config.hub_scope().event_filter())
    .inspect(move |ev| {
        if let Ok(ev) = ev {
            writer.apply_watcher_event(ev);
        }
    })
    .inspect(move |ev| memo.forget_event("Ingress", ev));
    let (task, touched) = drive(
        tracing::info_span!("ingress_watch"),
        feed,
        WrittenFor::of::<SeenIngress>,
    );
    (task, store, touched)
}

/// The HTTPRoutes the operator writes, for repair and for the Gateways' verdicts (their
/// status) that the `Routed` conditions report: each event sends its card or directory.
fn httproutes(
    client: &Client,
    config: &Config,
    memo: &Arc<WriteMemo>,
    opns: String,
    to_cards: &ToCards,
    to_directories: &ToDirectories,
) -> (AbortOnDrop, Store<DynamicObject>) {
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
    let (cards, directories) = (
        to_cards.httproute_changed.clone(),
        to_directories.httproute_changed.clone(),
    );
    let task = AbortOnDrop::spawn(tracing::info_span!("httproute_owners"), async move {
        futures::pin_mut!(feed);
        while let Some(ev) = feed.next().await {
            let Ok(route) = ev else { continue };
            match WrittenFor::of(&route).owner(&opns) {
                Some(Owner::Card(card)) => {
                    let _ = cards.unbounded_send(card);
                }
                Some(Owner::Directory(dir)) => {
                    let _ = directories.unbounded_send(dir);
                }
                None => {}
            }
        }
    });
    (task, store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::ObjectRef;

    /// The card an object of namespace `namespace` annotated `card` wakes, if any.
    fn woken_card(namespace: &str, card: &str, operator_ns: &str) -> Option<ObjectRef<AgentCard>> {
        let written = WrittenFor {
            namespace: namespace.into(),
            card: Some(card.into()),
            directory: None,
        };
        match written.owner(operator_ns)? {
            Owner::Card(card) => Some(card),
            Owner::Directory(_) => None,
        }
    }

    /// A route in the operator's namespace or the card's own wakes the card; a tenant's
    /// object annotated to name another namespace's card wakes nobody; a directory's route
    /// counts in the operator's namespace only.
    #[test]
    fn an_object_wakes_only_an_owner_it_may_belong_to() {
        let card = |ns: &str, n: &str| Some(ObjectRef::<AgentCard>::new(n).within(ns));
        assert_eq!(woken_card("ops", "team-a/c", "ops"), card("team-a", "c"));
        assert_eq!(woken_card("team-a", "team-a/c", "ops"), card("team-a", "c"));
        assert_eq!(woken_card("team-b", "team-a/c", "ops"), None);
        assert_eq!(woken_card("ops", "no-slash", "ops"), None);
        let dir = |ns: &str| WrittenFor {
            namespace: ns.into(),
            card: None,
            directory: Some("d".into()),
        };
        assert_eq!(
            dir("ops").owner("ops"),
            Some(Owner::Directory(ObjectRef::new("d")))
        );
        assert_eq!(dir("team-a").owner("ops"), None);
    }
}
