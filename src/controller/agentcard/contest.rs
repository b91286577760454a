//! Two operator installations reconciling the same card: each signs with its own keys, so
//! without this each would re-sign and rewrite what the other just wrote, forever.
//!
//! Data flow at the start of each reconcile: [`others`] (pure) reads which other
//! installations the card's status names (`status.operator`, the one that last published it;
//! `status.contenders`, those found contending) → [`alive`] keeps those whose leader Lease is
//! held and current → none: the pipeline runs as usual and its status names this installation
//! alone → some: [`held_status`] (pure) is the status to hold, the current one with every
//! contender listed and the `Conflict` condition; it is written only when it differs, so once
//! both installations have seen the conflict neither writes at all. No ConfigMap, route or
//! claim is touched: the card stays as last published. The reconcile looks again with
//! exponential backoff (up to [`MAX_RECHECK`]); when only one installation is left, its next
//! look publishes and clears the conflict.
//!
//! The status is the operators' alone (the `status` subresource), so a tenant cannot fake a
//! contender; a Lease in a namespace the tenant controls could only stall its own cards.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;

use crate::controller::conditions::condition;
use crate::controller::error::Error;
use crate::crd::{AgentCard, AgentCardStatus};
use crate::election::LEASE_NAME;

/// Condition type: another operator installation reconciles this card too.
pub const CONFLICT: &str = "Conflict";
/// The longest wait between two looks at a contested card.
pub const MAX_RECHECK: Duration = Duration::from_secs(60);

/// The installations other than `me` (an operator namespace) that `card`'s status names.
pub fn others(card: &AgentCard, me: &str) -> BTreeSet<String> {
    let Some(status) = card.status.as_ref() else {
        return BTreeSet::new();
    };
    status
        .operator
        .iter()
        .chain(&status.contenders)
        .filter(|ns| !ns.is_empty() && ns.as_str() != me)
        .cloned()
        .collect()
}

/// Whether `lease` is held and was renewed within its duration at `now`.
pub fn lease_current(lease: &Lease, now: jiff::Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return false;
    };
    let held = spec
        .holder_identity
        .as_deref()
        .is_some_and(|h| !h.is_empty());
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref());
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    held && renewed.is_some_and(|t| {
        t.0.checked_add(jiff::SignedDuration::from_secs(duration))
            .is_ok_and(|until| until > now)
    })
}

/// Those of `installations` that are running: their leader Lease is held and current.
pub async fn alive(
    client: &kube::Client,
    installations: &BTreeSet<String>,
) -> Result<BTreeSet<String>, Error> {
    let now = jiff::Timestamp::now();
    let mut running = BTreeSet::new();
    for ns in installations {
        let lease = Api::<Lease>::namespaced(client.clone(), ns)
            .get_opt(LEASE_NAME)
            .await?;
        if lease.is_some_and(|l| lease_current(&l, now)) {
            running.insert(ns.clone());
        }
    }
    Ok(running)
}

/// The error a contested card reports (metrics category, Event reason and message).
pub fn conflict_error(card: &AgentCard, me: &str, live: &BTreeSet<String>) -> Error {
    let mut installations: Vec<String> = live.iter().cloned().collect();
    installations.push(me.to_string());
    installations.sort();
    installations.dedup();
    let publisher = card
        .status
        .as_ref()
        .and_then(|s| s.operator.clone())
        .unwrap_or_default();
    Error::OperatorConflict {
        installations,
        publisher,
    }
}

/// The status a contested card holds (pure): the current one, with every contender listed
/// and the `Conflict` condition. The same whichever installation computes it, so both agree
/// and neither rewrites what the other wrote.
pub fn held_status(card: &AgentCard, error: &Error, now: &Time) -> AgentCardStatus {
    let mut status = card.status.clone().unwrap_or_default();
    if let Error::OperatorConflict { installations, .. } = error {
        status.contenders = installations.clone();
    }
    let previous = status.conditions.clone();
    let held = condition(
        &previous,
        CONFLICT,
        true,
        error.reason(),
        error.to_string(),
        card.metadata.generation,
        now,
    );
    status.conditions.retain(|c| c.type_ != CONFLICT);
    status.conditions.push(held);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(status: serde_json::Value) -> AgentCard {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": "c", "namespace": "team", "generation": 2},
            "spec": {"publish": {"host": "h.example.com"}, "card": {"name": "n"}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn the_other_installations_are_those_the_status_names() {
        assert!(others(&card(json!({})), "op-a").is_empty());
        assert!(others(&card(json!({"operator": "op-a"})), "op-a").is_empty());
        let named = others(
            &card(json!({"operator": "op-b", "contenders": ["op-a", "op-b", "op-c"]})),
            "op-a",
        );
        assert_eq!(named, ["op-b".to_string(), "op-c".to_string()].into());
    }

    #[test]
    fn both_installations_hold_the_same_status_so_neither_rewrites_the_others() {
        let now = Time("2026-12-02T00:00:00Z".parse().unwrap());
        let later = Time("2026-12-02T00:05:00Z".parse().unwrap());
        let served = card(json!({
            "operator": "op-b", "url": "https://h.example.com/.well-known/agent-card.json",
            "contentHash": "abc", "keyId": "kb",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Published",
                "message": "served", "lastTransitionTime": "2026-12-01T00:00:00Z"}]
        }));
        // op-a finds op-b's card and holds it.
        let from_a = conflict_error(&served, "op-a", &["op-b".to_string()].into());
        let held_by_a = held_status(&served, &from_a, &now);
        assert_eq!(held_by_a.contenders, ["op-a", "op-b"]);
        assert_eq!(
            held_by_a.url,
            served.status.as_ref().unwrap().url,
            "still served"
        );
        assert_eq!(held_by_a.operator.as_deref(), Some("op-b"));
        let c = held_by_a
            .conditions
            .iter()
            .find(|c| c.type_ == CONFLICT)
            .unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Conflict"));
        assert!(
            c.message.contains("op-a, op-b") && c.message.contains("op-b"),
            "{}",
            c.message
        );
        // op-b, seeing op-a's write later, computes the very same status: no write.
        let seen = card(serde_json::to_value(&held_by_a).unwrap());
        let from_b = conflict_error(&seen, "op-b", &others(&seen, "op-b"));
        assert_eq!(held_status(&seen, &from_b, &later), held_by_a);
    }

    #[test]
    fn a_lease_is_current_while_held_and_renewed_within_its_duration() {
        let lease = |holder: &str, renewed: &str| -> Lease {
            serde_json::from_value(json!({"metadata": {"name": LEASE_NAME},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}}))
            .unwrap()
        };
        let now: jiff::Timestamp = "2026-12-02T00:00:20Z".parse().unwrap();
        assert!(lease_current(
            &lease("pod-1", "2026-12-02T00:00:10.000000Z"),
            now
        ));
        assert!(!lease_current(
            &lease("pod-1", "2026-12-02T00:00:04.000000Z"),
            now
        ));
        assert!(!lease_current(
            &lease("", "2026-12-02T00:00:10.000000Z"),
            now
        ));
    }
}
