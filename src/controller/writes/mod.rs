//! How the operator writes the objects it owns, whatever the kind: server-side apply with
//! field manager `agentcard-operator` (forced); a plain create when nothing is known under the
//! name, so a name taken meanwhile fails instead of being merged into; never over an object
//! that is not its own (`NameInUse`); no write when the object already holds what is wanted,
//! or when the same write is on its way into the store ([`WriteMemo`]); and a merge patch first
//! for what it set and no longer wants (a create co-owns every field it wrote).

pub mod seen;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource};

use crate::contract::{LABEL_MANAGED_BY, MANAGER};
use crate::controller::error::Error;
use crate::controller::routes::routing::httproute_resource;
use crate::controller::writes::seen::WriteMemo;
use crate::store::{digest, MetaView, OptionalSpec, SeenConfigMap, SeenIngress};

pub(crate) fn ssa() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

/// Whether the object carries the operator's managed-by label.
pub fn managed(meta: &dyn MetaView) -> bool {
    meta.label(LABEL_MANAGED_BY) == Some(MANAGER)
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

/// The merge patch removing what the operator set on ConfigMap `have` and `want` lacks (its
/// annotations; data keys are replaced whole by the apply).
pub fn configmap_removals(have: &SeenConfigMap, want: &ConfigMap) -> Option<serde_json::Value> {
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

/// Whether ConfigMap `have` already holds everything `want` sets (no write needed).
pub fn configmap_current(have: Option<&SeenConfigMap>, want: &ConfigMap) -> bool {
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

/// What [`delete_at_version`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted.
    Yes,
    /// Not there (any more).
    Absent,
    /// Changed since `version`: left as it is.
    Changed,
}

/// Delete `name` only as it was at resourceVersion `version` (what the caller judged it by):
/// an object rewritten since is someone's newer write and stays.
pub async fn delete_at_version<K>(
    api: &Api<K>,
    name: &str,
    version: Option<String>,
) -> Result<Deleted, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: version,
            uid: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(Deleted::Yes),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deleted::Absent),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Deleted::Changed),
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

/// Write `status` of object `name` by server-side apply (field manager `agentcard-operator`,
/// forced): fields the operator no longer sets are removed, so fixed warnings go away.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &kube::api::PatchParams::apply(MANAGER).force(),
        &kube::api::Patch::Apply(&patch),
    )
    .await?;
    Ok(())
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
}
