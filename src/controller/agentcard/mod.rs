//! The AgentCard reconciler, a pipeline: [`validate`] → claim → [`build`] (pure) → [`apply`]
//! → [`status`]. A step that fails stops the pipeline before anything is written, so the last
//! good card stays served; the status and a Warning Event (on transitions only) say why.
//!
//! Ownership: before building, the card takes its claim on host + prefix in the claims table
//! ([`crate::controller::claims`]); a card that may not hold its route (another card holds an
//! overlapping claim, or its namespace may not use the host) is taken off the air: status
//! cleared first (the card server routes by status alone), then its ConfigMap and Ingresses
//! deleted. The claims it no longer needs are released, and the cards waiting on those hosts
//! are looked at again.

pub mod apply;
pub mod build;
pub mod source;
pub mod status;
pub mod validate;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::{Resource, ResourceExt};

use super::claims::Claim;
use super::{Context, Error};
use crate::crd::AgentCard;

/// Finalizer removing the Ingress in the operator's namespace when a card is deleted.
pub const FINALIZER: &str = "agentcard.dev/ingress-cleanup";

/// The [`crate::controller::watches::Unseen`] kind of a card's status writes.
pub const STATUS_WRITE: &str = "AgentCard/status";

/// How often a healthy card is re-checked without any change: by the controllers' resync,
/// which walks every card once per period, evenly spread (a requeue timer per card would keep
/// an entry for each in the controller's scheduler, about 450 bytes per card).
pub const RESYNC: Duration = Duration::from_secs(3600);
/// How soon a card that lost a host conflict looks again (the holder's release also triggers it).
const CONFLICT_RECHECK: Duration = Duration::from_secs(300);

/// Reconcile one AgentCard.
pub async fn reconcile(card: Arc<AgentCard>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    ctx.load_claims().await;
    let ns = card.namespace().unwrap_or_default();
    let api: Api<AgentCard> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, card, |event| async {
        match event {
            FinalizerEvent::Apply(card) => reconcile_apply(card, ctx.clone()).await,
            FinalizerEvent::Cleanup(card) => {
                ctx.forget_card(&card).await?;
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    result
}

/// The claim `card` asks for.
fn wanted_claim(card: &AgentCard, now: jiff::Timestamp) -> Claim {
    Claim {
        host: card.spec.publish.host.to_ascii_lowercase(),
        prefix: build::prefix(card),
        namespace: card.namespace().unwrap_or_default(),
        name: card.name_any(),
        uid: card.uid().unwrap_or_default(),
        since: now,
        whole_host: false,
    }
}

/// Validate → claim → build → apply.
async fn publish(
    card: &AgentCard,
    ctx: &Context,
    existing: &apply::Existing<'_>,
) -> Result<(build::Built, Vec<String>), Error> {
    let ns = card.namespace().unwrap_or_default();
    let annotations = ctx.namespace_annotations(&ns);
    // A route the namespace may no longer use goes, whatever state the spec is in.
    if let Some(served) = card.status.as_ref().and_then(|s| s.served.as_ref()) {
        validate::host_allowance(&served.host, &ns, &ctx.allowed_hosts, &annotations)?;
    }
    let warnings = validate::card(card)?;
    validate::routing(card, &ctx.settings.ingress, &ctx.settings.routing)?;
    ctx.check_namespace_limit(card)?;
    validate::host_allowance(
        &card.spec.publish.host,
        &ns,
        &ctx.allowed_hosts,
        &annotations,
    )?;
    let now = jiff::Timestamp::now();
    let claim = ctx.acquire_claim(wanted_claim(card, now))?;
    let keys = ctx.keys()?;
    let signers = ctx.signers(&keys).await?;
    let mut built = build::build(
        card,
        &signers.keys,
        &ctx.settings,
        existing.configmap,
        claim.since,
        now,
    )?;
    let bytes = built
        .configmap
        .data
        .as_ref()
        .and_then(|d| d.get(crate::contract::KEY_CARD))
        .map_or(0, String::len);
    if bytes > ctx.max_card_bytes {
        return Err(Error::CardTooLarge {
            bytes,
            limit: ctx.max_card_bytes,
        });
    }
    apply::apply(
        &ctx.client,
        &built,
        card,
        &ctx.settings,
        existing,
        &ctx.written,
        &ctx.configmaps_written,
    )
    .await?;
    built.pending_key = signers.pending;
    Ok((built, warnings))
}

async fn reconcile_apply(card: Arc<AgentCard>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = card.namespace().unwrap_or_default();
    // Triggered before the watch showed this card's last status write (another object's
    // event came first), the store holds the status from before it: read our own write.
    let (name, version) = (card.name_any(), card.resource_version());
    let card = match ctx
        .statuses
        .get(STATUS_WRITE, &ns, &name, version.as_deref())
    {
        Some(written) => {
            let mut c = (*card).clone();
            c.status = Some(written);
            Arc::new(c)
        }
        None => card,
    };
    let previous = ctx.configmap(&card);
    let existing = ctx.existing(&card, previous.as_deref());
    // With HTTPRoute routing, what the Gateways say of the routes as last seen.
    let routed = (ctx.settings.routing.kind == super::routing::RouteKind::HttpRoute).then(|| {
        let routes: Vec<&kube::api::DynamicObject> =
            [existing.route.as_deref(), existing.backend_route.as_deref()]
                .into_iter()
                .flatten()
                .collect();
        super::routing::routed(&routes, &ctx.settings.routing.parents)
    });
    let existing = apply::Existing {
        routes_accepted: routed.as_ref().is_some_and(|(s, _, _)| s == "True"),
        ..existing
    };
    // An imported card: fetch it (or keep the last good one), then the same pipeline.
    let report = match &card.spec.source {
        Some(src) => Some(source::look(&card, src, &ctx, previous.as_deref()).await),
        None => None,
    };
    let resolved = report.as_ref().and_then(|r| r.card.clone()).map(|base| {
        let mut c = (*card).clone();
        c.spec.card = Some(base);
        c
    });
    let outcome = match (&report, &resolved) {
        (Some(_), Some(c)) => publish(c, &ctx, &existing).await,
        (Some(r), None) => Err(Error::SourceUnavailable(
            r.error
                .as_ref()
                .map_or_else(String::new, |e| e.message.clone()),
        )),
        (None, _) => publish(&card, &ctx, &existing).await,
    };
    let mut next = status::next(
        resolved.as_ref().unwrap_or(&card),
        &outcome,
        Time(jiff::Timestamp::now()),
    );
    if let Some(r) = &report {
        status::set_source(&mut next, &card, r, Time(jiff::Timestamp::now()));
    }
    if outcome.is_err() {
        // A card whose edit failed keeps its last good version, signed with the keys of its
        // time: say so when those keys no longer sign (a rotation went on meanwhile).
        let signing = ctx.signing_kids();
        let retired: Vec<String> = previous
            .as_ref()
            .and_then(|cm| cm.text(crate::contract::KEY_CARD))
            .map(super::keys::signature_kids)
            .unwrap_or_default()
            .into_iter()
            .filter(|k| !signing.is_empty() && !signing.contains(k))
            .collect();
        status::set_retired_signature(&mut next, &card, &retired, Time(jiff::Timestamp::now()));
    }
    status::set_routing(
        &mut next,
        &card,
        ctx.settings.routing.kind,
        routed,
        Time(jiff::Timestamp::now()),
    );
    let before = status::ready_state(card.status.as_ref());
    let after = status::ready_state(Some(&next));
    ctx.metrics.set_ready(
        build::card_key(&card),
        Some(if outcome.is_ok() { "True" } else { "False" }),
    );
    if card.status.as_ref() != Some(&next) {
        let api: Api<AgentCard> = Api::namespaced(ctx.client.clone(), &ns);
        super::apply_status(&api, &name, &next).await?;
        tracing::debug!(card = %build::card_key(&card), ?version, before = ?card.status, after = ?next, "status written");
        ctx.statuses
            .remember(STATUS_WRITE, &ns, &name, version.as_deref(), next.clone());
    }
    // The status now says what is served; the claims follow it.
    let keep = next
        .served
        .as_ref()
        .map(|s| (s.host.clone(), s.path_prefix.clone()));
    let freed = ctx.retain_claims(&card, keep.as_ref().map(|(h, p)| (h.as_str(), p.as_str())));
    if let Err(e) = &outcome {
        if e.loses_claim() {
            apply::unpublish(&ctx.client, &card, &ctx.settings, &existing).await?;
        }
    }
    if before != after {
        publish_event(&ctx, &card, &outcome).await;
    }
    ctx.recheck_hosts(&freed, &card);
    // An imported card is looked at again every refresh interval, whatever happened.
    let refresh = card.spec.source.as_deref().map(source::refresh);
    match outcome {
        Ok(_) => {
            ctx.reset_backoff(&card);
            Ok(refresh.map_or_else(Action::await_change, Action::requeue))
        }
        Err(e) if e.waits_for_change() => {
            ctx.metrics
                .failures
                .get_or_create(&super::metrics::FailureLabels {
                    category: e.category(),
                })
                .inc();
            Ok(refresh.map_or_else(Action::await_change, Action::requeue))
        }
        Err(e @ Error::HostConflict { .. }) => {
            ctx.metrics
                .failures
                .get_or_create(&super::metrics::FailureLabels {
                    category: e.category(),
                })
                .inc();
            Ok(Action::requeue(CONFLICT_RECHECK))
        }
        Err(e) => Err(e),
    }
}

/// The Event a reconcile's `outcome` is reported with: Normal when published, Warning with the
/// failure's reason (pure; the load benchmark's floor writes the same Event).
pub fn outcome_event(outcome: &Result<(build::Built, Vec<String>), Error>) -> Event {
    match outcome {
        Ok((built, _)) => Event {
            type_: EventType::Normal,
            reason: "Published".into(),
            note: Some(format!("served at {} (key {})", built.url, built.key_id)),
            action: "Publish".into(),
            secondary: None,
        },
        Err(e) => Event {
            type_: EventType::Warning,
            reason: e.reason().into(),
            note: Some(truncate(&e.to_string(), 1000)),
            action: "Publish".into(),
            secondary: None,
        },
    }
}

/// One Event per Ready transition (see [`outcome_event`]).
async fn publish_event(
    ctx: &Context,
    card: &AgentCard,
    outcome: &Result<(build::Built, Vec<String>), Error>,
) {
    let event = outcome_event(outcome);
    if let Err(e) = ctx.recorder.publish(&event, &card.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record an Event");
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Transient failures: per-object exponential backoff.
pub fn error_policy(card: Arc<AgentCard>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .failures
        .get_or_create(&super::metrics::FailureLabels {
            category: error.category(),
        })
        .inc();
    let delay = ctx.next_backoff(&card);
    tracing::warn!(card = %build::card_key(&card), category = error.category(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
