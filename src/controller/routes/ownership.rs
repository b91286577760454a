//! Who holds which route, as the reconciles use it: the claims table ([`crate::controller::routes::table`],
//! pure) loaded once per leadership from what the cards' and directories' status says is
//! served (the previous holder's decision, written where tenants cannot write), then kept by
//! the reconciles; and the peers to look at again when a claim is freed.
//!
//! Data flow: a reconcile asks [`Ownership::acquire`] for its claim (a holder that no longer
//! exists is dropped first), and after writing its status [`Ownership::retain`]s only what the
//! status serves; the hosts it freed go to [`Ownership::recheck`], which sends the cards and
//! directories on those hosts back to their controllers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use crate::controller::error::Error;
use crate::controller::routes::table::{Claim, Claims};
use crate::controller::watches::CardsByHost;
use crate::crd::{AgentCard, AgentDirectory};

/// The claims table and what it needs to keep it right.
pub struct Ownership {
    /// Who holds which route; `None` until loaded from the cards' status.
    claims: Mutex<Option<Claims>>,
    /// Hosts on which several namespaces may hold disjoint prefixes.
    shared_hosts: Vec<String>,
    /// Every AgentCard.
    cards: Store<AgentCard>,
    /// Every AgentDirectory.
    directories: Store<AgentDirectory>,
    /// The cards by host.
    index: Arc<Mutex<CardsByHost>>,
    /// Cards to re-check because a peer on their host changed.
    peers: UnboundedSender<ObjectRef<AgentCard>>,
    /// Directories to re-check because a peer on their host changed.
    directory_peers: UnboundedSender<ObjectRef<AgentDirectory>>,
    /// How long loading the claims waits for the directories: unbounded when the
    /// AgentDirectory CRD is installed (a claims table without them would hand their hosts to
    /// cards), none when it is not, bounded when that could not be told.
    directories_wait: Option<Duration>,
    /// True once the directories are listed. Reconciles wait on this rather than on the
    /// store: a store's `wait_until_ready` wakes only its latest waiter (kube-runtime 5), so
    /// concurrent reconciles waiting on it could wait forever.
    directories_listed: tokio::sync::watch::Receiver<bool>,
    /// True once the cards are listed (see `directories_listed`).
    cards_listed: tokio::sync::watch::Receiver<bool>,
}

/// What [`Ownership`] reads and where it sends the peers it re-checks.
pub struct OwnershipInputs {
    /// Hosts on which several namespaces may hold disjoint prefixes.
    pub shared_hosts: Vec<String>,
    /// Every AgentCard.
    pub cards: Store<AgentCard>,
    /// Every AgentDirectory.
    pub directories: Store<AgentDirectory>,
    /// The cards by host.
    pub cards_by_host: Arc<Mutex<CardsByHost>>,
    /// Cards to re-check.
    pub peers: UnboundedSender<ObjectRef<AgentCard>>,
    /// Directories to re-check.
    pub directory_peers: UnboundedSender<ObjectRef<AgentDirectory>>,
    /// See [`Ownership`].
    pub directories_wait: Option<Duration>,
    /// See [`Ownership`].
    pub directories_listed: tokio::sync::watch::Receiver<bool>,
    /// True once the cards are listed.
    pub cards_listed: tokio::sync::watch::Receiver<bool>,
}

impl Ownership {
    /// An empty table, loaded on first use.
    pub fn new(inputs: OwnershipInputs) -> Ownership {
        Ownership {
            claims: Mutex::new(None),
            shared_hosts: inputs.shared_hosts,
            cards: inputs.cards,
            directories: inputs.directories,
            index: inputs.cards_by_host,
            peers: inputs.peers,
            directory_peers: inputs.directory_peers,
            directories_wait: inputs.directories_wait,
            directories_listed: inputs.directories_listed,
            cards_listed: inputs.cards_listed,
        }
    }

    /// Re-check the other cards asking for one of `hosts`: `card` may have freed a claim there
    /// (deleted, moved, or no longer allowed), or taken one.
    pub fn recheck_card(&self, hosts: &[String], card: &AgentCard) {
        self.recheck(hosts, card.metadata.uid.as_deref());
    }

    /// Re-check every card and directory asking for one of `hosts`, except the one `skip`.
    pub fn recheck(&self, hosts: &[String], skip: Option<&str>) {
        if hosts.is_empty() {
            return;
        }
        let on = |host: &str| hosts.iter().any(|h| host.eq_ignore_ascii_case(h));
        let peers: Vec<ObjectRef<AgentCard>> = {
            let index = crate::locks::lock(&self.index);
            hosts.iter().flat_map(|h| index.on_host(h)).collect()
        };
        for peer in peers {
            let skipped = self
                .cards
                .get(&peer)
                .is_some_and(|c| c.metadata.uid.as_deref() == skip);
            if !skipped {
                let _ = self.peers.unbounded_send(peer);
            }
        }
        for dir in self.directories.state() {
            if on(&dir.spec.publish.host) && dir.metadata.uid.as_deref() != skip {
                let _ = self
                    .directory_peers
                    .unbounded_send(ObjectRef::from_obj(dir.as_ref()));
            }
        }
    }

    fn with_claims<T>(&self, f: impl FnOnce(&mut Claims) -> T) -> T {
        let mut guard = crate::locks::lock(&self.claims);
        let claims = guard.get_or_insert_with(|| Claims::new(self.shared_hosts.clone()));
        f(claims)
    }

    /// Load the claims table from what the cards' status says is served (once per leadership:
    /// the status is the previous holder's decision, written where tenants cannot write).
    pub async fn load(&self) {
        if crate::locks::lock(&self.claims).is_some() {
            return;
        }
        let _ = self.cards_listed.clone().wait_for(|l| *l).await;
        // Without the AgentDirectory CRD its store never fills, and cards must not wait.
        let mut listed = self.directories_listed.clone();
        let listed = listed.wait_for(|l| *l);
        match self.directories_wait {
            None => {
                let _ = listed.await;
            }
            Some(bound) => {
                let _ = tokio::time::timeout(bound, listed).await;
            }
        }
        // Each holder with its claim's time, sorted; each claim is made as it is loaded. A
        // list of every claim made at once took some 700 bytes a card at the moment a
        // restart's memory peaks (its strings, and the sort's copy).
        let mut served: Vec<(jiff::Timestamp, Holder)> = self
            .cards
            .state()
            .into_iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| {
                let status = c.status.as_ref()?;
                status.content_hash.as_ref()?;
                let since = status.served.as_ref()?.since.parse();
                Some((since.unwrap_or(jiff::Timestamp::MAX), Holder::Card(c)))
            })
            .chain(self.directories.state().into_iter().filter_map(|d| {
                let since = d.status.as_ref()?.served.as_ref()?.since.parse();
                let since = since.unwrap_or(jiff::Timestamp::MAX);
                (d.metadata.deletion_timestamp.is_none()).then(|| (since, Holder::Directory(d)))
            }))
            .collect();
        // Claims taken in the same second go by their holder's name (`namespace/name`).
        served.sort_by(|(at, a), (bt, b)| at.cmp(bt).then_with(|| a.cmp_name(b)));
        let mut guard = crate::locks::lock(&self.claims);
        if guard.is_none() {
            let mut claims = Claims::new(self.shared_hosts.clone());
            for claim in served
                .iter()
                .filter_map(|(since, holder)| holder.claim(*since))
            {
                // A persisted overlap (e.g. a host no longer shared) is resolved in favour of
                // the older claim; the other card loses its route on its reconcile.
                claims.load(claim);
            }
            *guard = Some(claims);
        }
    }

    /// Whether the card or directory holding `claim` still exists (the same object: by uid).
    fn holder_exists(&self, claim: &Claim) -> bool {
        let uid = Some(claim.uid.as_str());
        if claim.whole_host {
            self.directories
                .get(&ObjectRef::new(&claim.name))
                .is_some_and(|d| d.uid().as_deref() == uid)
        } else {
            self.cards
                .get(&ObjectRef::new(&claim.name).within(&claim.namespace))
                .is_some_and(|c| c.uid().as_deref() == uid)
        }
    }

    /// Take `want` for its card, or say which card holds a conflicting claim. A holder that is
    /// gone (deleted without its cleanup: a tenant may remove the finalizer) holds nothing.
    pub fn acquire(&self, want: Claim) -> Result<Claim, Error> {
        let mut freed = Vec::new();
        let result = self.with_claims(|claims| {
            while let Some(gone) = claims
                .blocker(&want)
                .filter(|b| !self.holder_exists(b))
                .map(|b| b.uid.clone())
            {
                freed.extend(claims.release(&gone));
            }
            let shared = claims.is_shared(&want.host);
            claims
                .acquire(want.clone())
                .map_err(|holder| Error::HostConflict {
                    host: want.host.clone(),
                    prefix: want.prefix.clone(),
                    held: format!("{}{}/…", holder.host, holder.prefix),
                    owner: holder.holder(),
                    why: if holder.namespace != want.namespace
                        && !shared
                        && !holder.whole_host
                        && !want.whole_host
                    {
                        " (one namespace holds a host that is not shared)"
                    } else {
                        ""
                    },
                })
        });
        self.recheck(&freed, Some(&want.uid));
        result
    }

    /// Keep only the claim of `card` on `keep` (host, prefix), or none; the hosts freed.
    pub fn retain_card(&self, card: &AgentCard, keep: Option<(&str, &str)>) -> Vec<String> {
        self.retain(&card.uid().unwrap_or_default(), keep)
    }

    /// Keep only the claim of object `uid` on `keep`, or none; the hosts freed.
    pub fn retain(&self, uid: &str, keep: Option<(&str, &str)>) -> Vec<String> {
        self.with_claims(|claims| claims.retain(uid, keep))
    }
}

/// A card or a directory whose status says it serves a route, while the claims are loaded.
enum Holder {
    Card(Arc<AgentCard>),
    Directory(Arc<AgentDirectory>),
}

impl Holder {
    /// The holder's name as [`Claim::card`] spells it, in three parts (nothing formatted).
    fn name_parts(&self) -> [&str; 3] {
        match self {
            Holder::Card(c) => [
                c.metadata.namespace.as_deref().unwrap_or_default(),
                "/",
                c.metadata.name.as_deref().unwrap_or_default(),
            ],
            Holder::Directory(d) => [
                "AgentDirectory ",
                "",
                d.metadata.name.as_deref().unwrap_or_default(),
            ],
        }
    }

    /// The order of [`Claim::card`]: the names compared byte by byte.
    fn cmp_name(&self, other: &Holder) -> std::cmp::Ordering {
        let (a, b) = (self.name_parts(), other.name_parts());
        a.iter()
            .flat_map(|s| s.bytes())
            .cmp(b.iter().flat_map(|s| s.bytes()))
    }

    /// The claim its status records, taken at `since` (as read for the sort): a card's
    /// route, or a directory's whole host.
    fn claim(&self, since: jiff::Timestamp) -> Option<Claim> {
        match self {
            Holder::Card(c) => {
                let route = c.status.as_ref()?.served.as_ref()?;
                Some(Claim {
                    host: route.host.clone(),
                    prefix: route.path_prefix.clone(),
                    namespace: c.namespace().unwrap_or_default(),
                    name: c.name_any(),
                    uid: c.uid().unwrap_or_default(),
                    since,
                    whole_host: false,
                })
            }
            Holder::Directory(d) => {
                let route = d.status.as_ref()?.served.as_ref()?;
                Some(Claim {
                    host: route.host.clone(),
                    prefix: String::new(),
                    namespace: String::new(),
                    name: d.name_any(),
                    uid: d.uid().unwrap_or_default(),
                    since,
                    whole_host: true,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(ns: &str, name: &str) -> Holder {
        Holder::Card(Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"publish": {"host": "h.example.com"}}
            }))
            .unwrap(),
        ))
    }

    fn directory(name: &str) -> Holder {
        Holder::Directory(Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
                "metadata": {"name": name}, "spec": {"publish": {"host": "d.example.com"}}
            }))
            .unwrap(),
        ))
    }

    /// What the claims were sorted by before: each holder's name, formatted.
    fn formatted(h: &Holder) -> String {
        let [a, b, c] = h.name_parts();
        format!("{a}{b}{c}")
    }

    #[test]
    fn holders_in_the_same_second_go_in_the_order_of_their_formatted_names() {
        // `-` sorts before `/`, and `/` before letters: a tuple of (namespace, name) would put
        // `a/z` before `a-b/c`, where the formatted names put it after.
        let holders = [
            card("a", "z"),
            card("a-b", "c"),
            card("ab", "a"),
            card("a", "y"),
            directory("hub"),
            card("Agent", "x"),
        ];
        for x in &holders {
            for y in &holders {
                assert_eq!(
                    x.cmp_name(y),
                    formatted(x).cmp(&formatted(y)),
                    "{} vs {}",
                    formatted(x),
                    formatted(y)
                );
            }
        }
        assert_eq!(formatted(&directory("hub")), "AgentDirectory hub");
    }
}
