//! Apply: write what build produced (server-side apply, field manager `agentcard-operator`,
//! forced), and remove what the card no longer asks for. The ConfigMap goes first: the
//! Ingress then routes to bytes that exist.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::build::{backend_ingress_name, ingress_name, Built, Settings};
use crate::contract::MANAGER;
use crate::controller::Error;
use crate::crd::AgentCard;

fn ssa() -> PatchParams {
    PatchParams::apply(MANAGER).force()
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
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm_name = built.configmap.name_any();
    cms.patch(&cm_name, &ssa(), &Patch::Apply(&built.configmap))
        .await?;

    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &settings.operator_namespace);
    ingresses
        .patch(
            &built.ingress.name_any(),
            &ssa(),
            &Patch::Apply(&built.ingress),
        )
        .await?;

    let local: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    match &built.backend_ingress {
        Some(b) => {
            local.patch(&b.name_any(), &ssa(), &Patch::Apply(b)).await?;
        }
        None => delete_if_present(&local, &backend_ingress_name(card)).await?,
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
