//! Status, the pipeline's last stage: the conditions and fields a reconcile reports, computed
//! from what the earlier stages found ([`next`], pure), then written once ([`write`]).
//!
//! A failed reconcile keeps the URL, hash, key id and served route of the card still being
//! served: the last good card stays published and the status says so. A card that may not
//! hold its route (conflict, host not allowed) is served nowhere: those fields are cleared, and
//! the card server, which routes by them alone, drops it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::ResourceExt;

use super::build::Built;
use super::source;
use crate::controller::conditions::{condition, condition_with, READY, ROUTED};
use crate::controller::error::Error;
use crate::controller::routes::routing::{RouteKind, Verdict};
use crate::controller::writes::apply_status;
use crate::controller::writes::seen::{Unseen, STATUS_WRITE};
use crate::crd::{AgentCard, AgentCardStatus, CardCondition};

/// Condition type: the served card carries a signature of the active key.
pub const SIGNED: &str = "Signed";
/// Condition type: the ConfigMap and Ingress are written.
pub const PUBLISHED: &str = "Published";
/// Condition type (cards with `spec.source`): the agent's card was fetched and is valid.
pub const SOURCE_REACHABLE: &str = "SourceReachable";
/// Condition type: the last edit breaks no caller of the card served before it.
pub const COMPATIBLE: &str = "Compatible";
/// Condition type (cards with `spec.backend` or `spec.source`): the agent's Service has a
/// ready endpoint on its port.
pub const BACKEND_READY: &str = "BackendReady";

/// What a reconcile found, stage by stage: the inputs of the next status.
pub struct Found<'a> {
    /// The card as reconciled (its status is the previous one).
    pub card: &'a AgentCard,
    /// The card as published: `card`, or with the imported card in `spec.card`.
    pub published: &'a AgentCard,
    /// How the pipeline ended.
    pub outcome: &'a Result<(Built, Vec<String>), Error>,
    /// What the import found (cards with `spec.source`).
    pub source: Option<&'a source::Report>,
    /// Keys that signed the card still served and no longer sign (after a failed edit).
    pub retired: &'a [String],
    /// Of those, the revoked ones (out of the JWKS: the served card no longer verifies).
    pub revoked: &'a [String],
    /// What routes cards.
    pub routing: RouteKind,
    /// The Gateways' verdict on the card's HTTPRoutes, `(status, reason, message)`.
    pub routed: Option<Verdict>,
    /// The time of this reconcile.
    pub now: Time,
    /// This operator installation (its namespace), named in the status it writes.
    pub operator: &'a str,
    /// The agent's Service as the cluster sees it, `(ready, reason, message)` (cards with a
    /// backend or source).
    pub backend: Option<crate::controller::agentcard::backends::Verdict>,
    /// How the published card compares with the agent's own (`None`: not looked at in this
    /// reconcile; the last verdict stands while drift is on).
    pub drift: Option<&'a super::drift::Verdict>,
}

/// The status after a reconcile that found `found` (pure).
pub fn next(found: &Found<'_>) -> AgentCardStatus {
    let mut status = match found.outcome {
        Ok((built, warnings)) => published(found, built, warnings),
        Err(e) => failed(found, e),
    };
    if let Some(report) = found.source {
        set_source(&mut status, found, report);
    }
    if found.outcome.is_err() {
        set_retired_signature(&mut status, found);
    }
    set_routing(&mut status, found);
    set_compatible(&mut status, found);
    set_successor(&mut status, found);
    set_backend(&mut status, found);
    set_drift(&mut status, found);
    let retired = found
        .card
        .spec
        .lifecycle
        .as_ref()
        .is_some_and(|l| l.state == crate::crd::LifecycleState::Retired);
    match found.outcome {
        Ok((built, _)) => status.retired_at = built.retired_at.clone(),
        Err(_) if !retired => status.retired_at = None,
        Err(_) => {}
    }
    status.origin = Some(crate::crd::Word::new(
        crate::controller::discovery::select::origin(found.card),
    ));
    // Written by this installation alone: any conflict is over.
    status.operator = Some(found.operator.to_string());
    status.contenders.clear();
    status
        .conditions
        .retain(|c| c.type_ != super::contest::CONFLICT);
    status
}

/// The conditions `card` had before this reconcile (their transition times are kept).
fn previous_conditions(card: &AgentCard) -> Vec<CardCondition> {
    card.status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// The previous status, for this generation.
fn carried(card: &AgentCard) -> AgentCardStatus {
    AgentCardStatus {
        observed_generation: card.metadata.generation,
        ..card.status.clone().unwrap_or_default()
    }
}

/// The Signed condition's message: which keys signed, and when the active key will while a
/// rotation waits for every cached JWKS to hold it.
fn signed_message(built: &Built) -> String {
    let mut keys = if built.key_ids.len() > 1 {
        format!("signed with keys {}", built.key_ids.join(", "))
    } else {
        format!("signed with key {}", built.key_id)
    };
    if !built.revoked_keys.is_empty() {
        keys.push_str(&format!(
            ", not with revoked key {}",
            built.revoked_keys.join(", ")
        ));
    }
    match &built.pending_key {
        Some(p) => format!(
            "{keys}; key {} is published and signs from {} (one JWKS max-age after it was published)",
            p.kid, p.at
        ),
        None => keys,
    }
}

/// A published card: every condition True, the served route and bytes recorded.
fn published(found: &Found<'_>, built: &Built, warnings: &[String]) -> AgentCardStatus {
    let card = found.card;
    let (generation, now) = (card.metadata.generation, &found.now);
    let conds = previous_conditions(card);
    let msg = format!("served at {}", built.url);
    let mut status = carried(card);
    status.conditions = vec![
        condition(
            &conds,
            READY,
            true,
            "Published",
            msg.clone(),
            generation,
            now,
        ),
        condition(
            &conds,
            SIGNED,
            true,
            "Signed",
            signed_message(built),
            generation,
            now,
        ),
        condition(&conds, PUBLISHED, true, "Published", msg, generation, now),
    ];
    status.url = Some(built.url.clone());
    status.served = Some(built.served.clone());
    status.content_hash = Some(built.content_hash.clone());
    status.revision = built.revision.or(status.revision);
    status.key_id = Some(built.key_id.clone());
    status.config_map = built.configmap.metadata.name.clone();
    status.extended_card = built.extended.as_ref().map(|e| {
        Box::new(crate::crd::ExtendedCardStatus {
            config_map: e.configmap.metadata.name.clone().unwrap_or_default(),
            content_hash: e.content_hash.clone(),
        })
    });
    status.warnings = warnings.to_vec();
    status.skills = Some(
        found
            .published
            .spec
            .card
            .iter()
            .flat_map(|c| c.skills.iter())
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>()
            .join(","),
    );
    status
}

/// A failed reconcile: Ready and Published False with the reason; the last good card's fields
/// kept unless the card lost its route.
fn failed(found: &Found<'_>, e: &Error) -> AgentCardStatus {
    let card = found.card;
    let (generation, now) = (card.metadata.generation, &found.now);
    let conds = previous_conditions(card);
    let was_served = card.status.as_ref().is_some_and(|s| s.url.is_some());
    let mut status = carried(card);
    if e.loses_claim() {
        status.url = None;
        status.content_hash = None;
        status.key_id = None;
        status.config_map = None;
        status.extended_card = None;
        status.served = None;
    }
    let kept = match &status.url {
        Some(url) => format!("; the last good card stays served at {url}"),
        None if e.loses_claim() && was_served => "; the card is no longer served".to_string(),
        None => String::new(),
    };
    let message = format!("{e}{kept}");
    let signed = match conds.iter().find(|c| c.type_ == SIGNED) {
        _ if matches!(e, Error::KeyUnavailable(_) | Error::Signing(_)) => condition(
            &conds,
            SIGNED,
            false,
            e.reason(),
            e.to_string(),
            generation,
            now,
        ),
        Some(c) => c.clone(),
        None => condition(
            &conds,
            SIGNED,
            false,
            e.reason(),
            "not signed: the card was not built".into(),
            generation,
            now,
        ),
    };
    status.conditions = vec![
        condition(
            &conds,
            READY,
            false,
            e.reason(),
            message.clone(),
            generation,
            now,
        ),
        signed,
        condition(
            &conds,
            PUBLISHED,
            false,
            e.reason(),
            message,
            generation,
            now,
        ),
    ];
    status
}

/// The source fields and the `SourceReachable` condition of a card with `spec.source`, after
/// `report`; the import's notes join the warnings of a published card.
fn set_source(status: &mut AgentCardStatus, found: &Found<'_>, report: &source::Report) {
    let card = found.card;
    let prev = previous_conditions(card);
    status.conditions.retain(|c| c.type_ != SOURCE_REACHABLE);
    let (ok, reason, message) = match &report.error {
        None => {
            let url = &report.status.url;
            if report.not_modified {
                (true, "NotModified", format!("{url}: not modified"))
            } else {
                let converted = match report.status.version.as_deref() {
                    Some("0.3") => " (a v0.3 card, converted to v1.0)",
                    _ => "",
                };
                (true, "Fetched", format!("fetched from {url}{converted}"))
            }
        }
        Some(e) => {
            let kept = if report.card.is_some() && status.url.is_some() {
                "; the last good card stays served"
            } else {
                ""
            };
            (false, e.reason, format!("{}{kept}", e.message))
        }
    };
    status.conditions.push(condition(
        &prev,
        SOURCE_REACHABLE,
        ok,
        reason,
        message,
        card.metadata.generation,
        &found.now,
    ));
    status.source = Some(Box::new(report.status.clone()));
    if status.url.is_some() {
        for note in &report.notes {
            if !status.warnings.contains(note) {
                status.warnings.push(note.clone());
            }
        }
    }
}

/// Report a served card signed with keys that no longer sign (`found.retired`): its latest
/// edit failed, so it was not signed again with the current keys. The Signed condition says
/// so; the retired keys stay in the JWKS while it is served.
fn set_retired_signature(status: &mut AgentCardStatus, found: &Found<'_>) {
    if found.retired.is_empty() || status.url.is_none() {
        return;
    }
    let prev = previous_conditions(found.card);
    status.conditions.retain(|c| c.type_ != SIGNED);
    let (ok, reason, message) = if found.revoked.is_empty() {
        (
            true,
            "SignedWithRetiredKey",
            format!(
                "the served card is signed with key {}, which no longer signs; it is signed again with the current keys once its spec is valid (the key stays in the JWKS until then)",
                found.retired.join(", ")
            ),
        )
    } else {
        (
            false,
            "SignedWithRevokedKey",
            format!(
                "the served card is signed with revoked key {}, which left the JWKS: clients cannot verify it until it is signed again, once its spec is valid",
                found.revoked.join(", ")
            ),
        )
    };
    status.conditions.push(condition(
        &prev,
        SIGNED,
        ok,
        reason,
        message,
        found.card.metadata.generation,
        &found.now,
    ));
}

/// Record what routes the card and, with HTTPRoutes, the Gateways' verdict as `Routed`; a
/// card served nowhere has no routes to report.
fn set_routing(status: &mut AgentCardStatus, found: &Found<'_>) {
    let prev = previous_conditions(found.card);
    status.conditions.retain(|c| c.type_ != ROUTED);
    if status.url.is_none() {
        status.route_kind = None;
        return;
    }
    status.route_kind = Some(crate::crd::Word::new(found.routing.as_str()));
    if let Some(verdict) = &found.routed {
        status.conditions.push(condition_with(
            &prev,
            ROUTED,
            &verdict.status,
            &verdict.reason,
            verdict.message.clone(),
            found.card.metadata.generation,
            &found.now,
        ));
    }
}

/// The `Compatible` condition: what the last compared edit broke (kept as it was while
/// nothing new was compared, e.g. on a resync of the same card).
fn set_compatible(status: &mut AgentCardStatus, found: &Found<'_>) {
    use super::compatibility::Compared;
    let prev = previous_conditions(found.card);
    let policy = found.card.spec.publish.compatibility.unwrap_or_default();
    let next = match found.outcome {
        Err(e @ Error::Incompatible { .. }) => Some(("False", "BreakingChange", e.to_string())),
        Ok((built, _)) => match &built.breaking {
            Compared::Changed(f) if f.is_empty() => Some((
                "True",
                "Compatible",
                "no breaking change from the card served before".to_string(),
            )),
            Compared::Changed(f) => {
                let list: Vec<String> = f.iter().map(ToString::to_string).collect();
                let (reason, how) = match policy {
                    crate::crd::Compatibility::RequireMajorVersion => {
                        ("MajorVersionBumped", "published with a major version bump")
                    }
                    _ => (
                        "BreakingChange",
                        "published (spec.publish.compatibility: Warn)",
                    ),
                };
                Some((
                    "False",
                    reason,
                    format!("{how}; breaks callers: {}", list.join("; ")),
                ))
            }
            Compared::Unknown => Some((
                "Unknown",
                "NotCompared",
                "the card served was published while the operator restarted or its leader changed, before its status was written; the card it replaced is no longer known, so what it broke cannot be said. The next edit is compared again".to_string(),
            )),
            Compared::Unchanged | Compared::Resigned => None,
        },
        Err(_) => None,
    };
    if let Some((state, reason, message)) = next {
        status.conditions.retain(|c| c.type_ != COMPATIBLE);
        status.conditions.push(condition_with(
            &prev,
            COMPATIBLE,
            state,
            reason,
            message,
            found.card.metadata.generation,
            &found.now,
        ));
    } else if let Some(c) = prev.iter().find(|c| c.type_ == COMPATIBLE) {
        status.conditions.retain(|x| x.type_ != COMPATIBLE);
        status.conditions.push(c.clone());
    }
}

/// The `Successor` condition of a card naming a successor (a warning when it is missing or
/// retired; the card is published regardless).
fn set_successor(status: &mut AgentCardStatus, found: &Found<'_>) {
    let prev = previous_conditions(found.card);
    status
        .conditions
        .retain(|c| c.type_ != super::lifecycle::SUCCESSOR);
    let named = found
        .card
        .spec
        .lifecycle
        .as_ref()
        .is_some_and(|l| l.successor.is_some());
    let Ok((built, _)) = found.outcome else {
        if let Some(c) = prev.iter().find(|c| c.type_ == super::lifecycle::SUCCESSOR) {
            if named {
                status.conditions.push(c.clone());
            }
        }
        return;
    };
    if !named {
        return;
    }
    let (ok, reason, message) = match &built.successor_problem {
        Some(p) => (false, p.reason, p.message.clone()),
        None => {
            let to = built
                .served
                .lifecycle
                .as_ref()
                .and_then(|l| l.successor.clone())
                .unwrap_or_default();
            (true, "SuccessorFound", format!("successor {to}"))
        }
    };
    status.conditions.push(condition(
        &prev,
        super::lifecycle::SUCCESSOR,
        ok,
        reason,
        message,
        found.card.metadata.generation,
        &found.now,
    ));
}

/// The `BackendReady` condition of a card with a backend or source.
fn set_backend(status: &mut AgentCardStatus, found: &Found<'_>) {
    let prev = previous_conditions(found.card);
    status.conditions.retain(|c| c.type_ != BACKEND_READY);
    let has_backend = crate::controller::agentcard::backends::service_of(found.card).is_some();
    if found.backend.is_none() && has_backend {
        // The Service could not be read: the last verdict stands.
        if let Some(c) = prev.iter().find(|c| c.type_ == BACKEND_READY) {
            status.conditions.push(c.clone());
        }
    }
    if let Some(verdict) = &found.backend {
        status.conditions.push(condition(
            &prev,
            BACKEND_READY,
            verdict.ready,
            verdict.reason,
            verdict.message.clone(),
            found.card.metadata.generation,
            &found.now,
        ));
    }
}

/// The `Drifted` condition: the verdict of this reconcile, else the last one while drift is on;
/// none while it is off.
fn set_drift(status: &mut AgentCardStatus, found: &Found<'_>) {
    use super::drift::{mode, DRIFTED};
    let prev = previous_conditions(found.card);
    status.conditions.retain(|c| c.type_ != DRIFTED);
    if mode(found.card) == crate::crd::DriftMode::Off {
        return;
    }
    match found.drift {
        Some(verdict) => {
            let (state, reason, message) = verdict.condition();
            status
                .conditions
                .push(crate::controller::conditions::condition_with(
                    &prev,
                    DRIFTED,
                    state,
                    reason,
                    message,
                    found.card.metadata.generation,
                    &found.now,
                ));
        }
        None => {
            if let Some(c) = prev.iter().find(|c| c.type_ == DRIFTED) {
                status.conditions.push(c.clone());
            }
        }
    }
}

/// The `Drifted` condition of `status` as the metrics count it (status and reason, from the
/// fixed set [`super::drift::Verdict::condition`] gives).
pub fn drift_state(status: &AgentCardStatus) -> Option<crate::controller::metrics::ReadyState> {
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == super::drift::DRIFTED)?;
    let fixed = |s: &str, set: &[&'static str]| set.iter().copied().find(|x| *x == s);
    Some(crate::controller::metrics::ReadyState {
        status: fixed(&c.status, &["True", "False", "Unknown"])?,
        reason: fixed(
            &c.reason,
            &[
                "StructuralDrift",
                "DescriptiveDrift",
                "InSync",
                "NotCompared",
            ],
        )?,
    })
}

/// What of a condition a transition is judged by: its status, and its message or reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionState {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The message ([`condition_state`]) or the reason ([`ready_state`]).
    pub detail: String,
}

/// The status and message of a condition, to detect transitions worth an Event.
pub fn condition_state(status: Option<&AgentCardStatus>, type_: &str) -> Option<ConditionState> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| ConditionState {
            status: c.status.to_string(),
            detail: c.message.clone(),
        })
}

/// The status and reason of the Ready condition, to detect transitions.
pub fn ready_state(status: Option<&AgentCardStatus>) -> Option<ConditionState> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .map(|c| ConditionState {
            status: c.status.to_string(),
            detail: c.reason.to_string(),
        })
}

/// Write `next` as `card`'s status when it differs from the one the card carries, and remember
/// the write in `statuses` until the card watch shows it. `true` when written.
pub async fn write(
    api: &Api<AgentCard>,
    card: &AgentCard,
    next: &AgentCardStatus,
    statuses: &Unseen<AgentCardStatus>,
) -> Result<bool, Error> {
    if card.status.as_ref() == Some(next) {
        return Ok(false);
    }
    let (ns, name) = (card.namespace().unwrap_or_default(), card.name_any());
    let version = card.resource_version();
    apply_status(api, &name, next).await?;
    tracing::debug!(card = %format!("{ns}/{name}"), ?version, before = ?card.status, after = ?next, "status written");
    statuses.remember(STATUS_WRITE, &ns, &name, version.as_deref(), next.clone());
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(status: serde_json::Value) -> AgentCard {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": "c", "namespace": "n", "uid": "u", "generation": 3},
            "spec": {"publish": {"host": "h.example.com"}, "card": {"name": "n",
                "skills": [{"id": "a"}, {"id": "b"}]}},
            "status": status
        }))
        .unwrap()
    }

    fn found<'a>(
        card: &'a AgentCard,
        outcome: &'a Result<(Built, Vec<String>), Error>,
    ) -> Found<'a> {
        Found {
            card,
            published: card,
            outcome,
            source: None,
            retired: &[],
            revoked: &[],
            routing: RouteKind::Ingress,
            routed: None,
            now: Time("2026-12-02T00:00:00Z".parse().unwrap()),
            operator: "agentcard-system",
            backend: None,
            drift: None,
        }
    }

    fn served() -> serde_json::Value {
        json!({"url": "https://h.example.com/.well-known/agent-card.json", "contentHash": "abc",
               "keyId": "k1", "configMap": "agentcard-c", "routeKind": "Ingress",
               "served": {"host": "h.example.com", "pathPrefix": "", "legacyPath": false,
                          "maxAgeSeconds": 300, "publishedAt": "t", "since": "t"},
               "conditions": [{"type": "Ready", "status": "True", "reason": "Published",
                   "message": "served", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    }

    fn condition_of<'a>(s: &'a AgentCardStatus, t: &str) -> &'a CardCondition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn every_card_condition_type_and_the_published_reasons_are_words_of_the_vocabulary() {
        let words = [
            READY,
            SIGNED,
            PUBLISHED,
            ROUTED,
            SOURCE_REACHABLE,
            COMPATIBLE,
            BACKEND_READY,
            super::super::drift::DRIFTED,
            super::super::contest::CONFLICT,
            super::super::lifecycle::SUCCESSOR,
            "Published",
            "Signed",
            "True",
            "False",
        ];
        for word in words {
            assert!(crate::crd::Word::new(word).is_known(), "{word}");
        }
        // A condition as the controller makes it, and as the store reads it back, holds no
        // heap copy of its type, status or reason.
        let now = Time("2026-12-02T00:00:00Z".parse().unwrap());
        let made: CardCondition = condition(&[], READY, true, "Published", "m".into(), None, &now);
        let stored: CardCondition =
            serde_json::from_value(serde_json::to_value(&made).unwrap()).unwrap();
        for c in [made, stored] {
            assert!(c.type_.is_known() && c.status.is_known() && c.reason.is_known());
        }
    }

    #[test]
    fn an_invalid_edit_keeps_the_last_good_card_and_says_so() {
        let c = card(served());
        let outcome = Err(Error::InvalidSpec(crate::a2a::Problems(vec![
            crate::a2a::Problem::error("spec.card.skills[1].id", "duplicate"),
        ])));
        let s = next(&found(&c, &outcome));
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.content_hash.as_deref(), Some("abc"));
        let ready = condition_of(&s, READY);
        assert_eq!(ready.status, "False");
        assert!(
            ready.message.contains("spec.card.skills[1].id"),
            "{}",
            ready.message
        );
        assert!(ready.message.contains("stays served"), "{}", ready.message);
        assert_eq!(s.route_kind.as_deref(), Some("Ingress"));
    }

    #[test]
    fn a_lost_route_clears_what_the_server_routes_by() {
        let c = card(served());
        let outcome = Err(Error::HostNotAllowed {
            host: "h.example.com".into(),
            namespace: "n".into(),
            operator: vec![],
            namespace_list: vec![],
        });
        let s = next(&found(&c, &outcome));
        assert!(s.url.is_none() && s.served.is_none() && s.content_hash.is_none());
        assert!(s.route_kind.is_none());
        assert!(condition_of(&s, READY).message.contains("no longer served"));
        // The Ready condition went False now; Signed had none and says why.
        assert_eq!(
            condition_of(&s, READY).last_transition_time,
            Time("2026-12-02T00:00:00Z".parse().unwrap())
        );
        assert_eq!(condition_of(&s, SIGNED).status, "False");
    }

    #[test]
    fn retired_keys_are_reported_only_while_a_card_is_served() {
        let c = card(served());
        let outcome = Err(Error::InvalidSpec(crate::a2a::Problems(vec![])));
        let retired = ["old".to_string()];
        let f = Found {
            retired: &retired,
            ..found(&c, &outcome)
        };
        let s = next(&f);
        assert_eq!(condition_of(&s, SIGNED).reason, "SignedWithRetiredKey");
        let revoked = Found {
            retired: &retired,
            revoked: &retired,
            ..found(&c, &outcome)
        };
        let status = next(&revoked);
        let signed = condition_of(&status, SIGNED);
        assert_eq!(
            (signed.status.as_str(), signed.reason.as_str()),
            ("False", "SignedWithRevokedKey")
        );
        let unserved = card(json!({}));
        let f = Found {
            retired: &retired,
            ..found(&unserved, &outcome)
        };
        assert_ne!(
            condition_of(&next(&f), SIGNED).reason,
            "SignedWithRetiredKey"
        );
    }

    #[test]
    fn a_status_written_by_one_installation_alone_names_it_and_no_conflict() {
        let mut held = served();
        held["operator"] = json!("other-system");
        held["contenders"] = json!(["agentcard-system", "other-system"]);
        held["conditions"] = json!([{"type": "Conflict", "status": "True", "reason": "Conflict",
            "message": "two", "lastTransitionTime": "2026-12-01T00:00:00Z"}]);
        let c = card(held);
        let outcome = Err(Error::InvalidSpec(crate::a2a::Problems(vec![])));
        let s = next(&found(&c, &outcome));
        assert_eq!(s.operator.as_deref(), Some("agentcard-system"));
        assert!(s.contenders.is_empty());
        assert!(s.conditions.iter().all(|c| c.type_ != "Conflict"), "{s:?}");
    }
}
