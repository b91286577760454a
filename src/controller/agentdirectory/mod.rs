//! The AgentDirectory reconciler, a pipeline walked once per reconcile: validate (the
//! tenant-facing Ingress settings against the operator's policy) → claim the whole host →
//! [`build`] (pure) → [`apply`] → [`status`] (pure next status, one write).
//!
//! A directory holds its whole host in the claims table (no card of any namespace may publish
//! beneath it, and no second directory may share it; whoever became Ready first keeps it). The
//! lease holder writes what routes the whole host to the operator's Service in the operator's
//! namespace (an Ingress or an HTTPRoute, by the routing setting; nothing with `None`), and the
//! status every replica routes by (`status.served`) with the number of cards listed, counted by
//! the same selection rule the servers answer with ([`crate::directory::select`]). Card and
//! Namespace changes re-run it, so the count follows.

pub mod apply;
pub mod build;
pub mod count;
pub mod status;
pub mod watch;

#[cfg(test)]
mod reconcile_tests;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

pub use crate::contract::ANN_DIRECTORY;
pub use build::ingress_name;

use super::context::Context;
use super::error::Error;
use super::finalizers::{self, LEGACY_DIRECTORY};
use super::metrics::DIRECTORY_CONTROLLER;
use crate::contract::normalize_prefix;
use crate::controller::routes::routing::{self, RouteKind};
use crate::controller::routes::table::Claim;
use crate::controller::writes::apply_status;
use crate::crd::agentdirectory::ApprovalCounts;
use crate::crd::agentdirectory::DirectoryRoute;
use crate::crd::AgentDirectory;

/// How often a published directory is looked at again without a change.
const RECHECK: Duration = Duration::from_secs(3600);
/// How often a directory with upstreams reports their syncs.
const UPSTREAMS_RECHECK: Duration = Duration::from_secs(5);
/// How soon a directory that lost a host conflict looks again.
const CONFLICT_RECHECK: Duration = Duration::from_secs(300);

/// Reconcile one AgentDirectory.
#[tracing::instrument(skip_all, fields(directory = %dir.name_any()))]
pub async fn reconcile(dir: Arc<AgentDirectory>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(DIRECTORY_CONTROLLER);
    ctx.ownership.load().await;
    let api: Api<AgentDirectory> = Api::all(ctx.client.clone());
    if dir.meta().deletion_timestamp.is_some() {
        // Held in deletion by someone's finalizer (or an earlier version's): off the air now.
        forget(&dir, &ctx).await?;
        finalizers::release(&api, &dir, LEGACY_DIRECTORY).await?;
        return Ok(Action::await_change());
    }
    if finalizers::carries(dir.as_ref(), LEGACY_DIRECTORY) {
        finalizers::release(&api, &dir, LEGACY_DIRECTORY).await?;
    }
    reconcile_apply(&dir, &ctx).await
}

/// Forget a directory that is gone (its delete event) or being deleted: its routes go now
/// (garbage collection would take them, as their owner is gone, but only when it gets to
/// them), and its host is free for whoever waits on it.
pub async fn forget(dir: &AgentDirectory, ctx: &Context) -> Result<(), Error> {
    let replaced = ctx
        .directories
        .get(&ObjectRef::new(&dir.name_any()))
        .is_some_and(|d| d.uid() != dir.uid());
    if !replaced {
        apply::remove_routes(&ctx.client, &ctx.settings, &ctx.written, dir).await?;
        ctx.backoff.reset(&backoff_key(dir));
    }
    let freed = ctx.ownership.retain(&dir.uid().unwrap_or_default(), None);
    ctx.ownership.recheck(&freed, dir.uid().as_deref());
    Ok(())
}

/// Transient failures: per-object exponential backoff.
pub fn error_policy(dir: Arc<AgentDirectory>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .count_failure(DIRECTORY_CONTROLLER, error.category());
    let delay = ctx.backoff.next(&backoff_key(&dir));
    tracing::warn!(directory = %dir.name_any(), category = error.category(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The directory's key in the backoff table (cards use `namespace/name`).
pub fn backoff_key(dir: &AgentDirectory) -> String {
    format!("AgentDirectory/{}", dir.name_any())
}

/// One pass of the pipeline, then the claims kept to what the status serves.
async fn reconcile_apply(dir: &AgentDirectory, ctx: &Context) -> Result<Action, Error> {
    let outcome = publish(dir, ctx).await;
    let routed = (ctx.settings.routing.kind == RouteKind::HttpRoute).then(|| {
        let route = ctx.written.route(
            &ctx.settings.operator_namespace,
            &ingress_name(&dir.name_any()),
        );
        let routes: Vec<&DynamicObject> = route.as_deref().into_iter().collect();
        routing::routed(&routes, &ctx.settings.routing.parents)
    });
    let now = Time(jiff::Timestamp::now());
    let upstreams = ctx.federation.status(&dir.name_any(), &dir.spec.upstreams);
    let mut next = status::next(
        dir,
        &outcome,
        listed_count(dir, ctx),
        routed,
        upstreams,
        &now,
    );
    next.approvals = approval_counts(dir, ctx);
    if dir.status.as_ref() != Some(&next) {
        let api: Api<AgentDirectory> = Api::all(ctx.client.clone());
        apply_status(&api, &dir.name_any(), &next).await?;
    }
    let uid = dir.uid().unwrap_or_default();
    let keep = next.served.as_ref().map(|r| (r.host.as_str(), ""));
    let freed = ctx.ownership.retain(&uid, keep);
    if outcome.as_ref().err().is_some_and(Error::loses_claim) {
        apply::remove_routes(&ctx.client, &ctx.settings, &ctx.written, dir).await?;
    }
    ctx.ownership.recheck(&freed, Some(&uid));
    match outcome {
        Ok(_) => {
            ctx.backoff.reset(&backoff_key(dir));
            // Upstreams are synced by every replica on their own clock: look at them again.
            let recheck = if dir.spec.upstreams.is_empty() {
                RECHECK
            } else {
                UPSTREAMS_RECHECK
            };
            Ok(Action::requeue(recheck))
        }
        Err(e) if e.waits_for_change() => Ok(Action::await_change()),
        Err(Error::HostConflict { .. }) => Ok(Action::requeue(CONFLICT_RECHECK)),
        Err(e) => Err(e),
    }
}

/// validate → claim → build → apply; the route the directory is served on.
async fn publish(dir: &AgentDirectory, ctx: &Context) -> Result<DirectoryRoute, Error> {
    let problems = ctx.settings.ingress.check(&dir.spec.publish.ingress);
    if !problems.0.is_empty() {
        return Err(Error::InvalidSpec(problems));
    }
    let host = dir.spec.publish.host.to_ascii_lowercase();
    let claim = ctx.ownership.acquire(Claim {
        host: host.clone(),
        prefix: String::new(),
        namespace: String::new(),
        name: dir.name_any(),
        uid: dir.uid().unwrap_or_default(),
        since: jiff::Timestamp::now(),
        whole_host: true,
    })?;
    let want = build::build(dir, &ctx.settings)?;
    apply::apply(&ctx.client, &ctx.settings, &ctx.written, dir, &want).await?;
    Ok(DirectoryRoute {
        host,
        path_prefix: normalize_prefix(&dir.spec.publish.path_prefix),
        since: claim.since.to_string(),
    })
}

/// Under `admission: ApprovalRequired`, the selected cards by verdict, as counted (before the
/// counting task has seen the directory, what its status says already).
fn approval_counts(dir: &AgentDirectory, ctx: &Context) -> Option<ApprovalCounts> {
    if dir.spec.admission != crate::crd::Admission::ApprovalRequired {
        return None;
    }
    ctx.counts
        .approvals(&dir.name_any())
        .or_else(|| dir.status.as_ref().and_then(|s| s.approvals.clone()))
}

/// Cards the directory lists now: the count kept in step with the card events ([`count`]).
/// Before the counting task has seen the directory, the count its status already says (the
/// task triggers a reconcile once it has counted).
fn listed_count(dir: &AgentDirectory, ctx: &Context) -> i64 {
    ctx.counts
        .get(&dir.name_any())
        .unwrap_or_else(|| dir.status.as_ref().map_or(0, |s| s.cards))
}
