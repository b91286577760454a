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
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};

use super::build::{backend_ingress_name, card_key, ingress_name, Built, Settings};
use crate::contract::{ANN_CARD, LABEL_MANAGED_BY, MANAGER};
use crate::controller::Error;
use crate::crd::AgentCard;

/// What exists now, as last read (`None`: absent, or not visible to the operator's watches).
#[derive(Default)]
pub struct Existing<'a> {
    /// The card's ConfigMap.
    pub configmap: Option<&'a ConfigMap>,
    /// The Ingress in the operator's namespace.
    pub ingress: Option<Arc<Ingress>>,
    /// The backend Ingress in the card's namespace.
    pub backend: Option<Arc<Ingress>>,
}

fn ssa() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

fn managed(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .is_some_and(|v| v == MANAGER)
}

/// Whether an object in the card's namespace is the card's own: managed by us and controlled
/// by the card (by uid, so a re-created card with the same name does not inherit it either).
pub fn owned_by_card(meta: &ObjectMeta, card: &AgentCard) -> bool {
    let Some(uid) = card.meta().uid.as_deref() else {
        return false;
    };
    managed(meta)
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Whether an object in the operator's namespace was written for `card`.
pub fn written_for_card(meta: &ObjectMeta, card: &AgentCard) -> bool {
    managed(meta)
        && meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_CARD))
            .is_some_and(|c| *c == card_key(card))
}

/// Keys under `metadata.<field>` that the operator's own server-side applies set, read from
/// `managedFields`; `None` when the object has no record of ours.
fn applied_keys(meta: &ObjectMeta, field: &str) -> Option<BTreeSet<String>> {
    let entry = meta
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.manager.as_deref() == Some(MANAGER) && m.operation.as_deref() == Some("Apply"))?;
    let fields = entry.fields_v1.as_ref()?;
    let keys = fields.0.get("f:metadata")?.get(format!("f:{field}"))?;
    Some(
        keys.as_object()?
            .keys()
            .filter_map(|k| k.strip_prefix("f:"))
            .map(str::to_string)
            .collect(),
    )
}

/// Whether `have` already carries every label and annotation of `want` with the same value,
/// no annotation we applied before and no longer want, and `want`'s owners.
fn meta_holds(have: &ObjectMeta, want: &ObjectMeta) -> bool {
    let holds = |h: &Option<BTreeMap<String, String>>, w: &Option<BTreeMap<String, String>>| {
        w.iter()
            .flatten()
            .all(|(k, v)| h.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let wanted: BTreeSet<String> = want.annotations.iter().flatten().map(|(k, _)| k.clone()).collect();
    let no_stale = applied_keys(have, "annotations").is_none_or(|applied| applied.is_subset(&wanted));
    holds(&have.labels, &want.labels)
        && holds(&have.annotations, &want.annotations)
        && no_stale
        && want.owner_references.iter().flatten().all(|o| {
            have.owner_references
                .iter()
                .flatten()
                .any(|h| h.uid == o.uid)
        })
}

fn configmap_current(have: Option<&ConfigMap>, want: &ConfigMap) -> bool {
    have.is_some_and(|h| h.data == want.data && meta_holds(&h.metadata, &want.metadata))
}

fn ingress_current(have: Option<&Ingress>, want: &Ingress) -> bool {
    have.is_some_and(|h| h.spec == want.spec && meta_holds(&h.metadata, &want.metadata))
}

async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn name_in_use<K: Resource<DynamicType = ()>>(obj: &K) -> Error {
    Error::NameInUse {
        kind: K::kind(&()).into_owned(),
        namespace: obj.meta().namespace.clone().unwrap_or_default(),
        name: obj.meta().name.clone().unwrap_or_default(),
    }
}

/// Write `want` through `api`: server-side apply when `have` is ours and differs, a plain
/// create when nothing is known under the name (then an apply, when `reapply`, so later applies
/// own every field and can remove them), `NameInUse` when the name belongs to someone else.
async fn write<K>(
    api: &Api<K>,
    want: &K,
    have: Option<&K>,
    ours: impl Fn(&ObjectMeta) -> bool,
    current: impl Fn(Option<&K>) -> bool,
    reapply: bool,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = want.meta().name.clone().unwrap_or_default();
    let mut have = have.cloned();
    if have.is_none() {
        let create = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match api.create(&create, want).await {
            Ok(_) if !reapply => return Ok(()),
            Ok(created) => have = Some(created),
            // Taken: ours (a watch that has not caught up) or someone else's.
            Err(kube::Error::Api(s)) if s.code == 409 => have = api.get_opt(&name).await?,
            Err(e) => return Err(e.into()),
        }
        let Some(existing) = &have else {
            return Err(Error::Internal(format!("{name}: conflicting create, then not found")));
        };
        if !ours(existing.meta()) {
            return Err(name_in_use(want));
        }
        if !reapply && current(have.as_ref()) {
            return Ok(());
        }
    } else if let Some(existing) = &have {
        if !ours(existing.meta()) {
            return Err(name_in_use(want));
        }
        if current(Some(existing)) {
            return Ok(());
        }
    }
    api.patch(&name, &ssa(), &Patch::Apply(want)).await?;
    Ok(())
}

/// Write the ConfigMap, the Ingress and the backend Ingress (or delete a stale one).
pub async fn apply(
    client: &Client,
    built: &Built,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    write(
        &cms,
        &built.configmap,
        existing.configmap,
        |m| owned_by_card(m, card),
        |h| configmap_current(h, &built.configmap),
        false,
    )
    .await?;
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &settings.operator_namespace);
    write(
        &ingresses,
        &built.ingress,
        existing.ingress.as_deref(),
        |m| written_for_card(m, card),
        |h| ingress_current(h, &built.ingress),
        true,
    )
    .await?;
    let local: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    match &built.backend_ingress {
        Some(b) => {
            write(
                &local,
                b,
                existing.backend.as_deref(),
                |m| owned_by_card(m, card),
                |h| ingress_current(h, b),
                true,
            )
            .await?
        }
        None => {
            if existing.backend.as_deref().is_some_and(|b| owned_by_card(b.meta(), card)) {
                delete_if_present(&local, &backend_ingress_name(card)).await?
            }
        }
    }
    Ok(())
}

/// Take the card off the air: delete its ConfigMap and both Ingresses, each only when it is
/// ours. Used when the card loses (or never gets) its claim.
pub async fn unpublish(
    client: &Client,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    if let Some(cm) = existing.configmap.filter(|cm| owned_by_card(&cm.metadata, card)) {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        delete_if_present(&cms, &cm.name_any()).await?;
    }
    if existing.backend.as_deref().is_some_and(|b| owned_by_card(b.meta(), card)) {
        let local: Api<Ingress> = Api::namespaced(client.clone(), &ns);
        delete_if_present(&local, &backend_ingress_name(card)).await?;
    }
    cleanup(client, card, settings, existing.ingress.as_deref()).await
}

/// Remove what garbage collection cannot: the Ingress in the operator's namespace (when it is
/// the one written for this card).
pub async fn cleanup(
    client: &Client,
    card: &AgentCard,
    settings: &Settings,
    ingress: Option<&Ingress>,
) -> Result<(), Error> {
    if !ingress.is_some_and(|i| written_for_card(i.meta(), card)) {
        return Ok(());
    }
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &settings.operator_namespace);
    delete_if_present(
        &ingresses,
        &ingress_name(&card.namespace().unwrap_or_default(), &card.name_any()),
    )
    .await
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

    #[test]
    fn unchanged_objects_are_not_written_again() {
        let want = cm("a", &[("k", "v")]);
        assert!(configmap_current(
            Some(&cm("a", &[("k", "v"), ("other", "kept")])),
            &want
        ));
        assert!(!configmap_current(Some(&cm("b", &[("k", "v")])), &want));
        assert!(!configmap_current(Some(&cm("a", &[("k", "w")])), &want));
        assert!(!configmap_current(None, &want));
    }

    #[test]
    fn an_annotation_we_applied_and_no_longer_want_makes_the_object_stale() {
        let mut have = cm("a", &[("k", "v"), ("gone", "x")]);
        let want = cm("a", &[("k", "v")]);
        // Without a record of ours, extra annotations belong to someone else.
        assert!(configmap_current(Some(&have), &want));
        have.metadata.managed_fields = Some(vec![serde_json::from_value(serde_json::json!({
            "manager": MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {"f:k": {}, "f:gone": {}}}}
        }))
        .unwrap()]);
        assert!(!configmap_current(Some(&have), &want));
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
        assert!(owned_by_card(&meta(managed.clone(), "u-1"), &card));
        assert!(!owned_by_card(&meta(managed, "u-2"), &card));
        assert!(!owned_by_card(&meta(serde_json::json!({}), "u-1"), &card));
    }
}
