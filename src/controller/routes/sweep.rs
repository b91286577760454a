//! The sweep: card routes in the operator's namespace whose card no longer exists.
//!
//! What the operator writes in a card's namespace is owned by the card, so garbage collection
//! takes it with the card. The card's route in the operator's namespace (an Ingress or an
//! HTTPRoute) cannot carry a cross-namespace owner: it is labelled with the card's uid
//! ([`LABEL_CARD_UID`]) and removed on the card's delete event. A card deleted while no
//! replica led (the operator down, uninstalled for a while, or the event lost across a
//! re-list) leaves it behind: the sweep finds those by uid and deletes them.
//!
//! Data flow: the card watch's fan-out asks for a sweep after each (re-)list, the first one
//! included ([`crate::controller::watches::Gone::Relisted`]); once the route stores are listed, [`sweep`] reads
//! the uids of the cards the card store holds, asks [`orphans`] (pure) which routes name none
//! of them, and deletes each on the resourceVersion it was judged by (a route rewritten since,
//! for a card re-created under the same name, is left to that card).

use std::collections::HashSet;

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use crate::contract::{annotated_card, ANN_CARD, LABEL_CARD_UID};
use crate::controller::routes::routing::httproute_resource;
use crate::controller::writes::seen::Written;
use crate::controller::writes::{delete_at_version, managed, Deleted};
use crate::crd::AgentCard;
use crate::store::MetaView;

/// A route to delete: its name and the resourceVersion it was judged by.
#[derive(Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The route's name (in the operator's namespace).
    pub name: String,
    /// Its resourceVersion when judged.
    pub version: Option<String>,
}

/// Of `routes` (name, resourceVersion, metadata), those written for a card of a namespace in
/// scope (`in_scope`) whose uid is not in `live`. A route without the uid label (not written
/// by the operator for a card) is never one.
pub fn orphans<'a>(
    routes: impl Iterator<Item = (String, Option<String>, &'a dyn MetaView)>,
    live: &HashSet<&str>,
    in_scope: impl Fn(&str) -> bool,
) -> Vec<Orphan> {
    routes
        .filter(|(_, _, meta)| managed(*meta))
        .filter(|(_, _, meta)| {
            meta.annotation(ANN_CARD)
                .and_then(annotated_card)
                .is_some_and(|(ns, _)| in_scope(ns))
        })
        .filter(|(_, _, meta)| {
            meta.label(LABEL_CARD_UID)
                .is_some_and(|uid| !uid.is_empty() && !live.contains(uid))
        })
        .map(|(name, version, _)| Orphan { name, version })
        .collect()
}

/// Delete the card routes in the operator's namespace whose card is gone; `scope`: the
/// namespace whose cards this process reconciles (every namespace when `None`). Call once the
/// route stores are listed (an empty store would find nothing). Returns how many were
/// deleted.
pub async fn sweep(
    client: &Client,
    written: &Written,
    cards: &Store<AgentCard>,
    scope: Option<&str>,
) -> usize {
    let state = cards.state();
    let live: HashSet<&str> = state
        .iter()
        .filter_map(|c| c.metadata.uid.as_deref())
        .collect();
    let in_scope = |ns: &str| scope.is_none_or(|s| s == ns);
    let opns = written.operator_namespace.as_str();
    let ingresses = written.ingresses.state();
    let stale_ingresses = orphans(
        ingresses
            .iter()
            .filter(|i| i.metadata.namespace.as_deref() == Some(opns))
            .map(|i| {
                let meta: &dyn MetaView = &i.seen;
                (i.name_any(), i.metadata.resource_version.clone(), meta)
            }),
        &live,
        in_scope,
    );
    let routes = written
        .routes
        .as_ref()
        .map(|r| r.state())
        .unwrap_or_default();
    let stale_routes = orphans(
        routes
            .iter()
            .filter(|r| r.metadata.namespace.as_deref() == Some(opns))
            .map(|r| {
                let meta: &dyn MetaView = r.as_ref();
                (r.name_any(), r.metadata.resource_version.clone(), meta)
            }),
        &live,
        in_scope,
    );
    let ingress_api: Api<Ingress> = Api::namespaced(client.clone(), opns);
    let route_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), opns, &httproute_resource());
    let mut deleted = delete_each(&ingress_api, stale_ingresses).await;
    deleted += delete_each(&route_api, stale_routes).await;
    if deleted > 0 {
        tracing::info!(
            deleted,
            "removed the routes of cards deleted while no replica led"
        );
    }
    deleted
}

/// Delete each orphan on the version it was judged by; one rewritten since or gone already is
/// left be. Returns how many went.
async fn delete_each<K>(api: &Api<K>, orphans: Vec<Orphan>) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut deleted = 0;
    for o in orphans {
        match delete_at_version(api, &o.name, o.version).await {
            Ok(Deleted::Yes) => deleted += 1,
            Ok(Deleted::Absent | Deleted::Changed) => {}
            Err(e) => {
                tracing::warn!(name = %o.name, category = e.category(), error = %e, "could not remove a deleted card's route");
            }
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{LABEL_MANAGED_BY, MANAGER};
    use crate::store::SeenMeta;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn seen(labels: &[(&str, &str)], card: Option<&str>) -> SeenMeta {
        let mut meta = ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: card.map(|c| [(ANN_CARD.to_string(), c.to_string())].into()),
            ..ObjectMeta::default()
        };
        SeenMeta::take(&mut meta)
    }

    #[test]
    fn only_routes_of_cards_that_are_gone_and_in_scope_are_orphans() {
        let ours = |uid| seen(&[(LABEL_MANAGED_BY, MANAGER), (LABEL_CARD_UID, uid)], None);
        let routes = [
            (
                "live",
                seen(
                    &[(LABEL_MANAGED_BY, MANAGER), (LABEL_CARD_UID, "u1")],
                    Some("a/one"),
                ),
            ),
            (
                "gone",
                seen(
                    &[(LABEL_MANAGED_BY, MANAGER), (LABEL_CARD_UID, "u2")],
                    Some("a/two"),
                ),
            ),
            (
                "other-scope",
                seen(
                    &[(LABEL_MANAGED_BY, MANAGER), (LABEL_CARD_UID, "u3")],
                    Some("b/three"),
                ),
            ),
            ("not-ours", seen(&[(LABEL_CARD_UID, "u4")], Some("a/four"))),
            (
                "no-uid",
                seen(&[(LABEL_MANAGED_BY, MANAGER)], Some("a/five")),
            ),
            ("no-card", ours("u6")),
        ];
        let live: HashSet<&str> = ["u1"].into();
        let found = orphans(
            routes.iter().map(|(n, m)| {
                let meta: &dyn MetaView = m;
                (n.to_string(), Some("7".to_string()), meta)
            }),
            &live,
            |ns| ns == "a",
        );
        assert_eq!(
            found,
            vec![Orphan {
                name: "gone".into(),
                version: Some("7".into())
            }]
        );
    }
}
