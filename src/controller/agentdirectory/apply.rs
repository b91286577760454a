//! Apply: write what routes the directory's host (through [`crate::controller::writes`]'s
//! rules), remove what routed it before a switch of routing kind once the new route carries
//! traffic, and take it all away when the directory loses its host or goes.

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Api;
use kube::{Client, ResourceExt};

use super::build::{ingress_name, routed_by_route, written_for, DirectoryRoutes};
use crate::controller::config::Settings;
use crate::controller::error::Error;
use crate::controller::routes::routing::{self, RouteKind};
use crate::controller::writes::seen::Written;
use crate::controller::writes::{
    delete_if_present, delete_route_if_ours, ingress_current, ingress_removals, write, write_route,
    Rules,
};
use crate::crd::AgentDirectory;
use crate::store::{MetaView, SeenIngress};

/// The apply stage: write `want` for `dir`, and remove a route of the other kind once `want`
/// carries the host (an Ingress replaced by an HTTPRoute waits until the Gateways accepted
/// it; a route no longer wanted goes at once).
pub async fn apply(
    client: &Client,
    settings: &Settings,
    written: &Written,
    dir: &AgentDirectory,
    want: &DirectoryRoutes,
) -> Result<(), Error> {
    let name = ingress_name(&dir.name_any());
    let opns = &settings.operator_namespace;
    let ours = |m: &dyn MetaView| written_for(m, dir);
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), opns);
    let have = written.ingress(opns, &name);
    if let Some(ing) = &want.ingress {
        let rules = Rules {
            ours,
            current: |h: Option<&SeenIngress>| ingress_current(h, ing),
            removals: |h: &SeenIngress| ingress_removals(h, ing),
        };
        write(&ingresses, ing, have.as_deref(), rules, &(), &written.memo).await?;
    }
    let route = written.route(opns, &name);
    if let Some(r) = &want.route {
        write_route(client, r, route.as_deref(), ours, &written.memo).await?;
    }
    let replaced = want.route.is_none()
        || route
            .as_deref()
            .is_some_and(|r| routing::routed(&[r], &settings.routing.parents).accepted());
    if want.ingress.is_none() && replaced && have.is_some_and(|i| ours(&i.seen)) {
        delete_if_present(&ingresses, &name).await?;
    }
    if want.route.is_none() && routed_by_route(dir) {
        delete_route_if_ours(client, opns, &name, ours).await?;
    }
    Ok(())
}

/// Delete the directory's Ingress and HTTPRoute, each when it is ours.
pub async fn remove_routes(
    client: &Client,
    settings: &Settings,
    written: &Written,
    dir: &AgentDirectory,
) -> Result<(), Error> {
    let name = ingress_name(&dir.name_any());
    let opns = &settings.operator_namespace;
    if settings.routing.kind == RouteKind::HttpRoute || routed_by_route(dir) {
        delete_route_if_ours(client, opns, &name, |m| written_for(m, dir)).await?;
    }
    if written
        .ingress(opns, &name)
        .is_some_and(|i| written_for(&i.seen, dir))
    {
        let api: Api<Ingress> = Api::namespaced(client.clone(), opns);
        delete_if_present(&api, &name).await?;
    }
    Ok(())
}
