//! Lifecycle: what `spec.lifecycle` makes of a published card (pure, given a lookup of the
//! cluster's cards).
//!
//! Data flow: [`resolve`] reads the spec's state, message, sunset and successor, finds the
//! successor among the cluster's cards (its identifier and, when served, its URL) and keeps
//! the time the card entered its state across reconciles (from the served route, or for a
//! retired card from `status.retiredAt`, which outlives the route). The result rides on the
//! served route ([`ServedLifecycle`]): the card server sends the `Deprecation`, `Sunset` and
//! `Link` headers or answers 410 from it, and the directories show it. A retired card past
//! its retention is unpublished ([`Error::Retired`]). A successor that is missing or retired
//! itself is a warning (the `Successor` condition), never an error.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;

use crate::controller::error::Error;
use crate::crd::{AgentCard, LifecycleState, ServedLifecycle};

/// Condition type (cards naming a successor): the successor exists and is not retired.
pub const SUCCESSOR: &str = "Successor";

/// How soon a card whose successor is missing looks again (the successor may be on its way).
pub const SUCCESSOR_RECHECK: Duration = Duration::from_secs(60);

/// How soon a card whose successor is not served yet looks for its URL again.
pub const SUCCESSOR_PENDING: Duration = Duration::from_secs(5);

/// What is wrong with a card's successor (its `SuccessorReady` condition says so).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuccessorProblem {
    /// `SuccessorNotFound`, `SuccessorIsSelf` or `SuccessorRetired`.
    pub reason: &'static str,
    /// What a user reads, naming the field.
    pub message: String,
}

/// What the lifecycle adds to a publication.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The lifecycle as served (`None` while active).
    pub served: Option<Box<ServedLifecycle>>,
    /// What is wrong with the successor.
    pub problem: Option<SuccessorProblem>,
    /// When a retired card was retired (kept in `status.retiredAt`).
    pub retired_at: Option<String>,
    /// When to look again (the end of a retired card's 410 period).
    pub recheck: Option<Duration>,
}

/// The directory identifier of a card: `urn:air:<host>:<namespace>:<name>`.
pub fn identifier(card: &AgentCard) -> String {
    let host = card
        .status
        .as_ref()
        .and_then(|s| s.served.as_ref())
        .map_or_else(
            || card.spec.publish.host.to_ascii_lowercase(),
            |r| r.host.clone(),
        );
    format!(
        "urn:air:{host}:{}:{}",
        card.namespace().unwrap_or_default(),
        card.name_any()
    )
}

fn is_retired(card: &AgentCard) -> bool {
    card.spec
        .lifecycle
        .as_ref()
        .is_some_and(|l| l.state == LifecycleState::Retired)
}

/// The lifecycle of `card` at `now`; `find(namespace, name)` looks a card up in the cluster.
pub fn resolve(
    card: &AgentCard,
    find: &dyn Fn(&str, &str) -> Option<Arc<AgentCard>>,
    retention_seconds: u64,
    now: jiff::Timestamp,
) -> Result<Resolved, Error> {
    let Some(spec) = card.spec.lifecycle.as_deref() else {
        return Ok(Resolved::default());
    };
    if spec.state == LifecycleState::Active {
        return Ok(Resolved::default());
    }
    let status = card.status.as_ref();
    let previous = status
        .and_then(|s| s.served.as_ref())
        .and_then(|r| r.lifecycle.as_deref())
        .filter(|l| l.state == spec.state);
    let since = match spec.state {
        LifecycleState::Retired => status
            .and_then(|s| s.retired_at.clone())
            .unwrap_or_else(|| now.to_string()),
        _ => previous.map_or_else(|| now.to_string(), |l| l.since.clone()),
    };
    let (successor, successor_url, problem) = successor(card, find);
    // A successor of this cluster not served yet: its URL is looked for again shortly.
    let waiting = successor.is_some()
        && successor_url.is_none()
        && problem.is_none()
        && spec.successor.as_ref().is_some_and(|s| s.name.is_some());
    let mut resolved = Resolved {
        problem,
        recheck: waiting.then_some(SUCCESSOR_PENDING),
        ..Resolved::default()
    };
    let mut served = ServedLifecycle {
        state: spec.state,
        since: since.clone(),
        message: spec.message.clone(),
        sunset: spec.sunset.clone(),
        successor,
        successor_url,
        gone_until: None,
    };
    if spec.state == LifecycleState::Retired {
        let start: jiff::Timestamp = since.parse().unwrap_or(now);
        let retention = i64::try_from(retention_seconds).unwrap_or(i64::MAX);
        let until = start
            .checked_add(jiff::SignedDuration::from_secs(retention))
            .unwrap_or(jiff::Timestamp::MAX);
        if now >= until {
            return Err(Error::Retired {
                since,
                until: until.to_string(),
            });
        }
        served.gone_until = Some(until.to_string());
        resolved.retired_at = Some(since);
        let gone = Duration::from_secs(
            u64::try_from(until.as_second() - now.as_second()).unwrap_or(0) + 1,
        );
        resolved.recheck = Some(resolved.recheck.map_or(gone, |r| r.min(gone)));
    }
    resolved.served = Some(Box::new(served));
    Ok(resolved)
}

/// The successor's identifier, URL (when it is a served card of this cluster) and what is
/// wrong with it.
fn successor(
    card: &AgentCard,
    find: &dyn Fn(&str, &str) -> Option<Arc<AgentCard>>,
) -> (Option<String>, Option<String>, Option<SuccessorProblem>) {
    let Some(s) = card
        .spec
        .lifecycle
        .as_deref()
        .and_then(|l| l.successor.as_ref())
    else {
        return (None, None, None);
    };
    let own_ns = card.namespace().unwrap_or_default();
    let (ns, name, given) = match (&s.name, &s.identifier) {
        (Some(name), _) => (
            s.namespace.clone().unwrap_or_else(|| own_ns.clone()),
            name.clone(),
            None,
        ),
        (None, Some(id)) => {
            let id = crate::directory::ard::canonical_identifier(id);
            let (ns, name) = crate::directory::feed::card_of(&id);
            (ns.to_string(), name.to_string(), Some(id))
        }
        (None, None) => return (None, None, None),
    };
    // Another namespace's card counts only while it is served (public anyway): a tenant must
    // not learn from this condition whether an unpublished card exists elsewhere.
    let found = find(&ns, &name)
        .filter(|c| given.as_ref().is_none_or(|id| identifier(c) == *id))
        .filter(|c| ns == own_ns || c.status.as_ref().is_some_and(|s| s.served.is_some()));
    let Some(next) = found else {
        return match given {
            // An agent elsewhere: named by its identifier, nothing to check here.
            Some(id) => (Some(id), None, None),
            None => (
                None,
                None,
                Some(SuccessorProblem {
                    reason: "SuccessorNotFound",
                    message: if ns == own_ns {
                        format!("spec.lifecycle.successor: AgentCard {ns}/{name} does not exist")
                    } else {
                        format!("spec.lifecycle.successor: no AgentCard {ns}/{name} is served")
                    },
                }),
            ),
        };
    };
    let id = identifier(&next);
    if next.namespace().unwrap_or_default() == own_ns && next.name_any() == card.name_any() {
        return (
            None,
            None,
            Some(SuccessorProblem {
                reason: "SuccessorIsSelf",
                message: "spec.lifecycle.successor: names this card itself".into(),
            }),
        );
    }
    let url = next
        .status
        .as_ref()
        .filter(|st| st.served.is_some())
        .and_then(|st| st.url.clone());
    let problem = is_retired(&next).then(|| SuccessorProblem {
        reason: "SuccessorRetired",
        message: format!("spec.lifecycle.successor: AgentCard {ns}/{name} is retired itself"),
    });
    (Some(id), url, problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(name: &str, lifecycle: serde_json::Value, status: serde_json::Value) -> AgentCard {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": name, "namespace": "agents"},
            "spec": {"card": {"name": "n", "description": "d", "version": "1",
                    "skills": [{"id": "s", "name": "s", "description": "d", "tags": ["t"]}],
                    "supportedInterfaces": [{"url": "https://x/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                    "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"]},
                "publish": {"host": format!("{name}.example.com")},
                "lifecycle": lifecycle},
            "status": status
        }))
        .unwrap()
    }

    fn now() -> jiff::Timestamp {
        "2026-12-02T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn an_active_card_has_no_lifecycle_to_serve() {
        let c = card("a", json!({"state": "Active"}), json!({}));
        let r = resolve(&c, &|_, _| None, 60, now()).unwrap();
        assert!(r.served.is_none() && r.problem.is_none());
    }

    #[test]
    fn a_deprecated_card_names_its_served_successor_and_keeps_its_date() {
        let next = Arc::new(card(
            "b",
            serde_json::Value::Null,
            json!({"url": "https://b.example.com/.well-known/agent-card.json",
                "served": {"host": "b.example.com", "maxAgeSeconds": 300, "publishedAt": "x", "since": "x"}}),
        ));
        let find =
            move |ns: &str, name: &str| (ns == "agents" && name == "b").then(|| next.clone());
        let c = card(
            "a",
            json!({"state": "Deprecated", "sunset": "2027-06-30", "successor": {"name": "b"}}),
            json!({"served": {"host": "a.example.com", "maxAgeSeconds": 300, "publishedAt": "x", "since": "x",
                "lifecycle": {"state": "Deprecated", "since": "2026-11-01T00:00:00Z"}}}),
        );
        let r = resolve(&c, &find, 60, now()).unwrap();
        let s = r.served.unwrap();
        assert_eq!(s.since, "2026-11-01T00:00:00Z");
        assert_eq!(
            s.successor.as_deref(),
            Some("urn:air:b.example.com:agents:b")
        );
        assert_eq!(
            s.successor_url.as_deref(),
            Some("https://b.example.com/.well-known/agent-card.json")
        );
        assert_eq!(s.sunset.as_deref(), Some("2027-06-30"));
        assert!(r.problem.is_none());
    }

    #[test]
    fn a_missing_or_retired_successor_is_a_warning() {
        let c = card(
            "a",
            json!({"state": "Deprecated", "successor": {"name": "gone"}}),
            json!({}),
        );
        let r = resolve(&c, &|_, _| None, 60, now()).unwrap();
        assert_eq!(r.problem.unwrap().reason, "SuccessorNotFound");
        assert!(r.served.is_some(), "still served, deprecated");
        let retired = Arc::new(card("b", json!({"state": "Retired"}), json!({})));
        let r = resolve(&c, &|_, _| Some(retired.clone()), 60, now()).unwrap();
        assert_eq!(r.problem.unwrap().reason, "SuccessorRetired");
        let by_id = card(
            "a",
            json!({"state": "Deprecated", "successor": {"identifier": "urn:ai:elsewhere.example:x:y"}}),
            json!({}),
        );
        let r = resolve(&by_id, &|_, _| None, 60, now()).unwrap();
        assert!(r.problem.is_none(), "an agent elsewhere is not checked");
        assert_eq!(
            r.served.unwrap().successor.as_deref(),
            Some("urn:air:elsewhere.example:x:y")
        );
    }

    #[test]
    fn another_namespaces_unserved_card_is_not_disclosed() {
        let hidden = Arc::new(card("b", serde_json::Value::Null, json!({})));
        let c = card(
            "a",
            json!({"state": "Deprecated", "successor": {"name": "b", "namespace": "other"}}),
            json!({}),
        );
        let r = resolve(&c, &|_, _| Some(hidden.clone()), 60, now()).unwrap();
        let SuccessorProblem { reason, message } = r.problem.unwrap();
        assert_eq!(reason, "SuccessorNotFound");
        assert!(
            message.contains("no AgentCard other/b is served"),
            "{message}"
        );
        // The same card in the card's own namespace is named, served or not.
        let own = card(
            "a",
            json!({"state": "Deprecated", "successor": {"name": "b"}}),
            json!({}),
        );
        let r = resolve(&own, &|_, _| Some(hidden.clone()), 60, now()).unwrap();
        assert!(r.problem.is_none());
    }

    #[test]
    fn a_retired_card_is_gone_for_its_retention_then_unpublished() {
        let c = card("a", json!({"state": "Retired"}), json!({}));
        let r = resolve(&c, &|_, _| None, 60, now()).unwrap();
        let s = r.served.unwrap();
        assert_eq!(s.gone_until.as_deref(), Some("2026-12-02T12:01:00Z"));
        assert_eq!(r.retired_at.as_deref(), Some("2026-12-02T12:00:00Z"));
        assert_eq!(r.recheck, Some(Duration::from_secs(61)));
        let later = card(
            "a",
            json!({"state": "Retired"}),
            json!({"retiredAt": "2026-12-02T11:00:00Z"}),
        );
        assert!(matches!(
            resolve(&later, &|_, _| None, 60, now()),
            Err(Error::Retired { .. })
        ));
    }
}
