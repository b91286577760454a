//! Build: what routes a directory's whole host to the operator's Service, by the operator's
//! routing setting (pure, unit tested), and how the operator tells those objects are the
//! directory's.

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::contract::{hashed_name, ANN_DIRECTORY, LABEL_MANAGED_BY, MANAGER};
use crate::controller::conditions::ROUTED;
use crate::controller::config::Settings;
use crate::controller::error::Error;
use crate::controller::routes::routing::{
    ingress_object, IngressTarget, RouteKind, MAX_INGRESS_NAME,
};
use crate::controller::writes::managed;
use crate::crd::AgentDirectory;
use crate::store::MetaView;

/// Name of a directory's Ingress in the operator's namespace.
pub fn ingress_name(directory: &str) -> String {
    hashed_name(
        &format!("agentdirectory-{directory}"),
        directory,
        MAX_INGRESS_NAME,
    )
}

/// What routes a directory's host to the operator's Service, by the operator's routing
/// setting: one Ingress, one HTTPRoute, or nothing (the platform routes by itself).
#[derive(Debug, Default)]
pub struct DirectoryRoutes {
    /// With Ingress routing.
    pub ingress: Option<Ingress>,
    /// With HTTPRoute routing.
    pub route: Option<DynamicObject>,
}

/// Build what routes the whole host of `dir` (pure): both kinds carry the directory's name in
/// [`ANN_DIRECTORY`] and live in the operator's namespace, owned by the directory.
pub fn build(dir: &AgentDirectory, settings: &Settings) -> Result<DirectoryRoutes, Error> {
    let name = dir.name_any();
    let publish = &dir.spec.publish;
    let host = publish.host.to_ascii_lowercase();
    let object_name = ingress_name(&name);
    let labels = json!({LABEL_MANAGED_BY: MANAGER});
    let owner: Vec<_> = dir.controller_owner_ref(&()).into_iter().collect();
    let mut routes = DirectoryRoutes::default();
    match settings.routing.kind {
        RouteKind::Ingress => {
            routes.ingress = Some(ingress_object(
                IngressTarget {
                    name: &object_name,
                    namespace: &settings.operator_namespace,
                    labels: &labels,
                    marker: (ANN_DIRECTORY, &name),
                    owner: &owner,
                    tls_secret: settings.ingress.tls_secret(&host),
                    host: &host,
                    settings: &publish.ingress,
                },
                &settings.ingress,
                vec![json!({
                    "path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": settings.service_name, "port": {"name": settings.service_port_name}}},
                })],
            )?);
        }
        RouteKind::HttpRoute => {
            let meta = json!({"name": object_name, "namespace": settings.operator_namespace,
                "labels": labels, "annotations": {ANN_DIRECTORY: name}, "ownerReferences": owner});
            routes.route = Some(
                settings
                    .routing
                    .route(
                        meta,
                        &host,
                        None,
                        &[("PathPrefix", "/".to_string())],
                        &settings.service_name,
                        settings.routing.service_port,
                    )
                    .map_err(|e| Error::Internal(format!("HTTPRoute: {e}")))?,
            );
        }
        RouteKind::None => {}
    }
    Ok(routes)
}

/// Whether HTTPRoutes routed the directory when its status was written (its `Routed`
/// condition), so a switch to another routing kind removes its route.
pub fn routed_by_route(dir: &AgentDirectory) -> bool {
    dir.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == ROUTED))
}

/// Whether an object in the operator's namespace was written for `dir`.
pub fn written_for(meta: &dyn MetaView, dir: &AgentDirectory) -> bool {
    managed(meta) && meta.annotation(ANN_DIRECTORY) == Some(dir.name_any().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::routes::policy::IngressPolicy;

    #[test]
    fn the_ingress_routes_the_whole_host_to_the_operator() {
        let dir: AgentDirectory = serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
            "metadata": {"name": "all", "uid": "d-1"},
            "spec": {"publish": {"host": "Agents.example.com", "pathPrefix": "/registry",
                "ingress": {"annotations": {"cert-manager.io/cluster-issuer": "le"}}}}
        }))
        .unwrap();
        let settings = Settings {
            operator_namespace: "ops".into(),
            service_name: "svc".into(),
            service_port_name: "http".into(),
            ingress: IngressPolicy::default(),
            routing: crate::controller::routes::routing::Routing::default(),
            retired_retention_seconds: 60,
        };
        let ing = serde_json::to_value(build(&dir, &settings).unwrap().ingress.unwrap()).unwrap();
        assert_eq!(ing["metadata"]["namespace"], "ops");
        assert!(ing["metadata"]["name"].as_str().unwrap().len() <= MAX_INGRESS_NAME);
        assert_eq!(ing["metadata"]["annotations"][ANN_DIRECTORY], "all");
        assert_eq!(ing["metadata"]["ownerReferences"][0]["uid"], "d-1");
        let rule = &ing["spec"]["rules"][0];
        assert_eq!(rule["host"], "agents.example.com");
        assert_eq!(rule["http"]["paths"][0]["path"], "/");
        assert_eq!(rule["http"]["paths"][0]["pathType"], "Prefix");
        assert_eq!(
            ing["spec"]["tls"][0]["secretName"],
            "agentcard-tls-agents.example.com"
        );
    }
}
