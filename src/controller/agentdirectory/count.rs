//! How many cards each directory lists (`status.cards`) and, under `admission:
//! ApprovalRequired`, how many it selects by verdict (`status.approvals`), kept in step with the watches at
//! O(directories) per card event: counting every card for every directory at each card event
//! cost O(cards × directories) per event, which a bulk publish pays thousands of times.
//!
//! Data flow: the card, Namespace and AgentDirectory fan-outs send [`Recount`]s to one task
//! ([`run`]), which keeps a [`Tally`] (pure: each card's directories, each directory's count)
//! in [`Counts`], where reconciles read it. A card event looks at that card
//! against each directory; a directory event counts that directory over every card; a
//! Namespace event or a (re-)list counts everything again (rare). Each directory whose count
//! changed is sent to the directory controller, and only those.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use crate::crd::agentdirectory::{Admission, AgentDirectorySpec, ApprovalCounts};
use crate::crd::{AgentCard, AgentDirectory, ApprovalState, ApprovalStatus};
use crate::directory::select;

/// What changed, as the fan-outs tell the counting task.
pub enum Recount {
    /// A card was applied.
    Card(Arc<AgentCard>),
    /// A card is gone.
    CardGone(Arc<AgentCard>),
    /// A directory was applied (its selectors may have changed).
    Directory(Arc<AgentDirectory>),
    /// A directory is gone.
    DirectoryGone(Arc<AgentDirectory>),
    /// Count everything again (a Namespace changed, or a watch re-listed).
    All,
}

/// The counts the reconciles read: the counting task's [`Tally`], behind a lock held for no
/// `.await`.
#[derive(Default)]
pub struct Counts {
    tally: Mutex<Tally>,
}

impl Counts {
    /// How many cards directory `name` lists, once counted.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.lock().count(name)
    }

    /// Directory `name`'s selected cards by verdict, when it requires approval.
    pub fn approvals(&self, name: &str) -> Option<ApprovalCounts> {
        self.lock().approvals(name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        crate::locks::lock(&self.tally)
    }
}

/// A card as counting sees it: listable at all (published, not being deleted), its labels and
/// its namespace's, and the verdicts its status holds.
pub struct Seen<'a> {
    /// `namespace/name`.
    pub key: String,
    /// Published and not being deleted.
    pub published: bool,
    /// The card's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Its namespace's labels.
    pub namespace_labels: &'a BTreeMap<String, String>,
    /// `status.approvals`.
    pub approvals: &'a [ApprovalStatus],
}

impl Seen<'_> {
    /// The verdict of directory `name` (`spec`) on it; `None` when it does not select it.
    pub fn verdict(&self, name: &str, spec: &AgentDirectorySpec) -> Option<ApprovalState> {
        (self.published && select::selected(spec, self.namespace_labels, self.labels))
            .then(|| select::verdict(name, spec, self.approvals))
    }
}

/// Cards per verdict (indexed by [`slot`]); `Approved` is the number listed.
type PerState = [i64; 4];

/// The slot of `state` in [`PerState`].
fn slot(state: ApprovalState) -> usize {
    match state {
        ApprovalState::Approved => 0,
        ApprovalState::Pending => 1,
        ApprovalState::Rejected => 2,
        ApprovalState::Voided => 3,
    }
}

/// Each directory's spec and counts, and each card's verdict by the directories selecting it.
#[derive(Default)]
pub struct Tally {
    directories: HashMap<Arc<str>, (AgentDirectorySpec, PerState)>,
    cards: HashMap<String, Vec<(Arc<str>, ApprovalState)>>,
}

impl Tally {
    /// The count of directory `name` (the cards it lists).
    pub fn count(&self, name: &str) -> Option<i64> {
        self.directories
            .get(name)
            .map(|(_, c)| c[slot(ApprovalState::Approved)])
    }

    /// Directory `name`'s selected cards by verdict, when it requires approval.
    pub fn approvals(&self, name: &str) -> Option<ApprovalCounts> {
        let (spec, c) = self.directories.get(name)?;
        (spec.admission == Admission::ApprovalRequired).then(|| ApprovalCounts {
            approved: c[slot(ApprovalState::Approved)],
            pending: c[slot(ApprovalState::Pending)],
            rejected: c[slot(ApprovalState::Rejected)],
            voided: c[slot(ApprovalState::Voided)],
        })
    }

    /// Card `card` changed (or went: `None` with its key): the directories whose counts moved.
    pub fn card(&mut self, key: &str, card: Option<&Seen<'_>>) -> Vec<Arc<str>> {
        let now: Vec<(Arc<str>, ApprovalState)> = match card {
            Some(c) => self
                .directories
                .iter()
                .filter_map(|(name, (spec, _))| Some((name.clone(), c.verdict(name, spec)?)))
                .collect(),
            None => Vec::new(),
        };
        let before = if now.is_empty() {
            self.cards.remove(key).unwrap_or_default()
        } else {
            self.cards
                .insert(key.to_string(), now.clone())
                .unwrap_or_default()
        };
        let mut moved = Vec::new();
        for (name, state) in before.iter().filter(|d| !now.contains(d)) {
            if let Some((_, counts)) = self.directories.get_mut(name) {
                counts[slot(*state)] -= 1;
                moved.push(name.clone());
            }
        }
        for (name, state) in now.iter().filter(|d| !before.contains(d)) {
            if let Some((_, counts)) = self.directories.get_mut(name) {
                counts[slot(*state)] += 1;
                if !moved.contains(name) {
                    moved.push(name.clone());
                }
            }
        }
        moved
    }

    /// Directory `name` is now `spec` (or gone): count it over `cards` again. Whether its
    /// counts changed (a new directory's always do).
    pub fn directory<'a>(
        &mut self,
        name: &str,
        spec: Option<&AgentDirectorySpec>,
        cards: impl Iterator<Item = Seen<'a>>,
    ) -> bool {
        // Its own status writes come back as events: the same selection counts the same.
        if spec.is_some() && self.directories.get(name).map(|(s, _)| s) == spec {
            return false;
        }
        let before = self.directories.remove(name).map(|(_, c)| c);
        for listing in self.cards.values_mut() {
            listing.retain(|(d, _)| d.as_ref() != name);
        }
        self.cards.retain(|_, l| !l.is_empty());
        let Some(spec) = spec else {
            return before.is_some();
        };
        let name: Arc<str> = name.into();
        let mut counts = PerState::default();
        for card in cards {
            if let Some(state) = card.verdict(&name, spec) {
                counts[slot(state)] += 1;
                self.cards
                    .entry(card.key)
                    .or_default()
                    .push((name.clone(), state));
            }
        }
        self.directories.insert(name, (spec.clone(), counts));
        before != Some(counts)
    }

    /// Count every directory over every card again: the directories whose counts changed.
    pub fn everything<'a, I>(
        &mut self,
        directories: &[(String, AgentDirectorySpec)],
        cards: impl Fn() -> I,
    ) -> Vec<Arc<str>>
    where
        I: Iterator<Item = Seen<'a>>,
    {
        let before: HashMap<Arc<str>, PerState> = self
            .directories
            .iter()
            .map(|(n, (_, c))| (n.clone(), *c))
            .collect();
        *self = Tally::default();
        for (name, spec) in directories {
            self.directory(name, Some(spec), cards());
        }
        let mut moved: Vec<Arc<str>> = self
            .directories
            .iter()
            .filter(|(n, (_, c))| before.get(*n) != Some(c))
            .map(|(n, _)| n.clone())
            .collect();
        moved.extend(
            before
                .into_keys()
                .filter(|n| !self.directories.contains_key(n)),
        );
        moved
    }
}

/// The stores counting reads.
pub struct Stores {
    /// Every card.
    pub cards: Store<AgentCard>,
    /// Every Namespace (their labels select cards).
    pub namespaces: Store<Namespace>,
    /// Every directory.
    pub directories: Store<AgentDirectory>,
}

/// How counting sees `card`, in a namespace with `namespace_labels`.
fn seen<'a>(card: &'a AgentCard, namespace_labels: &'a BTreeMap<String, String>) -> Seen<'a> {
    let published = card.metadata.deletion_timestamp.is_none()
        && card
            .status
            .as_ref()
            .is_some_and(|s| s.url.is_some() && s.content_hash.is_some() && s.served.is_some());
    Seen {
        key: format!(
            "{}/{}",
            card.metadata.namespace.as_deref().unwrap_or_default(),
            card.name_any()
        ),
        published,
        labels: card.labels(),
        namespace_labels,
        approvals: card
            .status
            .as_ref()
            .map(|s| s.approvals.as_slice())
            .unwrap_or_default(),
    }
}

/// The labels of every Namespace.
fn namespace_labels(namespaces: &Store<Namespace>) -> HashMap<String, BTreeMap<String, String>> {
    namespaces
        .state()
        .iter()
        .map(|n| (n.name_any(), n.labels().clone()))
        .collect()
}

/// Keep `counts` until `recounts` ends, sending each directory whose count changed to
/// `changed`. What a recount reads from the stores is gathered before the lock is taken.
pub async fn run(
    sources: Stores,
    counts: Arc<Counts>,
    mut recounts: UnboundedReceiver<Recount>,
    changed: UnboundedSender<ObjectRef<AgentDirectory>>,
) {
    let none = BTreeMap::new();
    while let Some(event) = recounts.next().await {
        let moved: Vec<Arc<str>> = match event {
            Recount::Card(card) => {
                let ns = card.metadata.namespace.clone().unwrap_or_default();
                let labels = sources
                    .namespaces
                    .get(&ObjectRef::new(&ns))
                    .map(|n| n.labels().clone())
                    .unwrap_or_default();
                let now = seen(&card, &labels);
                counts.lock().card(&now.key, Some(&now))
            }
            Recount::CardGone(card) => counts.lock().card(&seen(&card, &none).key, None),
            Recount::Directory(dir) => {
                let (cards, labels) =
                    (sources.cards.state(), namespace_labels(&sources.namespaces));
                let each = cards.iter().map(|c| {
                    let ns = c.metadata.namespace.as_deref().unwrap_or_default();
                    seen(c, labels.get(ns).unwrap_or(&none))
                });
                let name = dir.name_any();
                if counts.lock().directory(&name, Some(&dir.spec), each) {
                    vec![name.into()]
                } else {
                    Vec::new()
                }
            }
            Recount::DirectoryGone(dir) => {
                counts
                    .lock()
                    .directory(&dir.name_any(), None, std::iter::empty());
                Vec::new()
            }
            Recount::All => {
                let (cards, labels) =
                    (sources.cards.state(), namespace_labels(&sources.namespaces));
                let dirs: Vec<(String, AgentDirectorySpec)> = sources
                    .directories
                    .state()
                    .iter()
                    .map(|d| (d.name_any(), d.spec.clone()))
                    .collect();
                counts.lock().everything(&dirs, || {
                    cards.iter().map(|c| {
                        let ns = c.metadata.namespace.as_deref().unwrap_or_default();
                        seen(c, labels.get(ns).unwrap_or(&none))
                    })
                })
            }
        };
        for name in moved {
            let _ = changed.unbounded_send(ObjectRef::new(&name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(selector: serde_json::Value) -> AgentDirectorySpec {
        serde_json::from_value(json!({"cardSelector": selector, "publish": {"host": "d.test"}}))
            .unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn card<'a>(key: &str, published: bool, l: &'a BTreeMap<String, String>) -> Seen<'a> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        Seen {
            key: key.into(),
            published,
            labels: l,
            namespace_labels: &NONE,
            approvals: &[],
        }
    }

    #[test]
    fn a_card_event_moves_only_the_counts_of_the_directories_it_enters_or_leaves() {
        let (a, b, none) = (
            labels(&[("team", "a")]),
            labels(&[("team", "b")]),
            labels(&[]),
        );
        let mut t = Tally::default();
        assert!(t.directory("all", Some(&spec(json!({}))), std::iter::empty()));
        let only_a = spec(json!({"matchLabels": {"team": "a"}}));
        assert!(t.directory("a", Some(&only_a), [card("ns/x", true, &a)].into_iter()));
        assert_eq!((t.count("all"), t.count("a")), (Some(0), Some(1)));
        // The card it counted is seen by the other directory too once its event comes.
        let moved = t.card("ns/x", Some(&card("ns/x", true, &a)));
        assert_eq!(moved, vec![Arc::<str>::from("all")]);
        // Relabelled: leaves "a" only.
        let moved = t.card("ns/x", Some(&card("ns/x", true, &b)));
        assert_eq!(moved, vec![Arc::<str>::from("a")]);
        assert_eq!((t.count("all"), t.count("a")), (Some(1), Some(0)));
        // Unpublished, then gone: nothing more moves the second time.
        assert_eq!(t.card("ns/x", Some(&card("ns/x", false, &none))).len(), 1);
        assert!(t.card("ns/x", None).is_empty());
        assert_eq!(t.count("all"), Some(0));
    }

    #[test]
    fn a_directory_event_recounts_it_unless_its_selection_is_the_same() {
        let a = labels(&[("team", "a")]);
        let mut t = Tally::default();
        let cards = || [card("ns/x", true, &a), card("ns/y", true, &a)].into_iter();
        assert!(t.directory("d", Some(&spec(json!({}))), cards()));
        assert!(!t.directory("d", Some(&spec(json!({}))), cards()));
        assert_eq!(t.count("d"), Some(2));
        let other = spec(json!({"matchLabels": {"team": "b"}}));
        assert!(t.directory("d", Some(&other), cards()));
        assert_eq!(t.count("d"), Some(0));
        assert!(t.directory("d", None, std::iter::empty()));
        assert_eq!(t.count("d"), None);
        assert!(t.card("ns/x", Some(&card("ns/x", true, &a))).is_empty());
    }

    #[test]
    fn counting_everything_reports_the_directories_that_changed() {
        let a = labels(&[("team", "a")]);
        let mut t = Tally::default();
        let dirs = vec![("d".to_string(), spec(json!({})))];
        let moved = t.everything(&dirs, || [card("ns/x", true, &a)].into_iter());
        assert_eq!(moved, vec![Arc::<str>::from("d")]);
        let moved = t.everything(&dirs, || [card("ns/x", true, &a)].into_iter());
        assert!(moved.is_empty());
        let moved = t.everything(&[], std::iter::empty);
        assert_eq!(moved, vec![Arc::<str>::from("d")]);
    }
}
