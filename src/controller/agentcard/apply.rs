//! Apply: write what build produced (server-side apply, field manager `agentcard-operator`,
//! forced), skipping objects that already hold exactly that, and remove what the card no
//! longer asks for. The ConfigMap goes first: the Ingress then routes to bytes that exist.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::build::{backend_ingress_name, ingress_name, Built, Settings};
use crate::contract::MANAGER;
use crate::controller::Error;
use crate::crd::AgentCard;

/// What exists now, as last read (`None`: absent).
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

/// Whether `have` already carries every label and annotation of `want` with the same value.
fn meta_holds(have: &kube::api::ObjectMeta, want: &kube::api::ObjectMeta) -> bool {
    let holds = |h: &Option<BTreeMap<String, String>>, w: &Option<BTreeMap<String, String>>| {
        w.iter()
            .flatten()
            .all(|(k, v)| h.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    holds(&have.labels, &want.labels)
        && holds(&have.annotations, &want.annotations)
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

/// Write the ConfigMap, the Ingress and the backend Ingress (or delete a stale one).
pub async fn apply(
    client: &Client,
    built: &Built,
    card: &AgentCard,
    settings: &Settings,
    existing: &Existing<'_>,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    if !configmap_current(existing.configmap, &built.configmap) {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        cms.patch(
            &built.configmap.name_any(),
            &ssa(),
            &Patch::Apply(&built.configmap),
        )
        .await?;
    }
    if !ingress_current(existing.ingress.as_deref(), &built.ingress) {
        let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &settings.operator_namespace);
        ingresses
            .patch(
                &built.ingress.name_any(),
                &ssa(),
                &Patch::Apply(&built.ingress),
            )
            .await?;
    }
    let local: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    match &built.backend_ingress {
        Some(b) if !ingress_current(existing.backend.as_deref(), b) => {
            local.patch(&b.name_any(), &ssa(), &Patch::Apply(b)).await?;
        }
        Some(_) => {}
        None if existing.backend.is_some() => {
            delete_if_present(&local, &backend_ingress_name(card)).await?
        }
        None => {}
    }
    Ok(())
}

/// Remove what garbage collection cannot: the Ingress in the operator's namespace.
pub async fn cleanup(client: &Client, card: &AgentCard, settings: &Settings) -> Result<(), Error> {
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
}
