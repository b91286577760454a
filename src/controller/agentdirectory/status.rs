//! Status: what a directory reports after a reconcile (pure): Ready with the number of cards
//! it lists, the route every replica serves it by, and with HTTPRoutes the Gateways' verdict
//! as `Routed`. A directory that lost its host serves nothing and lists nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::controller::conditions::{condition, condition_with, READY, ROUTED, UPSTREAMS_READY};
use crate::controller::error::Error;
use crate::controller::routes::routing::Verdict;
use crate::crd::agentdirectory::{DirectoryRoute, UpstreamStatus};
use crate::crd::{AgentDirectory, AgentDirectoryStatus};

/// How much newer an upstream's `lastSync` must be to be written when nothing else about it
/// changed (each refresh would be a write otherwise).
const LAST_SYNC_STEP: i64 = 300;

/// The status after a reconcile of `dir` that ended with `outcome`, listing `cards`, with
/// the Gateways' verdict `routed` (HTTPRoute routing only) and
/// its upstreams as this replica synced them.
pub fn next(
    dir: &AgentDirectory,
    outcome: &Result<DirectoryRoute, Error>,
    cards: i64,
    routed: Option<Verdict>,
    upstreams: Vec<UpstreamStatus>,
    now: &Time,
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
    let mut conditions = vec![condition(
        &prev.conditions,
        READY,
        ok,
        &reason,
        message,
        generation,
        now,
    )];
    if let (Some(verdict), Some(_)) = (routed, &served) {
        conditions.push(condition_with(
            &prev.conditions,
            ROUTED,
            &verdict.status,
            &verdict.reason,
            verdict.message,
            generation,
            now,
        ));
    }
    let upstreams = settle_last_sync(&prev.upstreams, upstreams);
    if !dir.spec.upstreams.is_empty() {
        let down: Vec<&str> = upstreams
            .iter()
            .filter(|u| !u.reachable)
            .map(|u| u.name.as_str())
            .collect();
        let (ok, reason, message) = match down.as_slice() {
            [] => (
                true,
                "Synced",
                format!(
                    "{} entries from {} upstream(s)",
                    upstreams.iter().map(|u| u.entries).sum::<i64>(),
                    upstreams.len()
                ),
            ),
            _ => (
                false,
                "UpstreamUnreachable",
                format!(
                    "not reached at the last refresh (their last good entries stay listed): {}",
                    down.join(", ")
                ),
            ),
        };
        conditions.push(condition(
            &prev.conditions,
            UPSTREAMS_READY,
            ok,
            reason,
            message,
            generation,
            now,
        ));
    }
    AgentDirectoryStatus {
        observed_generation: generation,
        upstreams,
        conditions,
        cards: if served.is_some() { cards } else { 0 },
        approvals: prev.approvals.clone(),
        url: served
            .as_ref()
            .map(|r| format!("https://{}/.well-known/ard.json", r.host)),
        served,
    }
}

/// `now` with each upstream's previous `lastSync` kept when nothing else about it changed and
/// the new one is less than [`LAST_SYNC_STEP`] seconds newer.
fn settle_last_sync(prev: &[UpstreamStatus], now: Vec<UpstreamStatus>) -> Vec<UpstreamStatus> {
    let seconds = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
    };
    now.into_iter()
        .map(|mut u| {
            if let Some(p) = prev.iter().find(|p| p.name == u.name) {
                let same = UpstreamStatus {
                    last_sync: p.last_sync.clone(),
                    ..u.clone()
                } == *p;
                let step = match (seconds(&u.last_sync), seconds(&p.last_sync)) {
                    (Some(new), Some(old)) => new - old,
                    _ => i64::MAX,
                };
                if same && step < LAST_SYNC_STEP {
                    u.last_sync = p.last_sync.clone();
                }
            }
            u
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir() -> AgentDirectory {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
            "metadata": {"name": "all", "uid": "d-1", "generation": 2},
            "spec": {"publish": {"host": "agents.example.com"}},
            "status": {"cards": 4, "served": {"host": "agents.example.com", "pathPrefix": "",
                "since": "t"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_directory_reports_its_cards_and_loses_them_with_its_host() {
        let now = Time("2026-12-02T00:00:00Z".parse().unwrap());
        let route = DirectoryRoute {
            host: "agents.example.com".into(),
            path_prefix: String::new(),
            since: "t".into(),
        };
        let routed = Some(Verdict {
            status: "True".into(),
            reason: "Accepted".into(),
            message: "ok".into(),
        });
        let s = next(&dir(), &Ok(route), 7, routed, vec![], &now);
        assert_eq!((s.cards, s.observed_generation), (7, Some(2)));
        assert_eq!(
            s.url.as_deref(),
            Some("https://agents.example.com/.well-known/ard.json")
        );
        assert!(s
            .conditions
            .iter()
            .any(|c| c.type_ == ROUTED && c.status == "True"));
        let conflict = Err(Error::HostConflict {
            host: "agents.example.com".into(),
            prefix: String::new(),
            held: "agents.example.com/…".into(),
            owner: "team/card".into(),
            why: "",
        });
        let s = next(&dir(), &conflict, 7, None, vec![], &now);
        assert!(s.served.is_none() && s.url.is_none());
        assert_eq!(s.cards, 0);
        // A failure that keeps the host keeps serving the last good directory.
        let invalid = Err(Error::InvalidSpec(crate::a2a::Problems(vec![])));
        let s = next(&dir(), &invalid, 7, None, vec![], &now);
        assert!(s.served.is_some());
        assert_eq!(s.cards, 7);
    }
}
