//! The directories' sites as the cluster makes them: which served cards each AgentDirectory
//! lists, rebuilt into [`Site`]s when something they list changes.
//!
//! Data flow: the card server's cluster watch ([`crate::serve::source_cluster`]) tells
//! [`Sites`] what it serves — one [`Entry`] per served card, with its namespace and labels
//! ([`Sites::served`], [`Sites::unserved`], [`Sites::relabel`]) — and hands it the Namespaces
//! and AgentDirectories it watches. Entries are kept only while an AgentDirectory exists (a
//! cluster without directories pays neither their memory nor their text indexing): when the
//! first appears, [`Sites::wants_all`] asks for every served card's. [`Sites::rebuild`] makes
//! each directory's site — the local cards [`select`] lists, merged with its upstreams'
//! ([`Federation`]) — keeping the sites of directories whose listing did not change (and so
//! their cached answers). Pure but for the federation's shared state: the caller swaps the
//! sites into the index.

pub mod hosted;
pub mod site;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kube::runtime::watcher::Event;
use kube::ResourceExt;

use crate::contract::normalize_prefix;
use crate::crd::{AgentDirectory, AgentDirectorySpec, ApprovalState, ApprovalStatus};
use crate::directory::entry::Entry;
use crate::directory::federation::{self, Federation};
use crate::directory::select;
use crate::directory::sites::site::{Site, Waiting};

/// What the sites need of an AgentDirectory.
#[derive(Clone, PartialEq)]
struct DirectoryView {
    uid: String,
    spec: AgentDirectorySpec,
    host: Option<String>,
    prefix: String,
    deleting: bool,
}

/// A served card as a directory may list it.
#[derive(Clone, Debug)]
pub struct Listed {
    /// Its namespace.
    pub namespace: String,
    /// Its labels (what selectors read).
    pub labels: BTreeMap<String, String>,
    /// Its directory entry.
    pub entry: Arc<Entry>,
    /// The verdicts of directories requiring approval (`status.approvals`).
    pub approvals: Arc<[ApprovalStatus]>,
}

/// Every directory's listing, and what changed since the last rebuild.
pub struct Sites {
    federation: Arc<Federation>,
    /// Each served card that is a card, by card key; `None` while no AgentDirectory exists.
    listed: Option<HashMap<String, Listed>>,
    /// Labels of each namespace.
    namespaces: HashMap<String, BTreeMap<String, String>>,
    /// AgentDirectories by name.
    directories: HashMap<String, DirectoryView>,
    /// Something every directory may list changed since the last rebuild.
    dirty: bool,
    /// Directories to rebuild at the next rebuild while `dirty` is false (a label change that
    /// changes only their listings).
    dirty_dirs: HashSet<String>,
    relist: Option<HashSet<String>>,
}

impl Sites {
    /// No directories yet; upstream entries from `federation`.
    pub fn new(federation: Arc<Federation>) -> Sites {
        Sites {
            federation,
            listed: None,
            namespaces: HashMap::new(),
            directories: HashMap::new(),
            dirty: false,
            dirty_dirs: HashSet::new(),
            relist: None,
        }
    }

    /// Whether entries are kept (an AgentDirectory exists).
    pub fn keeps_entries(&self) -> bool {
        self.listed.is_some()
    }

    /// Whether a directory exists but no entries are kept yet: the caller hands every
    /// served card's to [`Sites::fill`].
    pub fn wants_all(&self) -> bool {
        !self.directories.is_empty() && self.listed.is_none()
    }

    /// Every served card's entry (after [`Sites::wants_all`]).
    pub fn fill(&mut self, all: impl IntoIterator<Item = (String, Listed)>) {
        self.listed = Some(all.into_iter().collect());
        self.dirty = true;
    }

    /// Card `key` is served (`None`: its bytes are not a card, so it is not listed).
    pub fn served(&mut self, key: &str, listed: Option<Listed>) {
        if let Some(map) = self.listed.as_mut() {
            match listed {
                Some(l) => map.insert(key.to_string(), l),
                None => map.remove(key),
            };
        }
        self.dirty = true;
    }

    /// Card `key` is no longer served.
    pub fn unserved(&mut self, key: &str) {
        if self
            .listed
            .as_mut()
            .is_some_and(|m| m.remove(key).is_some())
        {
            self.dirty = true;
        }
    }

    /// Card `key`'s labels are now `labels` and its verdicts `approvals`: only the
    /// directories whose listing (or waiting list) that changes are rebuilt (none for a card
    /// not listed, or whose labels no selector reads).
    pub fn relabel(
        &mut self,
        key: &str,
        labels: &BTreeMap<String, String>,
        approvals: &[ApprovalStatus],
    ) {
        let Some(l) = self.listed.as_mut().and_then(|m| m.get_mut(key)) else {
            return;
        };
        let before = std::mem::replace(&mut l.labels, labels.clone());
        let approvals_before = std::mem::replace(&mut l.approvals, approvals.into());
        let empty = BTreeMap::new();
        let ns_labels = self.namespaces.get(&l.namespace).unwrap_or(&empty);
        let mark = |name: &str, d: &DirectoryView, labels, approvals: &[ApprovalStatus]| {
            select::selected(&d.spec, ns_labels, labels).then(|| {
                let said = approvals.iter().find(|a| a.directory == name);
                (select::verdict(name, &d.spec, approvals), said.cloned())
            })
        };
        let affected = self.directories.iter().filter(|(name, d)| {
            mark(name, d, &before, &approvals_before) != mark(name, d, labels, approvals)
        });
        self.dirty_dirs
            .extend(affected.map(|(name, _)| name.clone()));
    }

    /// The labels of a Namespace.
    pub fn namespace(&mut self, name: String, labels: BTreeMap<String, String>) {
        if self.namespaces.get(&name) != Some(&labels) {
            self.namespaces.insert(name, labels);
            self.dirty = true;
        }
    }

    /// An AgentDirectory event (routed by its status, like cards).
    pub fn on_directory_event(&mut self, event: Event<Arc<AgentDirectory>>) {
        match event {
            Event::Init => self.relist = Some(HashSet::new()),
            Event::InitApply(d) | Event::Apply(d) => {
                if let Some(seen) = self.relist.as_mut() {
                    seen.insert(d.name_any());
                }
                self.apply_directory(&d);
            }
            Event::InitDone => {
                if let Some(seen) = self.relist.take() {
                    self.directories.retain(|n, _| seen.contains(n));
                    self.dirty = true;
                }
            }
            Event::Delete(d) => {
                self.directories.remove(&d.name_any());
                self.dirty = true;
            }
        }
        if self.directories.is_empty() {
            self.listed = None;
        }
    }

    fn apply_directory(&mut self, dir: &AgentDirectory) {
        let served = dir.status.as_ref().and_then(|s| s.served.as_ref());
        let view = DirectoryView {
            uid: dir.uid().unwrap_or_default(),
            spec: dir.spec.clone(),
            host: served.map(|r| r.host.clone()),
            prefix: served
                .map(|r| normalize_prefix(&r.path_prefix))
                .unwrap_or_default(),
            deleting: dir.metadata.deletion_timestamp.is_some(),
        };
        if self.directories.insert(dir.name_any(), view.clone()) != Some(view) {
            self.dirty = true;
        }
    }

    /// Every directory's upstreams changed (a federation sync).
    pub fn federated(&mut self) {
        self.dirty = true;
    }

    /// Whether a rebuild is due: of every directory, or of some.
    pub fn rebuild_due(&self) -> bool {
        self.dirty || !self.dirty_dirs.is_empty()
    }

    /// The directories that would be rebuilt next while only some are due (tests).
    pub fn due(&self) -> &HashSet<String> {
        &self.dirty_dirs
    }

    /// Every directory's site, by host, from what is listed now; when only some directories
    /// are due, the others keep the sites they have in `held`.
    pub fn rebuild(&mut self, held: &HashMap<String, Arc<Site>>) -> HashMap<String, Arc<Site>> {
        let only = (!self.dirty).then(|| std::mem::take(&mut self.dirty_dirs));
        self.dirty = false;
        self.dirty_dirs.clear();
        let empty = BTreeMap::new();
        let no_entries = HashMap::new();
        let listed = self.listed.as_ref().unwrap_or(&no_entries);
        let mut sites = HashMap::new();
        for (name, dir) in &self.directories {
            let Some(host) = dir.host.clone().filter(|_| !dir.deleting) else {
                continue;
            };
            let kept = held.get(&host).filter(|s| &s.name == name);
            if let (Some(only), Some(site)) = (&only, kept) {
                if !only.contains(name) {
                    sites.insert(host, site.clone());
                    continue;
                }
            }
            let mut local: Vec<Arc<Entry>> = Vec::new();
            let mut waiting: Vec<Waiting> = Vec::new();
            for c in listed.values() {
                let ns_labels = self.namespaces.get(&c.namespace).unwrap_or(&empty);
                if !select::selected(&dir.spec, ns_labels, &c.labels) {
                    continue;
                }
                match select::verdict(name, &dir.spec, &c.approvals) {
                    ApprovalState::Approved => local.push(c.entry.clone()),
                    _ => waiting.push(Waiting {
                        entry: c.entry.clone(),
                        approval: c
                            .approvals
                            .iter()
                            .find(|a| &a.directory == name)
                            .cloned()
                            .unwrap_or_else(|| ApprovalStatus {
                                directory: name.clone(),
                                ..Default::default()
                            }),
                    }),
                }
            }
            let names: Vec<String> = dir.spec.upstreams.iter().map(|u| u.name.clone()).collect();
            let upstream = self.federation.entries(name, &names);
            let (entries, report) = federation::merge(local, &upstream);
            self.federation.set_report(name, report);
            let site = Site::new(
                name.clone(),
                dir.uid.clone(),
                host.clone(),
                dir.prefix.clone(),
                dir.spec.display_name.clone(),
                dir.spec.description.clone(),
                dir.spec.access.mode,
                entries,
            )
            .with_waiting(waiting);
            sites.insert(host, Arc::new(site));
        }
        sites
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::entry::Placement;
    use bytes::Bytes;

    fn listed(ns: &str, name: &str, team: &str) -> Listed {
        let placement = Placement {
            namespace: ns.into(),
            name: name.into(),
            host: format!("{name}.example"),
            ..Placement::default()
        };
        let body = format!(r#"{{"name":"{name}","description":"d","skills":[]}}"#);
        Listed {
            namespace: ns.into(),
            labels: [("team".to_string(), team.to_string())].into(),
            entry: Arc::new(Entry::build(placement, Bytes::from(body)).unwrap()),
            approvals: Arc::from([]),
        }
    }

    fn directory(name: &str, host: &str, team: Option<&str>) -> Arc<AgentDirectory> {
        let mut spec = serde_json::json!({"publish": {"host": host}});
        if let Some(t) = team {
            spec["cardSelector"] = serde_json::json!({"matchLabels": {"team": t}});
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
                "metadata": {"name": name, "uid": format!("uid-{name}")},
                "spec": spec,
                "status": {"served": {"host": host, "pathPrefix": "/", "since": "2026-01-01T00:00:00Z"}}
            }))
            .unwrap(),
        )
    }

    fn names(site: &Site) -> Vec<String> {
        let mut v: Vec<String> = site
            .catalog
            .entries()
            .iter()
            .map(|e| e.placement.name.clone())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_directory_requiring_approval_lists_the_approved_and_keeps_the_rest_waiting() {
        let mut sites = Sites::new(Arc::default());
        let gated = {
            let mut d = (*directory("gated", "gated.example", None)).clone();
            d.spec.admission = crate::crd::Admission::ApprovalRequired;
            Arc::new(d)
        };
        sites.on_directory_event(Event::Apply(gated));
        sites.on_directory_event(Event::Apply(directory("open", "open.example", None)));
        sites.fill([
            ("t/a".to_string(), listed("t", "a", "x")),
            ("t/b".to_string(), listed("t", "b", "x")),
        ]);
        let built = sites.rebuild(&HashMap::new());
        assert!(names(&built["gated.example"]).is_empty());
        assert_eq!(built["gated.example"].waiting.len(), 2);
        assert_eq!(names(&built["open.example"]), ["a", "b"]);
        // The lease holder approves a for "gated": only that directory is rebuilt.
        let approved = [ApprovalStatus {
            directory: "gated".into(),
            state: ApprovalState::Approved,
            ..Default::default()
        }];
        sites.relabel(
            "t/a",
            &[("team".to_string(), "x".to_string())].into(),
            &approved,
        );
        assert_eq!(sites.due(), &HashSet::from(["gated".to_string()]));
        let again = sites.rebuild(&built);
        assert_eq!(names(&again["gated.example"]), ["a"]);
        assert_eq!(again["gated.example"].waiting.len(), 1);
        assert_eq!(again["gated.example"].waiting[0].entry.placement.name, "b");
        assert!(Arc::ptr_eq(&again["open.example"], &built["open.example"]));
        // An approval for another directory does not list it here.
        let elsewhere = [ApprovalStatus {
            directory: "other".into(),
            state: ApprovalState::Approved,
            ..Default::default()
        }];
        sites.relabel(
            "t/a",
            &[("team".to_string(), "x".to_string())].into(),
            &elsewhere,
        );
        let third = sites.rebuild(&again);
        assert!(names(&third["gated.example"]).is_empty());
    }

    #[test]
    fn entries_come_with_the_first_directory_and_a_relabel_rebuilds_only_whom_it_concerns() {
        let mut sites = Sites::new(Arc::default());
        assert!(!sites.wants_all() && !sites.keeps_entries());
        sites.served("t/a", None);
        sites.on_directory_event(Event::Apply(directory("all", "all.example", None)));
        assert!(sites.wants_all(), "a directory asks for every served card");
        sites.fill([
            ("t/a".to_string(), listed("t", "a", "x")),
            ("t/b".to_string(), listed("t", "b", "y")),
        ]);
        sites.on_directory_event(Event::Apply(directory("x", "x.example", Some("x"))));
        let built = sites.rebuild(&HashMap::new());
        assert_eq!(names(&built["all.example"]), ["a", "b"]);
        assert_eq!(names(&built["x.example"]), ["a"]);
        assert!(!sites.rebuild_due());
        // b joins team x: only the directory selecting by team is rebuilt.
        sites.relabel("t/b", &[("team".to_string(), "x".to_string())].into(), &[]);
        assert_eq!(sites.due(), &HashSet::from(["x".to_string()]));
        let again = sites.rebuild(&built);
        assert!(Arc::ptr_eq(&again["all.example"], &built["all.example"]));
        assert_eq!(names(&again["x.example"]), ["a", "b"]);
        // A label no selector reads changes nothing; the last directory gone drops the entries.
        sites.relabel(
            "t/a",
            &[
                ("team".to_string(), "x".to_string()),
                ("z".into(), "1".into()),
            ]
            .into(),
            &[],
        );
        assert!(!sites.rebuild_due());
        sites.on_directory_event(Event::Delete(directory("all", "all.example", None)));
        sites.on_directory_event(Event::Delete(directory("x", "x.example", Some("x"))));
        assert!(!sites.keeps_entries());
    }
}
