//! Feed the index from the cluster: the ConfigMaps the controller publishes (label selector
//! [`PUBLISHED_SELECTOR`], all namespaces), confirmed by their AgentCards' status.
//!
//! A card ConfigMap carries the served bytes under `agent-card.json` and its routing in
//! annotations. ConfigMaps can be written by anyone allowed to write ConfigMaps in a namespace,
//! so a card is served only when its controlling owner is an AgentCard whose `status.contentHash`
//! (written by the operator alone, after its checks of the host) equals the hash of the bytes.
//! Until an update is confirmed, the last confirmed version stays served. The JWKS ConfigMap is
//! taken from the operator's own namespace only. Both watches re-list after disconnects with
//! exponential backoff; while the API server is unreachable the last known cards stay.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};

use crate::contract::*;
use crate::crd::AgentCard;
use crate::index::{CardEntry, Index, Published};

/// What a published ConfigMap means to the server.
enum Doc {
    /// A card, with the uid of its controlling AgentCard and the hash of its bytes.
    Card(CardEntry, Option<String>, String),
    Jwks(Published),
    Ignored,
}

fn timestamp(text: Option<&String>) -> Option<SystemTime> {
    let ts: jiff::Timestamp = text?.parse().ok()?;
    let secs = u64::try_from(ts.as_second()).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

fn source(cm: &ConfigMap) -> String {
    format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any())
}

fn classify(cm: &ConfigMap, operator_ns: &str) -> Doc {
    let labels = cm.labels();
    let ann = cm.annotations();
    let created = cm
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| u64::try_from(t.0.as_second()).ok())
        .map_or(UNIX_EPOCH, |s| UNIX_EPOCH + Duration::from_secs(s));
    let modified = timestamp(ann.get(ANN_PUBLISHED_AT)).unwrap_or(created);
    let max_age = ann
        .get(ANN_MAX_AGE)
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MAX_AGE);
    let data = cm.data.as_ref();
    match labels.get(LABEL_CONTENT).map(String::as_str) {
        Some(CONTENT_CARD) => {
            let (Some(host), Some(body)) = (ann.get(ANN_HOST), data.and_then(|d| d.get(KEY_CARD)))
            else {
                return Doc::Ignored;
            };
            let owner = cm
                .owner_references()
                .iter()
                .find(|o| {
                    o.kind == "AgentCard"
                        && o.api_version.starts_with("agentcard.dev/")
                        && o.controller == Some(true)
                })
                .map(|o| o.uid.clone());
            let hash = content_hash(body.as_bytes());
            Doc::Card(
                CardEntry {
                    source: source(cm),
                    host: host.trim().trim_end_matches('.').to_ascii_lowercase(),
                    prefix: normalize_prefix(ann.get(ANN_PATH_PREFIX).map_or("", String::as_str)),
                    legacy: ann.get(ANN_LEGACY_PATH).is_some_and(|v| v == "true"),
                    created,
                    content: Arc::new(Published::new(body.clone().into_bytes(), modified, max_age)),
                },
                owner,
                hash,
            )
        }
        Some(CONTENT_JWKS) if cm.namespace().as_deref() == Some(operator_ns) => match data
            .and_then(|d| d.get(KEY_JWKS))
        {
            Some(body) => Doc::Jwks(Published::new(body.clone().into_bytes(), modified, max_age)),
            None => Doc::Ignored,
        },
        _ => Doc::Ignored,
    }
}

/// A card ConfigMap waiting for (or holding) its owner's confirmation.
struct Candidate {
    entry: CardEntry,
    owner: Option<String>,
    hash: String,
}

/// The feed's view of both watches; decides what the index serves.
struct Feed {
    index: Arc<Index>,
    operator_ns: String,
    candidates: HashMap<String, Candidate>,
    /// AgentCard uid → `status.contentHash`.
    confirmed: HashMap<String, Option<String>>,
    /// AgentCard uid → sources of the candidates it owns (kept with `candidates`).
    owned: HashMap<String, HashSet<String>>,
    relist_cms: Option<HashSet<String>>,
    relist_cards: Option<HashSet<String>>,
    cms_synced: bool,
    cards_synced: bool,
}

impl Feed {
    /// Serve `source`'s candidate if its owner confirms its bytes; otherwise leave the index
    /// as it is (the last confirmed version, or nothing).
    fn settle(&self, source: &str) {
        if let Some(c) = self.candidates.get(source) {
            let ok = c
                .owner
                .as_ref()
                .and_then(|uid| self.confirmed.get(uid))
                .is_some_and(|h| h.as_deref() == Some(c.hash.as_str()));
            if ok {
                self.index.upsert(c.entry.clone());
            }
        }
    }

    fn apply_cm(&mut self, cm: &ConfigMap) {
        match classify(cm, &self.operator_ns) {
            Doc::Card(entry, owner, hash) => {
                let src = entry.source.clone();
                self.forget(&src);
                if let Some(uid) = &owner {
                    self.owned
                        .entry(uid.clone())
                        .or_default()
                        .insert(src.clone());
                }
                self.candidates
                    .insert(src.clone(), Candidate { entry, owner, hash });
                self.settle(&src);
            }
            Doc::Jwks(j) => self.index.set_jwks(Some(j)),
            Doc::Ignored => self.remove_cm(cm),
        }
    }

    fn remove_cm(&mut self, cm: &ConfigMap) {
        let src = source(cm);
        if cm.namespace().as_deref() == Some(self.operator_ns.as_str())
            && cm.labels().get(LABEL_CONTENT).map(String::as_str) == Some(CONTENT_JWKS)
        {
            self.index.set_jwks(None);
        }
        self.forget(&src);
        self.index.remove(&src);
    }

    /// Drop the candidate from `source` and its owner link.
    fn forget(&mut self, source: &str) {
        if let Some(uid) = self.candidates.remove(source).and_then(|c| c.owner) {
            if let Some(set) = self.owned.get_mut(&uid) {
                set.remove(source);
                if set.is_empty() {
                    self.owned.remove(&uid);
                }
            }
        }
    }

    fn apply_card(&mut self, card: &AgentCard) {
        let Some(uid) = card.uid() else { return };
        let hash = card.status.as_ref().and_then(|s| s.content_hash.clone());
        if self.confirmed.insert(uid.clone(), hash.clone()) == Some(hash) {
            // Most card events (spec edits, conditions) do not confirm new bytes.
            return;
        }
        let sources: Vec<String> = self
            .owned
            .get(&uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for source in sources {
            self.settle(&source);
        }
    }

    fn mark_ready(&self) {
        if self.cms_synced && self.cards_synced && !self.index.is_ready() {
            self.index.mark_ready();
            tracing::info!(cards = self.index.len(), "card index synced");
        }
    }

    fn on_cm_event(&mut self, event: Event<ConfigMap>) {
        match event {
            Event::Init => self.relist_cms = Some(HashSet::new()),
            Event::InitApply(cm) => {
                if let Some(seen) = self.relist_cms.as_mut() {
                    seen.insert(source(&cm));
                }
                self.apply_cm(&cm);
            }
            Event::InitDone => {
                if let Some(seen) = self.relist_cms.take() {
                    let gone: Vec<String> = self
                        .candidates
                        .keys()
                        .filter(|s| !seen.contains(*s))
                        .cloned()
                        .collect();
                    for s in gone {
                        self.forget(&s);
                        self.index.remove(&s);
                    }
                    for e in self.index.entries() {
                        if !seen.contains(&e.source) {
                            self.index.remove(&e.source);
                        }
                    }
                }
                self.cms_synced = true;
                self.mark_ready();
            }
            Event::Apply(cm) => self.apply_cm(&cm),
            Event::Delete(cm) => self.remove_cm(&cm),
        }
    }

    fn on_card_event(&mut self, event: Event<AgentCard>) {
        match event {
            Event::Init => self.relist_cards = Some(HashSet::new()),
            Event::InitApply(card) => {
                if let (Some(seen), Some(uid)) = (self.relist_cards.as_mut(), card.uid()) {
                    seen.insert(uid);
                }
                self.apply_card(&card);
            }
            Event::InitDone => {
                if let Some(seen) = self.relist_cards.take() {
                    self.confirmed.retain(|uid, _| seen.contains(uid));
                }
                self.cards_synced = true;
                self.mark_ready();
            }
            Event::Apply(card) => self.apply_card(&card),
            Event::Delete(card) => {
                if let Some(uid) = card.uid() {
                    self.confirmed.remove(&uid);
                }
            }
        }
    }
}

enum Change {
    ConfigMap(Event<ConfigMap>),
    Card(Event<AgentCard>),
}

/// Keep `index` in step with the published, confirmed cards until the process ends.
pub async fn watch_cluster(client: Client, operator_ns: String, index: Arc<Index>) {
    let cms = watcher::watcher(
        Api::<ConfigMap>::all(client.clone()),
        watcher::Config::default().labels(PUBLISHED_SELECTOR),
    )
    .default_backoff()
    .map(|r| r.map(Change::ConfigMap));
    let cards = watcher::watcher(Api::<AgentCard>::all(client), watcher::Config::default())
        .default_backoff()
        .map(|r| r.map(Change::Card));
    let mut events = futures::stream::select(cms, cards).boxed();
    let mut feed = Feed {
        index,
        operator_ns,
        candidates: HashMap::new(),
        confirmed: HashMap::new(),
        owned: HashMap::new(),
        relist_cms: None,
        relist_cards: None,
        cms_synced: false,
        cards_synced: false,
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(Change::ConfigMap(e)) => feed.on_cm_event(e),
            Ok(Change::Card(e)) => feed.on_card_event(e),
            Err(e) => {
                tracing::warn!(error = %e, "watch failed; serving the last known cards and retrying")
            }
        }
    }
}
