//! Apply: write what build produced (server-side apply, field manager `agentcard-operator`,
//! forced), skipping objects that already hold exactly that, and remove what the card no
//! longer asks for. The ConfigMap goes first: the Ingress then routes to bytes that exist.
//!
//! The operator never adopts an object it did not create: an object is ours when it carries
//! the managed-by label and names this card (its controlling owner in the card's namespace, the
//! card annotation in the operator's namespace, where tenants cannot write). A missing object is
//! created with a plain create, so a name taken in the meantime fails with a conflict instead of
//! being merged into; anything else with the name makes the card report `NameInUse`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};

use super::build::{backend_ingress_name, card_key, configmap_name, ingress_name, Built, Settings};
use crate::contract::{ANN_CARD, LABEL_MANAGED_BY, MANAGER};
use crate::controller::routing::{httproute_resource, RouteKind};
use crate::controller::seen::{MetaView, OptionalSpec, SeenConfigMap, SeenIngress};
use crate::controller::watches::{digest, Unseen, WriteMemo};
use crate::controller::Error;
use crate::crd::AgentCard;

/// What exists now, as last read (`None`: absent, or not visible to the operator's watches).
#[derive(Default)]
pub struct Existing<'a> {
    /// The card's ConfigMap.
    pub configmap: Option<&'a SeenConfigMap>,
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

fn ssa() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

/// Whether the object carries the operator's managed-by label.
pub fn managed(meta: &dyn MetaView) -> bool {
    meta.label(LABEL_MANAGED_BY) == Some(MANAGER)
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

/// Annotations the operator set on `have` that `want` no longer carries.
fn stale_annotations(have: &dyn MetaView, want: &ObjectMeta) -> BTreeSet<String> {
    have.operator_annotations()
        .into_iter()
        .filter(|k| want.annotations.as_ref().is_none_or(|a| !a.contains_key(k)))
        .collect()
}

/// Whether `have` already carries every label and annotation of `want` with the same value,
/// no annotation we applied before and no longer want, and `want`'s owners.
fn meta_holds(have: &dyn MetaView, want: &ObjectMeta) -> bool {
    fn entries(map: &Option<BTreeMap<String, String>>) -> impl Iterator<Item = (&str, &str)> {
        map.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    let owners = have.owners();
    entries(&want.labels).all(|(k, v)| have.label(k) == Some(v))
        && entries(&want.annotations).all(|(k, v)| have.annotation(k) == Some(v))
        && stale_annotations(have, want).is_empty()
        && want
            .owner_references
            .iter()
            .flatten()
            .all(|o| owners.iter().any(|h| h.uid == o.uid))
}

/// A merge patch removing what the operator set on `have` and `want` no longer has: stale
/// annotations, and for Ingresses the optional spec fields. Needed because a create co-owns
/// every field it wrote, so a later apply that leaves a field out does not remove it.
fn removals(
    have: &dyn MetaView,
    want: &ObjectMeta,
    spec: serde_json::Map<String, serde_json::Value>,
) -> Option<serde_json::Value> {
    let nulls: serde_json::Map<String, serde_json::Value> = stale_annotations(have, want)
        .into_iter()
        .map(|k| (k, serde_json::Value::Null))
        .collect();
    let mut patch = serde_json::Map::new();
    if !nulls.is_empty() {
        patch.insert("metadata".into(), serde_json::json!({"annotations": nulls}));
    }
    if !spec.is_empty() {
        patch.insert("spec".into(), serde_json::Value::Object(spec));
    }
    (!patch.is_empty()).then_some(serde_json::Value::Object(patch))
}

fn configmap_removals(have: &SeenConfigMap, want: &ConfigMap) -> Option<serde_json::Value> {
    removals(&have.seen, &want.metadata, serde_json::Map::new())
}

/// The merge patch removing what the operator set on Ingress `have` and `want` lacks.
pub fn ingress_removals(have: &SeenIngress, want: &Ingress) -> Option<serde_json::Value> {
    let (h, w) = (have.optional, OptionalSpec::of(want.spec.as_ref()));
    let mut spec = serde_json::Map::new();
    if h.tls && !w.tls {
        spec.insert("tls".into(), serde_json::Value::Null);
    }
    if h.class && !w.class {
        spec.insert("ingressClassName".into(), serde_json::Value::Null);
    }
    if h.default_backend && !w.default_backend {
        spec.insert("defaultBackend".into(), serde_json::Value::Null);
    }
    removals(&have.seen, &want.metadata, spec)
}

fn configmap_current(have: Option<&SeenConfigMap>, want: &ConfigMap) -> bool {
    have.is_some_and(|h| h.holds_data(&want.data) && meta_holds(&h.seen, &want.metadata))
}

/// Whether Ingress `have` already holds `want`.
pub fn ingress_current(have: Option<&SeenIngress>, want: &Ingress) -> bool {
    have.is_some_and(|h| h.holds_spec(&want.spec) && meta_holds(&h.seen, &want.metadata))
}

/// Delete `name`, a 404 being success.
pub async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn name_in_use<K: Resource>(obj: &K, dt: &K::DynamicType) -> Error {
    Error::NameInUse {
        kind: K::kind(dt).into_owned(),
        namespace: obj.meta().namespace.clone().unwrap_or_default(),
        name: obj.meta().name.clone().unwrap_or_default(),
    }
}

/// Create `want` with a plain create (`None`: created). When the name is taken, what holds it
/// (ours behind a watch that has not caught up, or someone else's) is returned instead.
async fn create_or_find<K>(api: &Api<K>, want: &K, name: &str) -> Result<Option<K>, Error>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let create = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match api.create(&create, want).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(name).await? {
            Some(found) => Ok(Some(found)),
            None => Err(Error::Internal(format!(
                "{name}: conflicting create, then not found"
            ))),
        },
        Err(e) => Err(e.into()),
    }
}

/// How one kind of object is compared and cleaned.
pub struct Rules<Ours, Current, Removals> {
    /// Whether an existing object is ours to write.
    pub ours: Ours,
    /// Whether an existing object already holds what we want.
    pub current: Current,
    /// The merge patch removing what we set and no longer want.
    pub removals: Removals,
}

/// Write `want` through `api`: a plain create when nothing is known under the name (so a name
/// taken meanwhile fails instead of being merged into), server-side apply when `have` is ours
/// and differs (what we set and no longer want is removed first, see [`removals`]),
/// `NameInUse` when the name belongs to someone else.
///
/// `memo` skips a write that repeats the operator's last one while the store (`have`) has not
/// caught up with it yet (see [`WriteMemo`]). `true` when something was written.
///
/// `have` is the object as the store keeps it (`H`: the object itself, or what the store keeps
/// of it, such as a [`SeenIngress`]); `ours` judges its metadata.
pub async fn write<K, H, O, C, R>(
    api: &Api<K>,
    want: &K,
    have: Option<&H>,
    rules: Rules<O, C, R>,
    dt: &K::DynamicType,
    memo: &WriteMemo,
) -> Result<bool, Error>
where
    O: Fn(&dyn MetaView) -> bool,
    C: Fn(Option<&H>) -> bool,
    R: Fn(&H) -> Option<serde_json::Value>,
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    H: Resource + MetaView + From<K>,
{
    let name = want.meta().name.clone().unwrap_or_default();
    let ns = want.meta().namespace.clone().unwrap_or_default();
    let kind = K::kind(dt);
    let version = have.and_then(|h| h.meta().resource_version.clone());
    let wanted = digest(want);
    if memo.pending(&kind, &ns, &name, version.as_deref(), wanted) {
        return Ok(false);
    }
    let found: H;
    let existing = match have {
        Some(h) => h,
        None => match create_or_find(api, want, &name).await? {
            None => {
                tracing::debug!(%kind, %ns, %name, "created");
                memo.remember(&kind, &ns, &name, None, wanted);
                return Ok(true);
            }
            Some(f) => {
                tracing::debug!(%kind, %ns, %name, "the name was taken: the watch had not shown it");
                found = H::from(f);
                &found
            }
        },
    };
    if !(rules.ours)(existing) {
        return Err(name_in_use(want, dt));
    }
    if (rules.current)(Some(existing)) {
        return Ok(false);
    }
    if let Some(patch) = (rules.removals)(existing) {
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        api.patch(&name, &params, &Patch::Merge(&patch)).await?;
    }
    api.patch(&name, &ssa(), &Patch::Apply(want)).await?;
    tracing::debug!(%kind, %ns, %name, ?version, "applied over a version that differed");
    memo.remember(&kind, &ns, &name, version.as_deref(), wanted);
    Ok(true)
}

/// Whether `have` holds every field `want` sets, with the same value (fields the API server
/// defaults, such as a backendRef's `weight`, are not compared).
fn json_holds(have: &serde_json::Value, want: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| h.get(k).is_some_and(|hv| json_holds(hv, wv))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| json_holds(hv, wv))
        }
        (h, w) => h == w,
    }
}

/// Write HTTPRoute `want` through [`write`]: its spec is current when it holds every field we
/// set (the API server defaults others). `true` when something was written.
pub async fn write_route(
    client: &Client,
    want: &DynamicObject,
    have: Option<&DynamicObject>,
    ours: impl Fn(&dyn MetaView) -> bool,
    memo: &WriteMemo,
) -> Result<bool, Error> {
    let ar = httproute_resource();
    let ns = want.metadata.namespace.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    write(
        &api,
        want,
        have,
        Rules {
            ours,
            current: |h: Option<&DynamicObject>| {
                h.is_some_and(|h| {
                    json_holds(&h.data["spec"], &want.data["spec"]) && meta_holds(h, &want.metadata)
                })
            },
            removals: |h: &DynamicObject| removals(h, &want.metadata, serde_json::Map::new()),
        },
        &ar,
        memo,
    )
    .await
}

/// Delete HTTPRoute `namespace/name` when it is ours (`ours` judges what a GET returns).
pub async fn delete_route_if_ours(
    client: &Client,
    namespace: &str,
    name: &str,
    ours: impl Fn(&dyn MetaView) -> bool,
) -> Result<(), Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &httproute_resource());
    match api.get_opt(name).await {
        Ok(Some(r)) if ours(&r) => delete_if_present(&api, name).await,
        Ok(_) => Ok(()),
        // Without the Gateway API installed there is nothing to delete.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        // Installed without HTTPRoute rights (routing switched away from HTTPRoute): the routes
        // are the platform's to remove now; reconciles and deletions go on.
        Err(kube::Error::Api(s)) if s.code == 403 => {
            tracing::warn!(
                namespace,
                name,
                "no rights on HTTPRoutes: the old route stays until removed by hand"
            );
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether the card's status says HTTPRoutes route it.
fn routed_by_routes(card: &AgentCard) -> bool {
    card.status.as_ref().and_then(|s| s.route_kind.as_deref())
        == Some(RouteKind::HttpRoute.as_str())
}

/// Write the ConfigMap, the Ingress and the backend Ingress (or delete a stale one).
pub async fn apply(
    client: &Client,
    built: &Built,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
    memo: &WriteMemo,
    configmaps: &Unseen<SeenConfigMap>,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm_version = existing.configmap.and_then(|c| c.resource_version());
    let written = write(
        &cms,
        &built.configmap,
        existing.configmap,
        Rules {
            ours: |m: &dyn MetaView| owned_by_card(m, card),
            current: |h: Option<&SeenConfigMap>| configmap_current(h, &built.configmap),
            removals: |h: &SeenConfigMap| configmap_removals(h, &built.configmap),
        },
        &(),
        memo,
    )
    .await?;
    // Until the watch shows it, later reconciles read this ConfigMap as written (its
    // publication time included), so a retry after a later step failed writes nothing new.
    // Nothing is held when nothing was written: the store has it already (or the same write is
    // on its way, and held from when it was made).
    if written {
        configmaps.remember(
            "ConfigMap",
            &ns,
            &configmap_name(card),
            cm_version.as_deref(),
            SeenConfigMap::from(built.configmap.clone()),
        );
    }
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
        write_route(
            client,
            route,
            existing.route.as_deref(),
            |m| written_for_card(m, card),
            memo,
        )
        .await?;
    }
    let local: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    match &built.backend_ingress {
        Some(b) => {
            write(
                &local,
                b,
                existing.backend.as_deref(),
                Rules {
                    ours: |m: &dyn MetaView| owned_by_card(m, card),
                    current: |h: Option<&SeenIngress>| ingress_current(h, b),
                    removals: |h: &SeenIngress| ingress_removals(h, b),
                },
                &(),
                memo,
            )
            .await?;
        }
        None => {
            if existing
                .backend
                .as_deref()
                .is_some_and(|b| owned_by_card(&b.seen, card))
            {
                delete_if_present(&local, &backend_ingress_name(card)).await?
            }
        }
    }
    match &built.backend_route {
        Some(r) => {
            write_route(
                client,
                r,
                existing.backend_route.as_deref(),
                |m| owned_by_card(m, card),
                memo,
            )
            .await?;
        }
        None if existing.backend_route.is_some() => {
            delete_route_if_ours(client, &ns, &backend_ingress_name(card), |m| {
                owned_by_card(m, card)
            })
            .await?
        }
        None => {}
    }
    // Switching what routes the card: the old routes go once the new ones carry traffic (an
    // Ingress replaced by HTTPRoutes waits until the Gateways accepted them).
    let replaced = built.route.is_none() || existing.routes_accepted;
    if built.ingress.is_none()
        && replaced
        && existing
            .ingress
            .as_deref()
            .is_some_and(|i| written_for_card(&i.seen, card))
    {
        delete_if_present(&ingresses, &ingress_name(&ns, &card.name_any())).await?;
    }
    if built.route.is_none() && (routed_by_routes(card) || existing.route.is_some()) {
        delete_route_if_ours(
            client,
            &settings.operator_namespace,
            &ingress_name(&ns, &card.name_any()),
            |m| written_for_card(m, card),
        )
        .await?;
        delete_route_if_ours(client, &ns, &backend_ingress_name(card), |m| {
            owned_by_card(m, card)
        })
        .await?;
    }
    Ok(())
}

/// Take the card off the air: delete its ConfigMap and both Ingresses (and HTTPRoutes), each
/// only when it is ours. Used when the card loses (or never gets) its claim, and when it is
/// deleted (then without the ConfigMap: garbage collection takes it, and nothing serves it).
pub async fn unpublish(
    client: &Client,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
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
    cleanup(client, card, settings, existing.ingress.as_deref(), routes).await
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(data: &str, ann: &[(&str, &str)]) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "annotations": ann.iter().cloned().collect::<BTreeMap<_, _>>()},
            "data": {"agent-card.json": data},
        }))
        .unwrap()
    }

    /// `cm` as the store keeps it.
    fn seen(cm: &ConfigMap) -> SeenConfigMap {
        SeenConfigMap::from(cm.clone())
    }

    #[test]
    fn unchanged_objects_are_not_written_again() {
        let want = cm("a", &[("k", "v")]);
        assert!(configmap_current(
            Some(&seen(&cm("a", &[("k", "v"), ("other", "kept")]))),
            &want
        ));
        assert!(!configmap_current(
            Some(&seen(&cm("b", &[("k", "v")]))),
            &want
        ));
        assert!(!configmap_current(
            Some(&seen(&cm("a", &[("k", "w")]))),
            &want
        ));
        assert!(!configmap_current(None, &want));
    }

    #[test]
    fn an_annotation_we_applied_and_no_longer_want_makes_the_object_stale() {
        let mut have = cm("a", &[("k", "v"), ("gone", "x")]);
        let want = cm("a", &[("k", "v")]);
        // Without a record of ours, extra annotations belong to someone else.
        assert!(configmap_current(Some(&seen(&have)), &want));
        have.metadata.managed_fields = Some(vec![serde_json::from_value(serde_json::json!({
            "manager": MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {"f:k": {}, "f:gone": {}}}}
        }))
        .unwrap()]);
        assert!(!configmap_current(Some(&seen(&have)), &want));
        assert_eq!(
            configmap_removals(&seen(&have), &want),
            Some(serde_json::json!({"metadata": {"annotations": {"gone": null}}}))
        );
    }

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
