//! Apply: write what build produced (server-side apply, field manager `agentcard-operator`,
//! forced), skipping objects that already hold exactly that, and remove what the card no
//! longer asks for. The ConfigMap goes first: the Ingress then routes to bytes that exist.
//!
//! The operator never adopts an object it did not create: an object is ours when it carries
//! the managed-by label and names this card (its controlling owner in the card's namespace, the
//! card annotation in the operator's namespace, where tenants cannot write). A missing object is
//! created with a plain create, so a name taken in the meantime fails with a conflict instead of
//! being merged into; anything else with the name makes the card report `NameInUse`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DynamicObject};
use kube::{Client, Resource, ResourceExt};

use super::build::Built;
use super::card::{backend_ingress_name, card_key, ingress_name};
use crate::contract::{ANN_CARD, LABEL_CARD_UID};
use crate::controller::config::Settings;
use crate::controller::error::Error;
use crate::controller::routes::routing::RouteKind;
use crate::controller::writes::seen::{WriteMemo, Written};
use crate::controller::writes::{
    configmap_current, configmap_removals, delete_at_version, delete_if_present,
    delete_route_if_ours, ingress_current, ingress_removals, managed, write, write_route, Deleted,
    Rules,
};
use crate::crd::AgentCard;
use crate::store::{MetaView, SeenConfigMap, SeenIngress};

/// What exists now, as last read (`None`: absent, or not visible to the operator's watches).
#[derive(Default)]
pub struct Existing<'a> {
    /// The card's ConfigMap.
    pub configmap: Option<&'a SeenConfigMap>,
    /// The card's extended-card ConfigMap.
    pub extended: Option<Arc<SeenConfigMap>>,
    /// The Ingress in the operator's namespace.
    pub ingress: Option<Arc<SeenIngress>>,
    /// The backend Ingress in the card's namespace.
    pub backend: Option<Arc<SeenIngress>>,
    /// The HTTPRoute in the operator's namespace (when routes are watched).
    pub route: Option<Arc<DynamicObject>>,
    /// The backend HTTPRoute in the card's namespace (when routes are watched).
    pub backend_route: Option<Arc<DynamicObject>>,
    /// Whether the Gateways accepted the card's HTTPRoutes (an Ingress being replaced by
    /// routes stays until then, so the switch leaves no gap).
    pub routes_accepted: bool,
}

impl<'a> Existing<'a> {
    /// What the operator wrote for `card` as the watches last saw it, with its ConfigMap
    /// `configmap` (read by the caller when it needs it).
    pub fn of(written: &Written, card: &AgentCard, configmap: Option<&'a SeenConfigMap>) -> Self {
        let ns = card.namespace().unwrap_or_default();
        let opns = &written.operator_namespace;
        let public = ingress_name(&ns, &card.name_any());
        let backend = backend_ingress_name(card);
        Existing {
            configmap,
            extended: written.extended_configmap(card),
            ingress: written.ingress(opns, &public),
            backend: written.ingress(&ns, &backend),
            route: written.route(opns, &public),
            backend_route: written.route(&ns, &backend),
            routes_accepted: false,
        }
    }
}

/// Whether an object in the card's namespace is the card's own: managed by us and controlled
/// by the card (by uid, so a re-created card with the same name does not inherit it either).
pub fn owned_by_card(meta: &dyn MetaView, card: &AgentCard) -> bool {
    let Some(uid) = card.meta().uid.as_deref() else {
        return false;
    };
    managed(meta) && meta.controller().is_some_and(|o| o.uid == uid)
}

/// Whether an object in the operator's namespace was written for `card`.
pub fn written_for_card(meta: &dyn MetaView, card: &AgentCard) -> bool {
    managed(meta) && meta.annotation(ANN_CARD) == Some(card_key(card).as_str())
}

/// Whether the card's status says HTTPRoutes route it.
fn routed_by_routes(card: &AgentCard) -> bool {
    card.status.as_ref().and_then(|s| s.route_kind.as_deref())
        == Some(RouteKind::HttpRoute.as_str())
}

/// The apply stage: write the ConfigMap, the card's routes and the backend's (or delete stale
/// ones), in that order, through [`write`]'s rules; `written` remembers each write until its
/// watch shows it.
pub async fn apply(
    client: &Client,
    built: &Built,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
    written: &Written,
) -> Result<(), Error> {
    // The public card advertises the extended card: the extended card is written before it
    // and removed after the public card stopped advertising it.
    if let Some(e) = &built.extended {
        let have = existing.extended.as_deref();
        write_card_configmap(client, &e.configmap, card, have, written).await?;
    }
    write_card_configmap(client, &built.configmap, card, existing.configmap, written).await?;
    if built.extended.is_none() {
        remove_extended(client, card, existing.extended.as_deref()).await?;
    }
    write_card_routes(client, built, card, settings, existing, &written.memo).await?;
    write_backend(client, built, card, existing, &written.memo).await?;
    remove_replaced_routes(client, built, card, settings, existing).await
}

/// Delete the card's extended-card ConfigMap `have`, when it is the card's.
async fn remove_extended(
    client: &Client,
    card: &AgentCard,
    have: Option<&SeenConfigMap>,
) -> Result<(), Error> {
    let Some(cm) = have.filter(|cm| owned_by_card(&cm.seen, card)) else {
        return Ok(());
    };
    let cms: Api<ConfigMap> =
        Api::namespaced(client.clone(), &card.namespace().unwrap_or_default());
    delete_if_present(&cms, &cm.name_any()).await
}

/// A ConfigMap of the card (`want`, as `have` is now), through [`write`]'s rules.
async fn write_card_configmap(
    client: &Client,
    want: &ConfigMap,
    card: &AgentCard,
    have: Option<&SeenConfigMap>,
    written: &Written,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm_version = have.and_then(|c| c.resource_version());
    let wrote = write(
        &cms,
        want,
        have,
        Rules {
            ours: |m: &dyn MetaView| owned_by_card(m, card),
            current: |h: Option<&SeenConfigMap>| configmap_current(h, want),
            removals: |h: &SeenConfigMap| configmap_removals(h, want),
        },
        &(),
        &written.memo,
    )
    .await?;
    // Until the watch shows it, later reconciles read this ConfigMap as written (its
    // publication time included), so a retry after a later step failed writes nothing new.
    // Nothing is held when nothing was written: the store has it already (or the same write is
    // on its way, and held from when it was made).
    if wrote {
        written.configmaps_written.remember(
            "ConfigMap",
            &ns,
            &want.name_any(),
            cm_version.as_deref(),
            SeenConfigMap::from(want.clone()),
        );
    }
    Ok(())
}

/// The Ingress or HTTPRoute of the card's well-known paths, in the operator's namespace.
async fn write_card_routes(
    client: &Client,
    built: &Built,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
    memo: &WriteMemo,
) -> Result<(), Error> {
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &settings.operator_namespace);
    if let Some(ing) = &built.ingress {
        write(
            &ingresses,
            ing,
            existing.ingress.as_deref(),
            Rules {
                ours: |m: &dyn MetaView| written_for_card(m, card),
                current: |h: Option<&SeenIngress>| ingress_current(h, ing),
                removals: |h: &SeenIngress| ingress_removals(h, ing),
            },
            &(),
            memo,
        )
        .await?;
    }
    if let Some(route) = &built.route {
        let ours = |m: &dyn MetaView| written_for_card(m, card);
        write_route(client, route, existing.route.as_deref(), ours, memo).await?;
    }
    Ok(())
}

/// The Ingress or HTTPRoute of the agent's own path, in the card's namespace, or the removal
/// of one the card no longer asks for.
async fn write_backend(
    client: &Client,
    built: &Built,
    card: &AgentCard,
    existing: &Existing<'_>,
    memo: &WriteMemo,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    let local: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    let ours = |m: &dyn MetaView| owned_by_card(m, card);
    match &built.backend_ingress {
        Some(b) => {
            let rules = Rules {
                ours,
                current: |h: Option<&SeenIngress>| ingress_current(h, b),
                removals: |h: &SeenIngress| ingress_removals(h, b),
            };
            write(&local, b, existing.backend.as_deref(), rules, &(), memo).await?;
        }
        None if existing.backend.as_deref().is_some_and(|b| ours(&b.seen)) => {
            delete_if_present(&local, &backend_ingress_name(card)).await?
        }
        None => {}
    }
    match &built.backend_route {
        Some(r) => {
            write_route(client, r, existing.backend_route.as_deref(), ours, memo).await?;
        }
        None if existing.backend_route.is_some() => {
            delete_route_if_ours(client, &ns, &backend_ingress_name(card), ours).await?
        }
        None => {}
    }
    Ok(())
}

/// Switching what routes the card: the old routes go once the new ones carry traffic (an
/// Ingress replaced by HTTPRoutes waits until the Gateways accepted them).
async fn remove_replaced_routes(
    client: &Client,
    built: &Built,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    let name = ingress_name(&ns, &card.name_any());
    let opns = &settings.operator_namespace;
    let replaced = built.route.is_none() || existing.routes_accepted;
    if built.ingress.is_none()
        && replaced
        && existing
            .ingress
            .as_deref()
            .is_some_and(|i| written_for_card(&i.seen, card))
    {
        let ingresses: Api<Ingress> = Api::namespaced(client.clone(), opns);
        delete_if_present(&ingresses, &name).await?;
    }
    if built.route.is_none() && (routed_by_routes(card) || existing.route.is_some()) {
        delete_route_if_ours(client, opns, &name, |m| written_for_card(m, card)).await?;
        delete_route_if_ours(client, &ns, &backend_ingress_name(card), |m| {
            owned_by_card(m, card)
        })
        .await?;
    }
    Ok(())
}

/// Take the card off the air: delete its ConfigMap and both Ingresses (and HTTPRoutes), each
/// only when it is ours. Used when the card loses (or never gets) its claim.
pub async fn unpublish(
    client: &Client,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
) -> Result<(), Error> {
    let routes = remove_local(client, card, existing).await?;
    cleanup(client, card, settings, existing.ingress.as_deref(), routes).await
}

/// Take a card that is gone (or being deleted) off the air: its backend route at once
/// (garbage collection would take it, and its ConfigMap, only when it gets to them, and the
/// agent's path stays routed meanwhile), and its route in the operator's namespace as the API
/// server has it now ([`remove_gone_card_routes`]).
pub async fn unpublish_gone(
    client: &Client,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
) -> Result<(), Error> {
    let routes = remove_local(client, card, existing).await?;
    let routes = routes || settings.routing.kind == RouteKind::HttpRoute;
    remove_gone_card_routes(client, card, settings, routes).await
}

/// What [`unpublish`] removes from the card's namespace: its ConfigMap (when `existing` has it)
/// and its backend Ingress and HTTPRoute, when they are the card's. Whether HTTPRoutes are in
/// play for it.
async fn remove_local(
    client: &Client,
    card: &AgentCard,
    existing: &Existing<'_>,
) -> Result<bool, Error> {
    let ns = card.namespace().unwrap_or_default();
    remove_extended(client, card, existing.extended.as_deref()).await?;
    if let Some(cm) = existing
        .configmap
        .filter(|cm| owned_by_card(&cm.seen, card))
    {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        delete_if_present(&cms, &cm.name_any()).await?;
    }
    if existing
        .backend
        .as_deref()
        .is_some_and(|b| owned_by_card(&b.seen, card))
    {
        let local: Api<Ingress> = Api::namespaced(client.clone(), &ns);
        delete_if_present(&local, &backend_ingress_name(card)).await?;
    }
    let routes =
        existing.route.is_some() || existing.backend_route.is_some() || routed_by_routes(card);
    if routes {
        delete_route_if_ours(client, &ns, &backend_ingress_name(card), |m| {
            owned_by_card(m, card)
        })
        .await?;
    }
    Ok(routes)
}

/// Remove what garbage collection cannot: the Ingress (and HTTPRoute, when `routes`) in the
/// operator's namespace, when written for this card.
async fn cleanup(
    client: &Client,
    card: &AgentCard,
    settings: &Settings,
    ingress: Option<&SeenIngress>,
    routes: bool,
) -> Result<(), Error> {
    let name = ingress_name(&card.namespace().unwrap_or_default(), &card.name_any());
    if routes || routed_by_routes(card) {
        delete_route_if_ours(client, &settings.operator_namespace, &name, |m| {
            written_for_card(m, card)
        })
        .await?;
    }
    if !ingress.is_some_and(|i| written_for_card(&i.seen, card)) {
        return Ok(());
    }
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &settings.operator_namespace);
    delete_if_present(&ingresses, &name).await
}

/// Remove the card's route in the operator's namespace (its HTTPRoute too, with `routes`) as
/// the API server has it now, not as the watch last showed it: after the card is gone, a
/// reconcile that was in flight may have written it a moment ago. Only a route labelled with
/// this card's uid goes, on the version read.
async fn remove_gone_card_routes(
    client: &Client,
    card: &AgentCard,
    settings: &Settings,
    routes: bool,
) -> Result<(), Error> {
    let (Some(uid), opns) = (card.uid(), &settings.operator_namespace) else {
        return Ok(());
    };
    let name = ingress_name(&card.namespace().unwrap_or_default(), &card.name_any());
    let of_card = |m: &dyn MetaView| managed(m) && m.label(LABEL_CARD_UID) == Some(uid.as_str());
    if routes {
        delete_route_if_ours(client, opns, &name, of_card).await?;
    }
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), opns);
    // Rewritten between the read and the delete: read again.
    for _ in 0..3 {
        let Some(found) = ingresses.get_opt(&name).await? else {
            return Ok(());
        };
        let seen = SeenIngress::from(found);
        if !of_card(&seen.seen) {
            return Ok(());
        }
        let version = seen.metadata.resource_version.clone();
        if delete_at_version(&ingresses, &name, version).await? != Deleted::Changed {
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{LABEL_MANAGED_BY, MANAGER};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    #[test]
    fn objects_are_ours_only_when_managed_and_controlled_by_the_card() {
        let card: AgentCard = serde_json::from_value(serde_json::json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": "c", "namespace": "n", "uid": "u-1"},
            "spec": {"publish": {"host": "h.example.com"}, "card": {"name": "n"}}
        }))
        .unwrap();
        let meta = |labels: serde_json::Value, owner_uid: &str| -> ObjectMeta {
            serde_json::from_value(serde_json::json!({
                "labels": labels,
                "ownerReferences": [{"apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
                    "name": "c", "uid": owner_uid, "controller": true}]
            }))
            .unwrap()
        };
        let managed = serde_json::json!({LABEL_MANAGED_BY: MANAGER});
        // As an HTTPRoute (kept typed) and as the compact form the stores keep of the rest.
        let route = |m: ObjectMeta| DynamicObject {
            types: None,
            metadata: m,
            data: serde_json::json!({}),
        };
        let stored = |m: ObjectMeta| {
            SeenConfigMap::from(ConfigMap {
                metadata: m,
                ..Default::default()
            })
        };
        assert!(owned_by_card(&route(meta(managed.clone(), "u-1")), &card));
        assert!(!owned_by_card(&route(meta(managed.clone(), "u-2")), &card));
        assert!(!owned_by_card(
            &route(meta(serde_json::json!({}), "u-1")),
            &card
        ));
        assert!(owned_by_card(
            &stored(meta(managed.clone(), "u-1")).seen,
            &card
        ));
        assert!(!owned_by_card(&stored(meta(managed, "u-2")).seen, &card));
        assert!(!owned_by_card(
            &stored(meta(serde_json::json!({}), "u-1")).seen,
            &card
        ));
    }
}
