//! Drift: the card a declared card's agent serves itself, compared with the card published for
//! it, for the `Drifted` condition.
//!
//! Data flow, for a card whose drift mode is `Report` (the default with `spec.backend` and no
//! `spec.source`): after the pipeline published it, [`Drifts::look`] fetches the agent's own
//! card when due (every `spec.drift.intervalSeconds`): [`super::source::target`] resolves the
//! backend Service to one of this namespace's own Pods (every rule of import holds: nothing
//! else is ever requested), [`super::source::fetch`] GETs it, [`crate::a2a::import::import`]
//! reads it (v1.0, or v0.3 converted). [`compare`] (pure) then sets it against the card as
//! published ([`super::card::effective_card`]): [`crate::a2a::drift::differences`]. The
//! fetched card is cached, not the comparison, so an edit of the published card is compared
//! at once. Drift never blocks publishing: an agent that serves no card leaves the condition
//! `Unknown`, saying why.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::source::{fetch, target, Fetched, SourceError, Sources};
use crate::a2a::card::AgentCard as A2aCard;
use crate::a2a::drift::{differences, Difference};
use crate::crd::{AgentCard, DriftMode, Source, SourceService};

/// Condition type: how the published card differs from the card the agent serves itself.
pub const DRIFTED: &str = "Drifted";
/// How often the agent's card is fetched by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);
/// How soon a failed look is tried again after its first failure; doubling per failure in a
/// row, up to the card's interval (an agent still starting is compared soon, one that serves
/// no card costs a look an interval).
pub const RETRY_FIRST: Duration = Duration::from_secs(5);
/// Most differences a condition message lists (the rest are counted).
pub const MAX_LISTED: usize = 10;

/// Whether `card` is compared with its agent's own card: `spec.drift.mode`, by default
/// `Report` for a card with a backend that is not imported.
pub fn mode(card: &AgentCard) -> DriftMode {
    let default = if card.spec.backend.is_some() && card.spec.source.is_none() {
        DriftMode::Report
    } else {
        DriftMode::Off
    };
    card.spec
        .drift
        .as_ref()
        .and_then(|d| d.mode)
        .unwrap_or(default)
}

/// How often `card`'s agent is asked for its card.
pub fn interval(card: &AgentCard) -> Duration {
    card.spec
        .drift
        .as_ref()
        .and_then(|d| d.interval_seconds)
        .and_then(|s| u64::try_from(s.clamp(30, 86_400)).ok())
        .map_or(DEFAULT_INTERVAL, Duration::from_secs)
}

/// Where the agent's own card is fetched from: the backend Service and port, and the drift
/// path (as a [`Source`], so import's resolution and fetch serve).
fn agent_source(card: &AgentCard) -> Option<Source> {
    let backend = card.spec.backend.as_ref()?;
    Some(Source {
        service: SourceService {
            name: backend.service_name.clone(),
            port: backend.port,
        },
        path: card.spec.drift.as_ref().and_then(|d| d.path.clone()),
        refresh_seconds: None,
        extended_card: None,
    })
}

/// What the last look at an agent's own card found.
#[derive(Clone, Debug)]
pub struct Look {
    /// The agent's card (`Ok`, with the URL it came from) or why it could not be read.
    pub served: Result<(String, A2aCard), SourceError>,
}

/// The comparison of a published card with its agent's card, for the condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The agent's card differs: each difference, and the URL it was fetched from.
    Drifted {
        /// Where the agent's card was read.
        url: String,
        /// What differs, structural first.
        differences: Vec<Difference>,
    },
    /// The agent serves what is published (but for what the publisher rewrites).
    InSync {
        /// Where the agent's card was read.
        url: String,
    },
    /// No comparison: the agent's card could not be fetched or read.
    NotCompared(SourceError),
}

impl Verdict {
    /// The condition's status, reason and message.
    pub fn condition(&self) -> (&'static str, &'static str, String) {
        match self {
            Verdict::Drifted { url, differences } => {
                let structural = differences.iter().filter(|d| d.structural).count();
                let reason = if structural > 0 {
                    "StructuralDrift"
                } else {
                    "DescriptiveDrift"
                };
                let listed: Vec<String> = differences
                    .iter()
                    .take(MAX_LISTED)
                    .map(ToString::to_string)
                    .collect();
                let more = differences.len().saturating_sub(MAX_LISTED);
                let more = if more > 0 {
                    format!("; and {more} more")
                } else {
                    String::new()
                };
                (
                    "True",
                    reason,
                    format!(
                        "{} difference(s) ({structural} structural) between the published card and what {url} serves: {}{more}",
                        differences.len(),
                        listed.join("; ")
                    ),
                )
            }
            Verdict::InSync { url } => (
                "False",
                "InSync",
                format!("{url} serves what is published (interface URLs and signatures aside)"),
            ),
            Verdict::NotCompared(e) => (
                "Unknown",
                "NotCompared",
                format!(
                    "the agent's own card could not be compared ({}): {}",
                    e.reason, e.message
                ),
            ),
        }
    }
}

/// The verdict of `look` against the card as published (pure).
pub fn compare(published: &A2aCard, look: &Look) -> Verdict {
    match &look.served {
        Err(e) => Verdict::NotCompared(e.clone()),
        Ok((url, served)) => {
            let found = differences(published, served);
            if found.is_empty() {
                Verdict::InSync { url: url.clone() }
            } else {
                Verdict::Drifted {
                    url: url.clone(),
                    differences: found,
                }
            }
        }
    }
}

/// The last look at each card's agent (by card uid), with when it was made and for which
/// source, so reconciles between two looks (every status write triggers one) reuse it.
#[derive(Default)]
pub struct Drifts {
    looks: Mutex<HashMap<String, Kept>>,
}

/// One card's last look: when, at what, what it found, and how many looks in a row failed.
struct Kept {
    at: Instant,
    source: Source,
    look: Look,
    failures: u32,
}

impl Kept {
    /// How long after `at` the next look is due, for a card looked at every `every`.
    fn due_after(&self, every: Duration) -> Duration {
        if self.failures == 0 {
            return every;
        }
        let doublings = self.failures.saturating_sub(1).min(16);
        RETRY_FIRST.saturating_mul(1 << doublings).min(every)
    }
}

impl Drifts {
    /// The look at `card`'s agent: the last one while it is fresh, else a new fetch. `None`
    /// when drift is off for the card (and its last look is forgotten).
    pub async fn look(&self, sources: &Sources, card: &AgentCard) -> Option<Look> {
        let uid = card.uid().unwrap_or_default();
        let source = agent_source(card).filter(|_| mode(card) == DriftMode::Report);
        let Some(source) = source else {
            self.forget(&uid);
            return None;
        };
        if let Some(fresh) = self.fresh(&uid, &source, interval(card)) {
            return Some(fresh);
        }
        let ns = card.namespace().unwrap_or_default();
        let at = Instant::now();
        let look = Look {
            served: fetch_card(sources, &ns, &source).await,
        };
        let mut looks = crate::locks::lock(&self.looks);
        let failures = match (&look.served, looks.get(&uid).filter(|k| k.source == source)) {
            (Ok(_), _) => 0,
            (Err(_), Some(before)) => before.failures.saturating_add(1),
            (Err(_), None) => 1,
        };
        looks.insert(
            uid,
            Kept {
                at,
                source,
                look: look.clone(),
                failures,
            },
        );
        Some(look)
    }

    /// How soon `card`'s agent is due another look (`None`: drift is off, or never looked).
    pub fn due(&self, card: &AgentCard) -> Option<Duration> {
        let uid = card.uid().unwrap_or_default();
        let looks = crate::locks::lock(&self.looks);
        let kept = looks.get(&uid)?;
        Some(
            kept.due_after(interval(card))
                .saturating_sub(kept.at.elapsed()),
        )
    }

    /// The last look at `uid`'s `source`, while it is due no new one (a failed look is retried
    /// sooner: [`RETRY_FIRST`], doubling, up to the interval).
    fn fresh(&self, uid: &str, source: &Source, every: Duration) -> Option<Look> {
        let looks = crate::locks::lock(&self.looks);
        let kept = looks.get(uid).filter(|k| k.source == *source)?;
        (kept.at.elapsed() < kept.due_after(every)).then(|| kept.look.clone())
    }

    /// Forget the card `uid` (deleted, or drift turned off).
    pub fn forget(&self, uid: &str) {
        crate::locks::lock(&self.looks).remove(uid);
    }
}

/// GET the agent's own card through import's path and read it as import does.
async fn fetch_card(
    sources: &Sources,
    namespace: &str,
    source: &Source,
) -> Result<(String, A2aCard), SourceError> {
    let target = target(&sources.client, &sources.reach, namespace, source).await?;
    let (body, path) = match fetch(&sources.http()?, &target, source, None).await? {
        Fetched::Body { body, path, .. } => (body, path),
        // Only sent with an ETag, which drift never sends.
        Fetched::NotModified => {
            return Err(SourceError {
                reason: "Unreachable",
                message: format!("{}: 304 to a request without an ETag", target.service_url),
            })
        }
    };
    let url = format!("{}{path}", target.service_url);
    let invalid = |what: String| SourceError {
        reason: "InvalidCard",
        message: format!("{url}: {what}"),
    };
    let value: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("not JSON ({} bytes): {e}", body.len())))?;
    let imported = crate::a2a::import::import(&value)
        .map_err(|p| invalid(format!("not an Agent Card: {p}")))?;
    Ok((url, imported.card))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declared(spec: serde_json::Value) -> AgentCard {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"namespace": "team", "name": "echo", "uid": "u1"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn drift_is_reported_by_default_only_for_declared_cards_with_a_backend() {
        let backend = json!({"serviceName": "echo", "port": 80});
        let publish = json!({"host": "echo.example.com"});
        let with_backend = declared(json!({"publish": publish, "backend": backend, "card": {}}));
        assert_eq!(mode(&with_backend), DriftMode::Report);
        assert_eq!(interval(&with_backend), DEFAULT_INTERVAL);
        let plain = declared(json!({"publish": publish, "card": {}}));
        assert_eq!(mode(&plain), DriftMode::Off);
        let imported = declared(json!({"publish": publish, "backend": backend,
            "source": {"service": {"name": "echo", "port": 80}}}));
        assert_eq!(mode(&imported), DriftMode::Off);
        let off = declared(json!({"publish": publish, "backend": backend, "card": {},
            "drift": {"mode": "Off"}}));
        assert_eq!(mode(&off), DriftMode::Off);
        let often = declared(json!({"publish": publish, "backend": backend, "card": {},
            "drift": {"intervalSeconds": 45, "path": "/card.json"}}));
        assert_eq!(interval(&often), Duration::from_secs(45));
        assert_eq!(
            agent_source(&often).unwrap().path.as_deref(),
            Some("/card.json")
        );
        assert_eq!(agent_source(&often).unwrap().service.name, "echo");
    }

    #[test]
    fn failed_looks_are_retried_sooner_first_then_every_interval() {
        let kept = |failures| Kept {
            at: Instant::now(),
            source: Source::default(),
            look: Look {
                served: Err(SourceError {
                    reason: "Unreachable",
                    message: String::new(),
                }),
            },
            failures,
        };
        let every = Duration::from_secs(300);
        let after: Vec<u64> = (0..8).map(|f| kept(f).due_after(every).as_secs()).collect();
        assert_eq!(after, [300, 5, 10, 20, 40, 80, 160, 300]);
        assert_eq!(kept(40).due_after(every).as_secs(), 300);
        assert_eq!(kept(3).due_after(Duration::from_secs(30)).as_secs(), 20);
    }

    #[test]
    fn the_condition_lists_differences_structural_first_and_bounded() {
        let card = |skills: serde_json::Value| -> A2aCard {
            serde_json::from_value(json!({
                "name": "Echo", "description": "d", "version": "1",
                "supportedInterfaces": [{"url": "https://e.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
                "skills": skills
            }))
            .unwrap()
        };
        let skill = |id: &str| json!({"id": id, "name": id, "description": "d", "tags": ["t"]});
        let published = card(json!((0..12)
            .map(|i| skill(&format!("s{i}")))
            .collect::<Vec<_>>()));
        let url = "http://echo.team.svc:80/.well-known/agent-card.json".to_string();
        let served = Look {
            served: Ok((url.clone(), card(json!([skill("s0")])))),
        };
        let (status, reason, message) = compare(&published, &served).condition();
        assert_eq!((status, reason), ("True", "StructuralDrift"));
        assert!(
            message.starts_with("11 difference(s) (11 structural)"),
            "{message}"
        );
        assert!(
            message.contains(
                "$.skills[1]: published but not served: skill \"s1\" removed (SkillRemoved)"
            ),
            "{message}"
        );
        assert!(message.ends_with("; and 1 more"), "{message}");
        let same = Look {
            served: Ok((url.clone(), published.clone())),
        };
        assert_eq!(compare(&published, &same), Verdict::InSync { url });
        let gone = Look {
            served: Err(SourceError {
                reason: "Unreachable",
                message: "http://echo.team.svc:80/.well-known/agent-card.json: HTTP 404 Not Found"
                    .into(),
            }),
        };
        let (status, reason, message) = compare(&published, &gone).condition();
        assert_eq!((status, reason), ("Unknown", "NotCompared"));
        assert!(message.contains("404"), "{message}");
    }
}
