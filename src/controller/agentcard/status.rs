//! Status: the conditions and fields a reconcile reports, computed from its outcome and the
//! previous status (pure). A failed reconcile keeps the URL, hash, key id and served route of
//! the card still being served: the last good card stays published and the status says so.
//! A card that may not hold its route (conflict, host not allowed) is served nowhere: those
//! fields are cleared, and the card server, which routes by them alone, drops it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::build::Built;
use crate::controller::Error;
use crate::crd::{AgentCard, AgentCardStatus};

/// Condition type: the card is served as specified.
pub const READY: &str = "Ready";
/// Condition type: the served card carries a signature of the active key.
pub const SIGNED: &str = "Signed";
/// Condition type: the ConfigMap and Ingress are written.
pub const PUBLISHED: &str = "Published";
/// Condition type (cards with `spec.source`): the agent's card was fetched and is valid.
pub const SOURCE_REACHABLE: &str = "SourceReachable";

/// Condition `type_` True (`ok`) or False, keeping its transition time from `prev` when its
/// status did not change.
pub(crate) fn condition(
    prev: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    condition_with(prev, type_, status, reason, message, generation, now)
}

/// Condition `type_` with `status` (True, False or Unknown), keeping its transition time from
/// `prev` when its status did not change.
pub(crate) fn condition_with(
    prev: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let since = prev
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// The Signed condition's message: which keys signed, and when the active key will while a
/// rotation waits for every cached JWKS to hold it.
fn signed_message(built: &Built) -> String {
    let keys = if built.key_ids.len() > 1 {
        format!("signed with keys {}", built.key_ids.join(", "))
    } else {
        format!("signed with key {}", built.key_id)
    };
    match &built.pending_key {
        Some((kid, at)) => format!(
            "{keys}; key {kid} is published and signs from {at} (one JWKS max-age after it was published)"
        ),
        None => keys,
    }
}

/// The conditions `card` had before this reconcile (their transition times are kept).
fn previous_conditions(card: &AgentCard) -> Vec<Condition> {
    card.status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// The status after a reconcile of `card` that ended with `outcome`.
pub fn next(
    card: &AgentCard,
    outcome: &Result<(Built, Vec<String>), Error>,
    now: Time,
) -> AgentCardStatus {
    let prev = card.status.clone().unwrap_or_default();
    let generation = card.metadata.generation;
    let conds = &prev.conditions;
    let mut status = AgentCardStatus {
        observed_generation: generation,
        ..prev.clone()
    };
    match outcome {
        Ok((built, warnings)) => {
            let msg = format!("served at {}", built.url);
            status.conditions = vec![
                condition(
                    conds,
                    READY,
                    true,
                    "Published",
                    msg.clone(),
                    generation,
                    &now,
                ),
                condition(
                    conds,
                    SIGNED,
                    true,
                    "Signed",
                    signed_message(built),
                    generation,
                    &now,
                ),
                condition(conds, PUBLISHED, true, "Published", msg, generation, &now),
            ];
            status.url = Some(built.url.clone());
            status.served = Some(built.served.clone());
            status.content_hash = Some(built.content_hash.clone());
            status.key_id = Some(built.key_id.clone());
            status.config_map = built.configmap.metadata.name.clone();
            status.warnings = warnings.clone();
            status.skills = Some(
                card.spec
                    .card
                    .iter()
                    .flat_map(|c| c.skills.iter())
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        Err(e) => {
            if e.loses_claim() {
                status.url = None;
                status.content_hash = None;
                status.key_id = None;
                status.config_map = None;
                status.served = None;
            }
            let kept = match &status.url {
                Some(url) => format!("; the last good card stays served at {url}"),
                None if e.loses_claim() && prev.url.is_some() => {
                    "; the card is no longer served".to_string()
                }
                None => String::new(),
            };
            let message = format!("{e}{kept}");
            let signing_failed = matches!(e, Error::KeyUnavailable(_) | Error::Signing(_));
            let signed = if signing_failed {
                condition(
                    conds,
                    SIGNED,
                    false,
                    e.reason(),
                    e.to_string(),
                    generation,
                    &now,
                )
            } else {
                match conds.iter().find(|c| c.type_ == SIGNED) {
                    Some(c) => c.clone(),
                    None => condition(
                        conds,
                        SIGNED,
                        false,
                        e.reason(),
                        "not signed: the card was not built".into(),
                        generation,
                        &now,
                    ),
                }
            };
            status.conditions = vec![
                condition(
                    conds,
                    READY,
                    false,
                    e.reason(),
                    message.clone(),
                    generation,
                    &now,
                ),
                signed,
                condition(
                    conds,
                    PUBLISHED,
                    false,
                    e.reason(),
                    message,
                    generation,
                    &now,
                ),
            ];
        }
    }
    status
}

/// The source fields and the `SourceReachable` condition of a card with `spec.source`, after
/// `report`; the import's notes join the warnings of a published card.
pub fn set_source(
    status: &mut AgentCardStatus,
    card: &AgentCard,
    report: &super::source::Report,
    now: Time,
) {
    let prev = previous_conditions(card);
    status.conditions.retain(|c| c.type_ != SOURCE_REACHABLE);
    let cond = match &report.error {
        None => {
            let url = &report.status.url;
            let (reason, message) = if report.not_modified {
                ("NotModified", format!("{url}: not modified"))
            } else {
                let converted = match report.status.version.as_deref() {
                    Some("0.3") => " (a v0.3 card, converted to v1.0)",
                    _ => "",
                };
                ("Fetched", format!("fetched from {url}{converted}"))
            };
            condition(
                &prev,
                SOURCE_REACHABLE,
                true,
                reason,
                message,
                card.metadata.generation,
                &now,
            )
        }
        Some(e) => {
            let kept = if report.card.is_some() && status.url.is_some() {
                "; the last good card stays served"
            } else {
                ""
            };
            condition(
                &prev,
                SOURCE_REACHABLE,
                false,
                e.reason,
                format!("{}{kept}", e.message),
                card.metadata.generation,
                &now,
            )
        }
    };
    status.conditions.push(cond);
    status.source = Some(Box::new(report.status.clone()));
    if status.url.is_some() {
        for note in &report.notes {
            if !status.warnings.contains(note) {
                status.warnings.push(note.clone());
            }
        }
    }
}

/// `(status, reason)` of the Ready condition, to detect transitions.
pub fn ready_state(status: Option<&AgentCardStatus>) -> Option<(String, String)> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Condition type: the Gateways accepted the card's HTTPRoutes (HTTPRoute routing only).
pub const ROUTED: &str = "Routed";

/// Record what routes the card and, with HTTPRoutes, the Gateways' verdict as `Routed`
/// (`routed` = `(status, reason, message)`); a card served nowhere has no routes to report.
/// Report a served card signed with keys that no longer sign (`retired`): its latest edit
/// failed, so it was not signed again with the current keys. The Signed condition says so;
/// the retired keys stay in the JWKS while it is served.
pub fn set_retired_signature(
    status: &mut AgentCardStatus,
    card: &AgentCard,
    retired: &[String],
    now: Time,
) {
    if retired.is_empty() || status.url.is_none() {
        return;
    }
    let prev = previous_conditions(card);
    status.conditions.retain(|c| c.type_ != SIGNED);
    status.conditions.push(condition(
        &prev,
        SIGNED,
        true,
        "SignedWithRetiredKey",
        format!(
            "the served card is signed with key {}, which no longer signs; it is signed again with the current keys once its spec is valid (the key stays in the JWKS until then)",
            retired.join(", ")
        ),
        card.metadata.generation,
        &now,
    ));
}

pub fn set_routing(
    status: &mut AgentCardStatus,
    card: &AgentCard,
    kind: crate::controller::routing::RouteKind,
    routed: Option<(String, String, String)>,
    now: Time,
) {
    let prev = previous_conditions(card);
    status.conditions.retain(|c| c.type_ != ROUTED);
    if status.url.is_none() {
        status.route_kind = None;
        return;
    }
    status.route_kind = Some(kind.as_str().to_string());
    if let Some((state, reason, message)) = routed {
        status.conditions.push(condition_with(
            &prev,
            ROUTED,
            &state,
            &reason,
            message,
            card.metadata.generation,
            &now,
        ));
    }
}
