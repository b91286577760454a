//! Federation: the entries a directory lists from other registries (its `spec.upstreams`),
//! beside its own cards, each with where it came from.
//!
//! Data flow, every import pointing down: [`sync`] keeps one task per directory and upstream,
//! each reading its upstream ([`feed`]: another directory's change feed; [`ard`]: any ARD
//! registry) through the guarded HTTP [`client`], turning each card into an entry or a
//! refusal ([`card`]) held within `maxEntries` ([`state`]), and putting what it holds into the
//! process's [`Federation`] ([`Federation::set`]), which wakes the cluster feed. When it
//! rebuilds a directory's site it asks for the upstreams' entries in the order the spec
//! lists them and [`merge`]s them under the local cards (an identifier is the local card's,
//! then the first upstream's), recording per upstream what was listed and shadowed
//! ([`Federation::set_report`]). The lease holder's directory controller turns the syncs and
//! reports into `status.upstreams` ([`Federation::status`]). Why a refresh failed is an
//! [`Error`].
//!
//! Safety: requests go only to the URLs the AgentDirectory names (a cluster-scoped object,
//! written by cluster admins) and, for ARD cards, to URLs on the same origin; redirects to
//! another origin are refused; every response is read within a size limit and a timeout.

mod ard;
mod card;
mod client;
mod error;
mod feed;
mod state;
mod sync;

pub use error::{Error, Problem, UrlProblem};
pub use sync::{registry_identifier, spawn, Reader, Refreshed};

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use super::entry::Entry;
use crate::crd::agentdirectory::{Upstream, UpstreamStatus};
use crate::locks::lock;

/// Where a federated entry came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The upstream's name in the directory's spec.
    pub upstream: String,
    /// Where the card was read (the card's URL, or the upstream's for an inline card).
    pub url: String,
    /// When it was read (RFC 3339).
    pub fetched_at: String,
    /// Whether a signature verified with the upstream's trusted keys.
    pub verified: bool,
    /// The upstream it was read from, as the directory's spec names it (its URL): where the
    /// operator read it, never what the upstream claims. (The APIs show it as a list of one,
    /// as operators before `path` did.)
    pub via: String,
    /// The registries it passed through as the upstreams say, the first where it is published
    /// and the last the upstream it was read from (identifiers of directories, or URLs of other
    /// registries). A claim, used only to cut loops: a directory finding itself here is reading
    /// its own entries back, and refuses them (an upstream lying here can only have its own
    /// entries refused).
    pub path: Vec<String>,
}

/// One upstream as this replica last synced it.
#[derive(Clone, Debug, Default)]
pub struct Synced {
    /// The entries taken, by identifier.
    pub entries: Arc<Vec<Arc<Entry>>>,
    /// Entries refused at the last sync.
    pub refused: usize,
    /// The first refusal, saying which entry and why.
    pub first_refusal: Option<String>,
    /// When it last answered in full (RFC 3339).
    pub last_sync: Option<String>,
    /// When it last answered in full.
    pub last_ok: Option<Instant>,
    /// Whether its last refresh reached it.
    pub reachable: bool,
    /// What went wrong at the last refresh.
    pub error: Option<String>,
}

/// What the merge made of one upstream's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Entries listed.
    pub listed: usize,
    /// Entries left out because an earlier source lists their identifier.
    pub shadowed: usize,
    /// The first of those.
    pub first_shadowed: Option<String>,
}

/// The process's federated entries and what became of them.
#[derive(Default)]
pub struct Federation {
    synced: Mutex<HashMap<(String, String), Synced>>,
    reports: Mutex<HashMap<(String, String), Report>>,
    changed: watch::Sender<u64>,
}

impl Federation {
    /// Record upstream `upstream` of directory `dir` as just synced; the sites are rebuilt
    /// only when its entries changed (a refresh that found nothing new costs no rebuild).
    pub fn set(&self, dir: &str, upstream: &str, synced: Synced) {
        let key = (dir.to_string(), upstream.to_string());
        let old = lock(&self.synced).insert(key, synced.clone());
        let same = old.is_some_and(|o| {
            o.entries.len() == synced.entries.len()
                && o.entries
                    .iter()
                    .zip(synced.entries.iter())
                    .all(|(a, b)| Arc::ptr_eq(a, b))
        });
        if !same {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Forget upstreams of `dir` not in `keep` (no longer in its spec, or `dir` gone).
    pub fn retain(&self, dir: &str, keep: &HashSet<String>) {
        let mut synced = lock(&self.synced);
        let before = synced.len();
        synced.retain(|(d, u), _| d != dir || keep.contains(u));
        if synced.len() != before {
            drop(synced);
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Forget every directory but those in `dirs`.
    pub fn retain_directories(&self, dirs: &HashSet<String>) {
        let mut synced = lock(&self.synced);
        let before = synced.len();
        synced.retain(|(d, _), _| dirs.contains(d));
        if synced.len() != before {
            drop(synced);
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Every `(directory, upstream, reachable)` this replica syncs: whether its last refresh
    /// reached it (an upstream not refreshed yet counts as unreachable).
    pub fn reachability(&self) -> Vec<(String, String, bool)> {
        lock(&self.synced)
            .iter()
            .map(|((d, u), s)| (d.clone(), u.clone(), s.reachable))
            .collect()
    }

    /// Upstream `upstream` of `dir` as last synced.
    pub fn synced(&self, dir: &str, upstream: &str) -> Option<Synced> {
        lock(&self.synced)
            .get(&(dir.to_string(), upstream.to_string()))
            .cloned()
    }

    /// The entries of `dir`'s upstreams, in the order given.
    pub fn entries(&self, dir: &str, upstreams: &[String]) -> Vec<(String, Arc<Vec<Arc<Entry>>>)> {
        let synced = lock(&self.synced);
        upstreams
            .iter()
            .filter_map(|u| {
                let s = synced.get(&(dir.to_string(), u.clone()))?;
                Some((u.clone(), s.entries.clone()))
            })
            .collect()
    }

    /// Record what the merge made of `dir`'s upstreams.
    pub fn set_report(&self, dir: &str, report: Vec<(String, Report)>) {
        let mut reports = lock(&self.reports);
        reports.retain(|(d, _), _| d != dir);
        for (u, r) in report {
            reports.insert((dir.to_string(), u), r);
        }
    }

    /// A receiver that sees each sync.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// `status.upstreams` of a directory with `upstreams`, from this replica's syncs and
    /// merges.
    pub fn status(&self, dir: &str, upstreams: &[Upstream]) -> Vec<UpstreamStatus> {
        let synced = lock(&self.synced);
        let reports = lock(&self.reports);
        upstreams
            .iter()
            .map(|u| {
                let key = (dir.to_string(), u.name.clone());
                let s = synced.get(&key).cloned().unwrap_or_default();
                let Report {
                    listed,
                    shadowed,
                    first_shadowed,
                } = reports.get(&key).cloned().unwrap_or_default();
                let message = s
                    .error
                    .clone()
                    .or(s.first_refusal.clone())
                    .or(first_shadowed.map(|id| {
                        format!("{id} is listed already (a local card, or an earlier upstream's)")
                    }));
                UpstreamStatus {
                    name: u.name.clone(),
                    entries: i64::try_from(listed).unwrap_or(i64::MAX),
                    shadowed: i64::try_from(shadowed).unwrap_or(i64::MAX),
                    refused: i64::try_from(s.refused).unwrap_or(i64::MAX),
                    last_sync: s.last_sync.clone(),
                    reachable: s.reachable,
                    message,
                }
            })
            .collect()
    }
}

/// The local entries, then each upstream's whose identifier is not listed yet, in order;
/// with what became of each upstream's.
pub fn merge(
    local: Vec<Arc<Entry>>,
    upstreams: &[(String, Arc<Vec<Arc<Entry>>>)],
) -> (Vec<Arc<Entry>>, Vec<(String, Report)>) {
    let mut taken: HashSet<String> = local.iter().map(|e| e.identifier.clone()).collect();
    let mut out = local;
    let mut reports = Vec::new();
    for (name, entries) in upstreams {
        let mut report = Report::default();
        for e in entries.iter() {
            if taken.insert(e.identifier.clone()) {
                out.push(e.clone());
                report.listed += 1;
            } else {
                report.shadowed += 1;
                report
                    .first_shadowed
                    .get_or_insert_with(|| e.identifier.clone());
            }
        }
        reports.push((name.clone(), report));
    }
    (out, reports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::entry::Placement;
    use bytes::Bytes;

    fn entry(ns: &str, name: &str, from: Option<&str>) -> Arc<Entry> {
        let placement = Placement {
            namespace: ns.into(),
            name: name.into(),
            host: format!("{name}.example"),
            url: format!("https://{name}.example/.well-known/agent-card.json"),
            ..Placement::default()
        };
        let body = format!(r#"{{"name":"{name}","description":"d","skills":[]}}"#);
        let e = Entry::build(placement, Bytes::from(body)).unwrap();
        Arc::new(match from {
            Some(u) => e.with_origin(Origin {
                upstream: u.into(),
                url: "https://x".into(),
                fetched_at: String::new(),
                verified: false,
                via: String::new(),
                path: vec![],
            }),
            None => e,
        })
    }

    #[test]
    fn local_cards_win_then_the_first_upstream() {
        let local = vec![entry("t", "a", None)];
        let one = Arc::new(vec![
            entry("t", "a", Some("one")),
            entry("t", "b", Some("one")),
        ]);
        let two = Arc::new(vec![
            entry("t", "b", Some("two")),
            entry("t", "c", Some("two")),
        ]);
        let (merged, reports) = merge(local, &[("one".into(), one), ("two".into(), two)]);
        let got: Vec<(String, Option<String>)> = merged
            .iter()
            .map(|e| {
                (
                    e.placement.name.clone(),
                    e.origin.as_ref().map(|o| o.upstream.clone()),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a".to_string(), None),
                ("b".to_string(), Some("one".to_string())),
                ("c".to_string(), Some("two".to_string()))
            ]
        );
        assert_eq!(reports[0].1.listed, 1);
        assert_eq!(reports[0].1.shadowed, 1);
        assert_eq!(
            reports[0].1.first_shadowed.as_deref(),
            Some("urn:air:a.example:t:a")
        );
        assert_eq!(reports[1].1.shadowed, 1);
    }
}
