//! The AgentCard reconciler. Each reconcile walks the pipeline once, every stage taking the
//! previous one's output: [`source`] (an imported card: fetch or keep the last good one) →
//! [`validate`] (pure) → [`claim`] (the route in the claims table) → [`build`] (pure:
//! everything written, signed) → [`extended`] (pure: the extended card, with
//! `spec.extendedCard`) → [`apply`] (writes) → [`drift`] (a published card with a
//! backend: the agent's own card compared with it) → [`status`] (pure next status, one
//! write). [`card`] holds what every stage derives from the spec. A stage that fails stops the
//! pipeline before anything is written, so the last good card stays served; the status and a
//! Warning Event (on transitions only) say why.
//!
//! Ownership: a card that may not hold its route (another card holds an overlapping claim, or
//! its namespace may not use the host) is taken off the air: status cleared first (the card
//! server routes by status alone), then its ConfigMap and Ingresses deleted. The claims it no
//! longer needs are released, and the cards waiting on those hosts are looked at again.

pub mod apply;
pub mod approval;
pub mod backends;
pub mod build;
pub mod card;
pub mod claim;
pub mod compatibility;
pub mod contest;
pub mod drift;
pub mod extended;
pub mod lifecycle;
pub mod reach;
pub mod revisions;
pub mod source;
pub mod status;
pub mod validate;

#[cfg(test)]
mod reconcile_tests;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::context::Context;
use super::error::Error;
use super::events::event;
use super::finalizers::{self, LEGACY_CARD};
use super::metrics::{self, ReadyState, CARD_CONTROLLER};
use crate::controller::routes::routing::{self, RouteKind, Verdict};
use crate::crd::AgentCard;
use crate::store::SeenConfigMap;
use apply::Existing;
use build::Built;

/// How often a healthy card is re-checked without any change: by the controllers' resync,
/// which walks every card once per period, evenly spread (a requeue timer per card would keep
/// an entry for each in the controller's scheduler, about 450 bytes per card).
pub const RESYNC: Duration = Duration::from_secs(3600);
/// How soon a card that lost a host conflict looks again (the holder's release also triggers it).
const CONFLICT_RECHECK: Duration = Duration::from_secs(300);

/// What a reconcile ends with: the published card and its warnings, or why not.
pub type Outcome = Result<(Built, Vec<String>), Error>;

/// Reconcile one AgentCard.
#[tracing::instrument(skip_all, fields(card = %card::card_key(&card)))]
pub async fn reconcile(card: Arc<AgentCard>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(CARD_CONTROLLER);
    ctx.ownership.load().await;
    let result = if card.meta().deletion_timestamp.is_some() {
        // Held in deletion by someone's finalizer (or by ours from an earlier version): off
        // the air now; the delete event forgets it again, which changes nothing.
        release_deleted(&card, &ctx).await
    } else {
        let result = match drop_legacy_finalizer(&card, &ctx).await {
            Ok(()) => reconcile_apply(card.clone(), &ctx).await,
            Err(e) => Err(e),
        };
        // Deleted while this reconcile wrote (whether or not it then failed): its delete
        // event may have been handled before those writes landed, so they go now.
        if gone(&card, &ctx) {
            forget(&card, &ctx).await.and(result)
        } else {
            result
        }
    };
    result
}

/// Whether `card` is no longer in the store (or another card of its name is).
fn gone(card: &AgentCard, ctx: &Context) -> bool {
    let key = ObjectRef::new(&card.name_any()).within(&card.namespace().unwrap_or_default());
    ctx.cards.get(&key).is_none_or(|c| c.uid() != card.uid())
}

/// A card being deleted: forget it, and let go of an earlier version's finalizer.
async fn release_deleted(card: &AgentCard, ctx: &Context) -> Result<Action, Error> {
    forget(card, ctx).await?;
    drop_legacy_finalizer(card, ctx).await?;
    Ok(Action::await_change())
}

/// A card from an earlier version carries its finalizer: remove it (once; see
/// [`finalizers`]).
async fn drop_legacy_finalizer(card: &AgentCard, ctx: &Context) -> Result<(), Error> {
    if !finalizers::carries(card, LEGACY_CARD) {
        return Ok(());
    }
    let api: Api<AgentCard> =
        Api::namespaced(ctx.client.clone(), &card.namespace().unwrap_or_default());
    finalizers::release(&api, card, LEGACY_CARD).await
}

/// Transient failures: per-object exponential backoff.
pub fn error_policy(card: Arc<AgentCard>, error: &Error, ctx: Arc<Context>) -> Action {
    count_failure(&ctx, error);
    let delay = ctx.backoff.next(&card::card_key(&card));
    tracing::warn!(card = %card::card_key(&card), category = error.category(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

fn count_failure(ctx: &Context, error: &Error) {
    ctx.metrics.count_failure(CARD_CONTROLLER, error.category());
}

/// One pass of the pipeline for a card that exists.
async fn reconcile_apply(card: Arc<AgentCard>, ctx: &Context) -> Result<Action, Error> {
    // Triggered before the watch showed this card's last status write (another object's
    // event came first), the store holds the status from before it: read our own write.
    // A held comparison is said once the store shows a status reporting its bytes: settled on
    // our own write, a reconcile woken meanwhile with the store's older status would find the
    // bytes served, no comparison held, and report the change as not compared.
    ctx.verdicts.settle(
        &card.uid().unwrap_or_default(),
        card.status.as_ref().and_then(|s| s.content_hash.as_deref()),
    );
    let card = ctx.written.with_own_status(card);
    if let Some(action) = hold_if_contested(&card, ctx).await? {
        return Ok(action);
    }
    let previous = ctx.written.configmap(&card);
    let (existing, routed) = existing_routes(&card, ctx, previous.as_deref());
    // An imported card: fetch it (or keep the last good one), then the same pipeline.
    let report = match &card.spec.source {
        Some(src) => {
            let previous_extended = ctx.written.extended_configmap(&card);
            let previous = (previous.as_deref(), previous_extended.as_deref());
            Some(ctx.sources.look(&card, src, previous).await)
        }
        None => None,
    };
    let resolved = report.as_ref().and_then(|r| {
        let mut c = (*card).clone();
        c.spec.card = Some(r.card.clone()?);
        // An imported extended card: what the agent's adds to its public card, laid over the
        // published public card like a declared `spec.extendedCard`.
        if let Some(a) = &r.extended {
            let mut skills = a.skills.clone();
            if let Some(o) = &card.spec.overrides {
                card::tag_skills(&mut skills, o);
            }
            c.spec.extended_card = Some(Box::new(crate::crd::ExtendedCard {
                description: a.description.clone(),
                skills,
                supported_interfaces: a.supported_interfaces.clone(),
                security_schemes: a.security_schemes.clone(),
                extensions: a.extensions.clone(),
                auth: None,
            }));
        }
        Some(c)
    });
    let outcome = match (&report, &resolved) {
        (Some(_), Some(c)) => publish(c, ctx, &existing).await,
        (Some(r), None) => Err(Error::SourceUnavailable(
            r.error
                .as_ref()
                .map_or_else(String::new, |e| e.message.clone()),
        )),
        (None, _) => publish(&card, ctx, &existing).await,
    };
    let published = resolved.as_ref().unwrap_or(&card);
    let drift = match &outcome {
        Ok(_) => ctx
            .sources
            .drifts
            .look(&ctx.sources, &card)
            .await
            .map(|look| drift::compare(&card::effective_card(published), &look)),
        Err(_) => None,
    };
    let retired = retired_keys(&outcome, previous.as_deref(), ctx);
    let revoked: Vec<String> = match ctx.signing.keys() {
        Ok(keys) => retired
            .iter()
            .filter(|k| keys.revoked.contains(*k))
            .cloned()
            .collect(),
        Err(_) => Vec::new(),
    };
    let backend =
        crate::controller::agentcard::backends::state(&ctx.client, &ctx.backends, &card).await;
    let mut next = status::next(&status::Found {
        card: &card,
        published,
        outcome: &outcome,
        source: report.as_ref(),
        retired: &retired,
        revoked: &revoked,
        routing: ctx.settings.routing.kind,
        routed,
        now: Time(jiff::Timestamp::now()),
        operator: &ctx.settings.operator_namespace,
        backend,
        drift: drift.as_ref(),
    });
    judge_approvals(&card, ctx, &outcome, &mut next);
    report_outcome(&card, ctx, &outcome, &next, &existing).await?;
    next_action(&card, ctx, outcome, next_backend_check(&next))
}

/// What each directory requiring approval says of the content `next` reports
/// ([`approval`]), into `next`.
fn judge_approvals(
    card: &AgentCard,
    ctx: &Context,
    outcome: &Outcome,
    next: &mut crate::crd::AgentCardStatus,
) {
    let unchanged = compatibility::Compared::Unchanged;
    let edit = match outcome {
        Ok((built, _)) => &built.breaking,
        Err(_) => &unchanged,
    };
    let ns = card.namespace().unwrap_or_default();
    let namespace_labels = ctx
        .namespaces
        .get(&ObjectRef::new(&ns))
        .map(|n| n.labels().clone())
        .unwrap_or_default();
    let now = jiff::Timestamp::now().to_string();
    let judged = approval::Judged {
        card,
        hash: next.served.as_ref().and(next.content_hash.as_deref()),
        edit,
        namespace_labels: &namespace_labels,
        now: &now,
    };
    next.approvals = approval::verdicts(&judged, &ctx.directories, &ctx.approvals);
    next.approval = approval::summary(&next.approvals);
}

/// When another operator installation reconciles `card` too and is running: hold the card as
/// it is (see [`contest`]), saying so once, and look again later.
async fn hold_if_contested(card: &AgentCard, ctx: &Context) -> Result<Option<Action>, Error> {
    let me = &ctx.settings.operator_namespace;
    let key = format!("contest/{}", card::card_key(card));
    let others = contest::others(card, me);
    let live = if others.is_empty() {
        others
    } else {
        contest::alive(&ctx.client, &others).await?
    };
    if live.is_empty() {
        ctx.backoff.reset(&key);
        return Ok(None);
    }
    let error = contest::conflict_error(card, me, &live);
    count_failure(ctx, &error);
    let held = contest::held_status(card, &error, &Time(jiff::Timestamp::now()));
    let news = !card
        .status
        .as_ref()
        .is_some_and(|s| s.contenders.contains(me));
    let api: Api<AgentCard> =
        Api::namespaced(ctx.client.clone(), &card.namespace().unwrap_or_default());
    status::write(&api, card, &held, &ctx.written.statuses).await?;
    if news {
        tracing::warn!(card = %card::card_key(card), error = %error, "another operator installation reconciles this card");
        let event = event(
            EventType::Warning,
            error.reason(),
            PUBLISH,
            &error.to_string(),
        );
        ctx.recorder.record(&event, &card.object_ref(&())).await;
    }
    Ok(Some(Action::requeue(
        ctx.backoff.next(&key).min(contest::MAX_RECHECK),
    )))
}

/// What the operator wrote for `card` as last seen, and with HTTPRoute routing what the
/// Gateways say of its routes (`(status, reason, message)`).
fn existing_routes<'a>(
    card: &AgentCard,
    ctx: &Context,
    previous: Option<&'a SeenConfigMap>,
) -> (Existing<'a>, Option<Verdict>) {
    let existing = Existing::of(&ctx.written, card, previous);
    let routed = (ctx.settings.routing.kind == RouteKind::HttpRoute).then(|| {
        let routes: Vec<&DynamicObject> =
            [existing.route.as_deref(), existing.backend_route.as_deref()]
                .into_iter()
                .flatten()
                .collect();
        routing::routed(&routes, &ctx.settings.routing.parents)
    });
    let existing = Existing {
        routes_accepted: routed.as_ref().is_some_and(Verdict::accepted),
        ..existing
    };
    (existing, routed)
}

/// validate → claim → build → apply.
async fn publish(card: &AgentCard, ctx: &Context, existing: &Existing<'_>) -> Outcome {
    let annotations = ctx.namespace_annotations(&card.namespace().unwrap_or_default());
    let limit = |c: &AgentCard| {
        ctx.limits
            .check_namespace(c, &ctx.cards_by_host, &ctx.cards)?;
        ctx.limits
            .check_namespace_bytes(c, &ctx.cards_by_host, &ctx.cards)
    };
    let warnings = validate::admit(
        card,
        &validate::Admission {
            settings: &ctx.settings,
            allowed_hosts: &ctx.allowed_hosts,
            namespace_annotations: &annotations,
            namespace_limit: &limit,
        },
    )?;
    let now = jiff::Timestamp::now();
    let find = |ns: &str, name: &str| ctx.cards.get(&ObjectRef::new(name).within(ns));
    let life = lifecycle::resolve(card, &find, ctx.settings.retired_retention_seconds, now)?;
    let claim = claim::take(card, &ctx.ownership, now)?;
    let keys = ctx.signing.keys()?;
    let signers = ctx.signing.signers(&keys).await?;
    let mut built = build::build(
        card,
        &signers.keys,
        &ctx.settings,
        existing.configmap,
        claim.since,
        now,
    )?;
    ctx.limits.check_size(built.served_len())?;
    built.extended = extended::build(card, &signers.keys, existing.extended.as_deref())?;
    if let Some(e) = &built.extended {
        ctx.limits.check_size(e.served_len())?;
    }
    built.served.lifecycle = life.served;
    built.successor_problem = life.problem;
    built.retired_at = life.retired_at;
    built.recheck = life.recheck;
    built.breaking = compatibility::check(card, existing.configmap, &built, &ctx.verdicts)?;
    apply::apply(
        &ctx.client,
        &built,
        card,
        &ctx.settings,
        existing,
        &ctx.written,
    )
    .await?;
    built.revision = Some(revisions::record(&ctx.client, card, &built).await?);
    built.pending_key = signers.pending;
    built.revoked_keys = keys.revoked.iter().cloned().collect();
    Ok((built, warnings))
}

/// A card whose edit failed keeps its last good version, signed with the keys of its time:
/// those that no longer sign (a rotation went on meanwhile), for the status to say so.
fn retired_keys(outcome: &Outcome, previous: Option<&SeenConfigMap>, ctx: &Context) -> Vec<String> {
    if outcome.is_ok() {
        return Vec::new();
    }
    let signing = ctx.signing.signing_kids();
    previous
        .and_then(|cm| cm.text(crate::contract::KEY_CARD))
        .map(super::keys::signature_kids)
        .unwrap_or_default()
        .into_iter()
        .filter(|k| !signing.is_empty() && !signing.contains(k))
        .collect()
}

/// Say what happened: the status written (when it changed), the claims kept to what it serves,
/// a card that lost its route taken off the air, an Event on a Ready transition, and the
/// cards waiting on the hosts it freed looked at again.
async fn report_outcome(
    card: &AgentCard,
    ctx: &Context,
    outcome: &Outcome,
    next: &crate::crd::AgentCardStatus,
    existing: &Existing<'_>,
) -> Result<(), Error> {
    let transition = status::ready_state(card.status.as_ref()) != status::ready_state(Some(next));
    let compat = status::condition_state(Some(next), status::COMPATIBLE);
    let drifted = status::condition_state(Some(next), drift::DRIFTED);
    let drift_news = drifted.as_ref().is_some_and(|c| c.status == "True")
        && status::condition_state(card.status.as_ref(), drift::DRIFTED)
            .is_none_or(|was| was.status != "True");
    let breaking_news = compat.as_ref().is_some_and(|c| c.status == "False")
        && status::condition_state(card.status.as_ref(), status::COMPATIBLE) != compat;
    ctx.metrics
        .set_drift(card::card_key(card), status::drift_state(next));
    ctx.metrics.set_ready(
        card::card_key(card),
        Some(match outcome {
            Ok(_) => ReadyState {
                status: "True",
                reason: metrics::PUBLISHED,
            },
            Err(e) => ReadyState {
                status: "False",
                reason: e.reason(),
            },
        }),
    );
    let api: Api<AgentCard> =
        Api::namespaced(ctx.client.clone(), &card.namespace().unwrap_or_default());
    status::write(&api, card, next, &ctx.written.statuses).await?;
    // The status now says what is served; the claims follow it.
    let keep = next
        .served
        .as_ref()
        .map(|s| (s.host.as_str(), s.path_prefix.as_str()));
    let freed = ctx.ownership.retain_card(card, keep);
    if let Err(e) = outcome {
        if e.loses_claim() {
            apply::unpublish(&ctx.client, card, &ctx.settings, existing).await?;
        }
    }
    if transition {
        publish_event(ctx, card, outcome).await;
    }
    if let (true, Some(compat)) = (breaking_news, compat) {
        let event = event(
            EventType::Warning,
            "BreakingChange",
            PUBLISH,
            &compat.detail,
        );
        ctx.recorder.record(&event, &card.object_ref(&())).await;
    }
    if let (true, Some(drifted)) = (drift_news, drifted) {
        let event = event(EventType::Warning, "Drifted", PUBLISH, &drifted.detail);
        ctx.recorder.record(&event, &card.object_ref(&())).await;
    }
    let before = card.status.as_ref().map(|s| s.approvals.as_slice());
    for (type_, reason, note) in approval::transitions(before.unwrap_or_default(), &next.approvals)
    {
        let event = event(type_, reason, PUBLISH, &note);
        ctx.recorder.record(&event, &card.object_ref(&())).await;
    }
    ctx.ownership.recheck_card(&freed, card);
    Ok(())
}

/// When to look at the card again: an imported card every refresh interval, a lost host
/// conflict after a while (or on the holder's release), otherwise on a change.
fn next_action(
    card: &AgentCard,
    ctx: &Context,
    outcome: Outcome,
    backend: Option<Duration>,
) -> Result<Action, Error> {
    let drift_due = (drift::mode(card) == crate::crd::DriftMode::Report).then(|| {
        ctx.sources
            .drifts
            .due(card)
            .unwrap_or_else(|| drift::interval(card))
            .max(Duration::from_secs(1))
    });
    let refresh = [
        card.spec.source.as_deref().map(source::refresh),
        backend,
        drift_due,
    ]
    .into_iter()
    .flatten()
    .min();
    let on_change = || refresh.map_or_else(Action::await_change, Action::requeue);
    match outcome {
        Ok((built, _)) => {
            ctx.backoff.reset(&card::card_key(card));
            let successor = built
                .successor_problem
                .as_ref()
                .map(|_| lifecycle::SUCCESSOR_RECHECK);
            let soonest = [built.recheck, successor, refresh]
                .into_iter()
                .flatten()
                .min();
            Ok(soonest.map_or_else(Action::await_change, Action::requeue))
        }
        Err(e) if e.waits_for_change() => {
            count_failure(ctx, &e);
            Ok(on_change())
        }
        Err(e @ Error::HostConflict { .. }) => {
            count_failure(ctx, &e);
            Ok(Action::requeue(CONFLICT_RECHECK))
        }
        Err(e) => Err(e),
    }
}

/// When to look at the agent's Service again: within [`crate::controller::agentcard::backends::RECHECK`] while it is
/// not ready (a Service created or renumbered changes no EndpointSlice).
fn next_backend_check(next: &crate::crd::AgentCardStatus) -> Option<Duration> {
    next.conditions
        .iter()
        .find(|c| c.type_ == status::BACKEND_READY)
        .filter(|c| c.status == "False")
        .map(|_| crate::controller::agentcard::backends::RECHECK)
}

/// The Event a reconcile's `outcome` is reported with: Normal when published, Warning with the
/// failure's reason (pure; the load benchmark's floor writes the same Event).
pub fn outcome_event(outcome: &Outcome) -> Event {
    match outcome {
        Ok((built, _)) => event(
            EventType::Normal,
            "Published",
            PUBLISH,
            &format!("served at {} (key {})", built.url, built.key_id),
        ),
        Err(e) => event(EventType::Warning, e.reason(), PUBLISH, &e.to_string()),
    }
}

/// One Event per Ready transition (see [`outcome_event`]).
async fn publish_event(ctx: &Context, card: &AgentCard, outcome: &Outcome) {
    ctx.recorder
        .record(&outcome_event(outcome), &card.object_ref(&()))
        .await;
}

/// The action of every Event about a card.
const PUBLISH: &str = "Publish";

/// Forget a card that is gone (on its delete event) or being deleted:
/// release its claims, and remove what it had in the operator's namespace, unless a card of
/// the same name took its place (that one's reconcile owns those names now).
pub async fn forget(card: &AgentCard, ctx: &Context) -> Result<(), Error> {
    let (ns, name) = (card.namespace().unwrap_or_default(), card.name_any());
    let replaced = ctx
        .cards
        .get(&ObjectRef::new(&name).within(&ns))
        .is_some_and(|c| c.uid() != card.uid());
    if let Some(uid) = card.uid() {
        ctx.sources.forget(&uid);
        ctx.verdicts.forget(&uid);
    }
    if !replaced {
        let existing = Existing::of(&ctx.written, card, None);
        apply::unpublish_gone(&ctx.client, card, &ctx.settings, &existing).await?;
        let key = card::card_key(card);
        ctx.metrics.set_ready(key.clone(), None);
        ctx.metrics.set_drift(key.clone(), None);
        ctx.backoff.reset(&key);
    }
    let freed = ctx.ownership.retain_card(card, None);
    ctx.ownership.recheck_card(&freed, card);
    Ok(())
}
