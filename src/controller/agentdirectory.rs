//! The AgentDirectory reconciler: validate → claim the whole host → build (pure) → apply →
//! status.
//!
//! A directory holds its whole host in the claims table (no card of any namespace may publish
//! beneath it, and no second directory may share it; whoever became Ready first keeps it). The
//! lease holder writes what routes the whole host to the operator's Service in the operator's
//! namespace (an Ingress or an HTTPRoute, by the routing setting; nothing with `None`), and the
//! status every replica routes by (`status.served`) with the number
//! of cards listed, counted by the same selection rule the servers answer with
//! ([`crate::directory::select`]). Card and Namespace changes re-run it, so the count follows.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::agentcard::apply::{self, Rules};
use super::agentcard::build::{ingress_object, IngressTarget, Settings, MAX_INGRESS_NAME};
use super::agentcard::status::{condition, condition_with, READY, ROUTED};
use super::claims::Claim;
use super::routing::{self, RouteKind};
use super::seen::{MetaView, SeenIngress};
use super::{Context, Error};
use crate::contract::{hashed_name, normalize_prefix, LABEL_MANAGED_BY, MANAGER};
use crate::crd::agentdirectory::DirectoryRoute;
use crate::crd::{AgentDirectory, AgentDirectoryStatus};
use crate::directory::select;

/// Finalizer releasing the directory's host and removing its Ingress.
pub const FINALIZER: &str = "agentcard.dev/directory-cleanup";
/// Annotation on the directory's Ingress naming the AgentDirectory.
pub const ANN_DIRECTORY: &str = "agentcard.dev/directory";

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
fn routed_by_route(dir: &AgentDirectory) -> bool {
    dir.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == ROUTED))
}

fn written_for(meta: &dyn MetaView, dir: &AgentDirectory) -> bool {
    apply::managed(meta) && meta.annotation(ANN_DIRECTORY) == Some(dir.name_any().as_str())
}

/// Cards the directory lists now, by the lease holder's stores.
fn listed_count(dir: &AgentDirectory, ctx: &Context) -> i64 {
    let count = ctx
        .cards
        .state()
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.url.is_some() && s.content_hash.is_some() && s.served.is_some())
        })
        .filter(|c| {
            let ns = c.namespace().unwrap_or_default();
            let ns_labels = ctx
                .namespaces
                .get(&kube::runtime::reflector::ObjectRef::new(&ns))
                .map(|n| n.labels().clone())
                .unwrap_or_default();
            select::listed(&dir.spec, &ns_labels, c.labels())
        })
        .count();
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Reconcile one AgentDirectory.
pub async fn reconcile(dir: Arc<AgentDirectory>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.load_claims().await;
    let api: Api<AgentDirectory> = Api::all(ctx.client.clone());
    finalizer(&api, FINALIZER, dir, |event| async {
        match event {
            FinalizerEvent::Apply(dir) => apply_directory(dir, ctx.clone()).await,
            FinalizerEvent::Cleanup(dir) => {
                remove_routes(&ctx, &dir).await?;
                ctx.reset_backoff_for(&backoff_key(&dir));
                let freed = ctx.retain_claims_of(&dir.uid().unwrap_or_default(), None);
                ctx.recheck_hosts_of(&freed, dir.uid().as_deref());
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// Delete the directory's Ingress and HTTPRoute, each when it is ours.
async fn remove_routes(ctx: &Context, dir: &AgentDirectory) -> Result<(), Error> {
    let name = ingress_name(&dir.name_any());
    let opns = &ctx.settings.operator_namespace;
    if ctx.settings.routing.kind == RouteKind::HttpRoute || routed_by_route(dir) {
        apply::delete_route_if_ours(&ctx.client, opns, &name, |m| written_for(m, dir)).await?;
    }
    if ctx
        .ingress(opns, &name)
        .is_some_and(|i| written_for(&i.seen, dir))
    {
        let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), opns);
        apply::delete_if_present(&api, &name).await?;
    }
    Ok(())
}

async fn publish(dir: &AgentDirectory, ctx: &Context) -> Result<DirectoryRoute, Error> {
    let problems = ctx.settings.ingress.check(&dir.spec.publish.ingress);
    if !problems.0.is_empty() {
        return Err(Error::InvalidSpec(problems));
    }
    let host = dir.spec.publish.host.to_ascii_lowercase();
    let claim = ctx.acquire_claim(Claim {
        host: host.clone(),
        prefix: String::new(),
        namespace: String::new(),
        name: dir.name_any(),
        uid: dir.uid().unwrap_or_default(),
        since: jiff::Timestamp::now(),
        whole_host: true,
    })?;
    let want = build(dir, &ctx.settings)?;
    let name = ingress_name(&dir.name_any());
    let opns = &ctx.settings.operator_namespace;
    let ours = |m: &dyn MetaView| written_for(m, dir);
    let have = ctx.ingress(opns, &name);
    if let Some(ing) = &want.ingress {
        let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), opns);
        apply::write(
            &api,
            ing,
            have.as_deref(),
            Rules {
                ours,
                current: |h: Option<&SeenIngress>| apply::ingress_current(h, ing),
                removals: |h: &SeenIngress| apply::ingress_removals(h, ing),
            },
            &(),
            &ctx.written,
        )
        .await?;
    }
    let route = ctx.route(opns, &name);
    if let Some(r) = &want.route {
        apply::write_route(&ctx.client, r, route.as_deref(), ours, &ctx.written).await?;
    }
    // Switching what routes the host: an Ingress replaced by an HTTPRoute goes once the
    // Gateways accepted the route; a route no longer wanted goes at once.
    let replaced = want.route.is_none()
        || route
            .as_deref()
            .is_some_and(|r| routing::routed(&[r], &ctx.settings.routing.parents).0 == "True");
    if want.ingress.is_none() && replaced && have.is_some_and(|i| ours(&i.seen)) {
        let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), opns);
        apply::delete_if_present(&api, &name).await?;
    }
    if want.route.is_none() && routed_by_route(dir) {
        apply::delete_route_if_ours(&ctx.client, opns, &name, ours).await?;
    }
    Ok(DirectoryRoute {
        host,
        path_prefix: normalize_prefix(&dir.spec.publish.path_prefix),
        since: claim.since.to_string(),
    })
}

fn next_status(
    dir: &AgentDirectory,
    outcome: &Result<DirectoryRoute, Error>,
    cards: i64,
) -> AgentDirectoryStatus {
    let prev = dir.status.clone().unwrap_or_default();
    let generation = dir.metadata.generation;
    let (ok, reason, message) = match outcome {
        Ok(route) => (
            true,
            "Published".to_string(),
            format!(
                "serving {cards} cards at https://{}{}",
                route.host, route.path_prefix
            ),
        ),
        Err(e) => (false, e.reason().to_string(), e.to_string()),
    };
    let served = match outcome {
        Ok(route) => Some(route.clone()),
        Err(e) if e.loses_claim() => None,
        Err(_) => prev.served.clone(),
    };
    AgentDirectoryStatus {
        observed_generation: generation,
        conditions: vec![condition(
            &prev.conditions,
            READY,
            ok,
            &reason,
            message,
            generation,
            &Time(jiff::Timestamp::now()),
        )],
        cards: if served.is_some() { cards } else { 0 },
        url: served
            .as_ref()
            .map(|r| format!("https://{}/.well-known/ard.json", r.host)),
        served,
    }
}

async fn apply_directory(dir: Arc<AgentDirectory>, ctx: Arc<Context>) -> Result<Action, Error> {
    let outcome = publish(&dir, &ctx).await;
    let mut next = next_status(&dir, &outcome, listed_count(&dir, &ctx));
    if ctx.settings.routing.kind == RouteKind::HttpRoute && next.served.is_some() {
        let route = ctx.route(
            &ctx.settings.operator_namespace,
            &ingress_name(&dir.name_any()),
        );
        let routes: Vec<&DynamicObject> = route.as_deref().into_iter().collect();
        let (state, reason, message) = routing::routed(&routes, &ctx.settings.routing.parents);
        let prev = dir
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        next.conditions.push(condition_with(
            prev,
            ROUTED,
            &state,
            &reason,
            message,
            dir.metadata.generation,
            &Time(jiff::Timestamp::now()),
        ));
    }
    let uid = dir.uid().unwrap_or_default();
    if dir.status.as_ref() != Some(&next) {
        let api: Api<AgentDirectory> = Api::all(ctx.client.clone());
        super::apply_status(&api, &dir.name_any(), &next).await?;
    }
    let keep = next
        .served
        .as_ref()
        .map(|r| (r.host.clone(), String::new()));
    let freed = ctx.retain_claims_of(&uid, keep.as_ref().map(|(h, p)| (h.as_str(), p.as_str())));
    if outcome.as_ref().err().is_some_and(Error::loses_claim) {
        remove_routes(&ctx, &dir).await?;
    }
    ctx.recheck_hosts_of(&freed, Some(&uid));
    match outcome {
        Ok(_) => {
            ctx.reset_backoff_for(&backoff_key(&dir));
            Ok(Action::requeue(Duration::from_secs(3600)))
        }
        Err(e) if e.waits_for_change() => Ok(Action::await_change()),
        Err(Error::HostConflict { .. }) => Ok(Action::requeue(Duration::from_secs(300))),
        Err(e) => Err(e),
    }
}

/// The directory's key in the backoff table (cards use `namespace/name`).
fn backoff_key(dir: &AgentDirectory) -> String {
    format!("AgentDirectory/{}", dir.name_any())
}

/// Transient failures: per-object exponential backoff.
pub fn error_policy(dir: Arc<AgentDirectory>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.next_backoff_for(&backoff_key(&dir));
    tracing::warn!(directory = %dir.name_any(), category = error.category(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::policy::IngressPolicy;

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
            routing: crate::controller::routing::Routing::default(),
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
