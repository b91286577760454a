//! Claims: which AgentCard holds which route subtree of which host (the ownership model).
//!
//! A card with path prefix `P` on host `H` claims the subtree `H` + `P/…`. Claims of different
//! namespaces may not overlap (one subtree containing the other is an overlap), and on a host
//! that is not declared shared one namespace holds the whole host. Inside one namespace nested
//! claims are fine and only an exact duplicate conflicts. The holder is the first card to take
//! the claim, and it keeps it until it releases it (deleted, no longer allowed, moved).
//!
//! Data flow: the lease holder loads the table once from the cards' `status.served` (what the
//! previous holder decided, persisted where tenants cannot write), then every reconcile asks
//! [`Claims::acquire`] before it publishes and [`Claims::retain`] / [`Claims::release`] after.
//! The table lives behind a `Mutex` in the controller context; it is pure data, never awaited on.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;

use crate::contract::host_matches;

/// One card's claim on a route subtree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Host (lower case).
    pub host: String,
    /// Path prefix (`""` or `/a/b`).
    pub prefix: String,
    /// Namespace of the card.
    pub namespace: String,
    /// Name of the card.
    pub name: String,
    /// Uid of the card (the identity: a re-created card is a new claimant).
    pub uid: String,
    /// When the card took the claim.
    pub since: Timestamp,
    /// A directory's claim: the whole host, shared with nobody.
    pub whole_host: bool,
}

impl Claim {
    /// `namespace/name` of the claiming card, or `AgentDirectory name`.
    pub fn card(&self) -> String {
        if self.whole_host {
            format!("AgentDirectory {}", self.name)
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }

    /// The holder as a message names it: `AgentCard namespace/name` or `AgentDirectory name`.
    pub fn holder(&self) -> String {
        if self.whole_host {
            self.card()
        } else {
            format!("AgentCard {}", self.card())
        }
    }
}

/// Whether the subtrees under prefixes `a` and `b` (each `""` or `/a/b`) share a path: one is
/// the other or an ancestor of it, segment by segment (`/a` contains `/a/b`, not `/ab`).
pub fn prefixes_overlap(a: &str, b: &str) -> bool {
    inside_subtree(a, b) || inside_subtree(b, a)
}

/// A claim as the table holds it, under its host (the table's key): the card's prefix,
/// namespace, name and uid in one allocation. Typed, a [`Claim`] is 144 bytes inline and four
/// allocations; the table holds one per card (100,000 at that scale), readers ask for a few.
#[derive(Clone, Debug)]
struct Held {
    /// Prefix, namespace, name and uid, back to back.
    text: Box<str>,
    /// Where the prefix, the namespace and the name end in `text`.
    ends: [u32; 3],
    since: Timestamp,
    whole_host: bool,
}

impl Held {
    fn of(claim: &Claim) -> Held {
        let parts = [&claim.prefix, &claim.namespace, &claim.name, &claim.uid];
        let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        let mut ends = [0u32; 3];
        for (i, part) in parts.iter().enumerate() {
            text.push_str(part);
            if let Some(end) = ends.get_mut(i) {
                *end = u32::try_from(text.len()).unwrap_or(u32::MAX);
            }
        }
        Held {
            text: text.into_boxed_str(),
            ends,
            since: claim.since,
            whole_host: claim.whole_host,
        }
    }

    fn part(&self, i: usize) -> &str {
        let start = i
            .checked_sub(1)
            .and_then(|p| self.ends.get(p))
            .map_or(0, |&e| e as usize);
        let end = self.ends.get(i).map_or(self.text.len(), |&e| e as usize);
        self.text.get(start..end).unwrap_or_default()
    }

    fn prefix(&self) -> &str {
        self.part(0)
    }

    fn namespace(&self) -> &str {
        self.part(1)
    }

    fn name(&self) -> &str {
        self.part(2)
    }

    fn uid(&self) -> &str {
        self.part(3)
    }

    /// The claim on `host`, typed.
    fn claim(&self, host: &str) -> Claim {
        Claim {
            host: host.to_string(),
            prefix: self.prefix().to_string(),
            namespace: self.namespace().to_string(),
            name: self.name().to_string(),
            uid: self.uid().to_string(),
            since: self.since,
            whole_host: self.whole_host,
        }
    }

    /// [`Claim::card`] of this claim.
    fn card(&self) -> String {
        if self.whole_host {
            format!("AgentDirectory {}", self.name())
        } else {
            format!("{}/{}", self.namespace(), self.name())
        }
    }
}

/// The claims table of the cluster.
#[derive(Debug, Default)]
pub struct Claims {
    shared_hosts: Vec<String>,
    by_host: HashMap<Arc<str>, Vec<Held>>,
    /// The hosts on which each uid holds claims: [`Claims::retain`] looks at those alone, so a
    /// reconcile costs O(its own claims), not O(every claim of the cluster). Each host is the
    /// `Arc` that keys `by_host` (one copy of a host however many cards claim it).
    hosts_of: HashMap<Box<str>, Vec<Arc<str>>>,
}

impl Claims {
    /// An empty table; on hosts matching `shared_hosts` namespaces may hold disjoint prefixes.
    pub fn new(shared_hosts: Vec<String>) -> Self {
        Claims {
            shared_hosts,
            ..Claims::default()
        }
    }

    /// Whether `host` is declared shared by the platform.
    pub fn is_shared(&self, host: &str) -> bool {
        self.shared_hosts.iter().any(|p| host_matches(p, host))
    }

    /// Whether holder `held` (on `want`'s host) keeps `want` (of another card) from being
    /// claimed.
    fn blocks(&self, held: &Held, want: &Claim) -> bool {
        if held.uid() == want.uid {
            return false;
        }
        if held.whole_host || want.whole_host {
            return true;
        }
        if held.namespace() != want.namespace {
            !self.is_shared(&want.host) || prefixes_overlap(held.prefix(), &want.prefix)
        } else {
            held.prefix() == want.prefix
        }
    }

    /// The oldest holder that keeps `want` from being claimed, if any.
    pub fn blocker(&self, want: &Claim) -> Option<Claim> {
        self.by_host
            .get(want.host.as_str())?
            .iter()
            .filter(|h| self.blocks(h, want))
            .min_by(|a, b| {
                a.since
                    .cmp(&b.since)
                    // Formatted only for a tie (claims taken in the same second).
                    .then_with(|| a.card().cmp(&b.card()))
            })
            .map(|h| h.claim(&want.host))
    }

    /// The claim of card `uid` on `host` + `prefix`, if it holds it.
    pub fn held(&self, uid: &str, host: &str, prefix: &str) -> Option<Claim> {
        self.find(uid, host, prefix).map(|h| h.claim(host))
    }

    fn find(&self, uid: &str, host: &str, prefix: &str) -> Option<&Held> {
        self.by_host
            .get(host)?
            .iter()
            .find(|c| c.uid() == uid && c.prefix() == prefix)
    }

    /// Take `want` for its card unless another card holds a conflicting claim (returned).
    /// A claim the card already holds keeps its `since`. Other claims of the card stay until
    /// [`Claims::retain`] drops them (the old route is served until the new one is).
    pub fn acquire(&mut self, want: Claim) -> Result<Claim, Box<Claim>> {
        if let Some(held) = self.held(&want.uid, &want.host, &want.prefix) {
            return Ok(held);
        }
        if let Some(blocker) = self.blocker(&want) {
            return Err(Box::new(blocker));
        }
        self.insert(&want);
        Ok(want)
    }

    /// [`Claims::acquire`] for a claim nobody reads afterwards (the table's load from the
    /// cards' status, one per card); a claim held or blocked already is dropped.
    pub fn load(&mut self, want: Claim) {
        if self.find(&want.uid, &want.host, &want.prefix).is_none() && self.blocker(&want).is_none()
        {
            self.insert(&want);
        }
    }

    fn insert(&mut self, claim: &Claim) {
        // Most hosts hold one claim, and most cards one host: no room for more until needed.
        let host = match self.by_host.get_key_value(claim.host.as_str()) {
            Some((host, _)) => host.clone(),
            None => Arc::from(claim.host.as_str()),
        };
        let hosts = self
            .hosts_of
            .entry(claim.uid.as_str().into())
            .or_insert_with(|| Vec::with_capacity(1));
        if !hosts.iter().any(|h| **h == *claim.host) {
            hosts.push(host.clone());
        }
        self.by_host
            .entry(host)
            .or_insert_with(|| Vec::with_capacity(1))
            .push(Held::of(claim));
    }

    /// Keep only the claim of card `uid` on `keep` (host, prefix), or none; returns the hosts
    /// of the claims dropped, so the cards waiting there can be looked at again.
    pub fn retain(&mut self, uid: &str, keep: Option<(&str, &str)>) -> Vec<String> {
        let Some(hosts) = self.hosts_of.remove(uid) else {
            return Vec::new();
        };
        let mut freed = Vec::new();
        let mut kept = Vec::new();
        for host in hosts {
            let Some(list) = self.by_host.get_mut(&host) else {
                continue;
            };
            let before = list.len();
            list.retain(|c| {
                c.uid() != uid || keep.is_some_and(|(h, p)| h == &*host && p == c.prefix())
            });
            let holds = list.iter().any(|c| c.uid() == uid);
            let empty = list.is_empty();
            if list.len() != before {
                freed.push(host.to_string());
            }
            if empty {
                self.by_host.remove(&host);
            }
            if holds {
                kept.push(host);
            }
        }
        if !kept.is_empty() {
            self.hosts_of.insert(uid.into(), kept);
        }
        freed
    }

    /// Drop every claim of card `uid`; returns the hosts freed.
    pub fn release(&mut self, uid: &str) -> Vec<String> {
        self.retain(uid, None)
    }

    /// Every claim (for tests).
    #[cfg(test)]
    pub fn all(&self) -> Vec<Claim> {
        self.by_host
            .iter()
            .flat_map(|(host, list)| list.iter().map(|h| h.claim(host)))
            .collect()
    }
}

/// Whether `path` lies in the route subtree of `prefix` (`""` holds every path).
pub fn inside_subtree(prefix: &str, path: &str) -> bool {
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(host: &str, prefix: &str, ns: &str, name: &str, since: i64) -> Claim {
        Claim {
            host: host.into(),
            prefix: prefix.into(),
            namespace: ns.into(),
            name: name.into(),
            uid: format!("{ns}/{name}"),
            since: Timestamp::from_second(since).unwrap(),
            whole_host: false,
        }
    }

    #[test]
    fn a_held_claim_reads_back_as_the_claim_it_was() {
        let mut dir = claim("h", "", "", "catalog", 7);
        dir.whole_host = true;
        let mut long = claim("h", "/a/ü/ß", "team-ü", "x", 8);
        long.uid = "0f8e5b1c-2d3a-4b5c-8d9e-0a1b2c3d4e5f".into();
        for c in [claim("h", "/x", "a", "one", 1), dir, long] {
            let held = Held::of(&c);
            assert_eq!(held.claim(&c.host), c);
            assert_eq!(held.card(), c.card());
        }
    }

    #[test]
    fn prefixes_overlap_segment_by_segment() {
        assert!(prefixes_overlap("", "/a"));
        assert!(prefixes_overlap("/a", "/a"));
        assert!(prefixes_overlap("/a", "/a/b"));
        assert!(prefixes_overlap("/a/b", "/a"));
        assert!(!prefixes_overlap("/a", "/ab"));
        assert!(!prefixes_overlap("/a/b", "/a/c"));
    }

    #[test]
    fn one_namespace_holds_a_host_that_is_not_shared() {
        let mut t = Claims::new(vec![]);
        assert!(t.acquire(claim("h", "/x", "a", "one", 1)).is_ok());
        let err = t.acquire(claim("h", "/y", "b", "two", 2)).unwrap_err();
        assert_eq!(err.card(), "a/one");
        // The same namespace may add a disjoint or nested claim.
        assert!(t.acquire(claim("h", "/y", "a", "three", 3)).is_ok());
        assert!(t.acquire(claim("h", "/x/deeper", "a", "four", 4)).is_ok());
        // An exact duplicate in the namespace goes to the holder.
        assert_eq!(
            t.acquire(claim("h", "/x", "a", "five", 5))
                .unwrap_err()
                .card(),
            "a/one"
        );
    }

    #[test]
    fn a_load_keeps_what_acquire_would_and_drops_the_rest() {
        let mut loaded = Claims::new(vec![]);
        let mut acquired = Claims::new(vec![]);
        let claims = [
            claim("h", "/x", "a", "one", 1),
            claim("h", "/x", "a", "one", 1),
            claim("h", "/y", "b", "two", 2),
            claim("h", "/z", "a", "three", 3),
            claim("g", "", "b", "two", 4),
        ];
        for c in claims {
            let _ = acquired.acquire(c.clone());
            loaded.load(c);
        }
        let sorted = |t: &Claims| {
            let mut all: Vec<Claim> = t.all();
            all.sort_by_key(Claim::card);
            all
        };
        assert_eq!(sorted(&loaded), sorted(&acquired));
        assert_eq!(
            loaded.all().len(),
            3,
            "the duplicate and the blocked claim dropped"
        );
        assert_eq!(loaded.release("b/two"), vec!["g".to_string()]);
    }

    #[test]
    fn shared_hosts_take_disjoint_prefixes_of_several_namespaces() {
        let mut t = Claims::new(vec!["*.shared.example".into()]);
        assert!(t
            .acquire(claim("h.shared.example", "/a", "a", "x", 1))
            .is_ok());
        assert!(t
            .acquire(claim("h.shared.example", "/b", "b", "y", 2))
            .is_ok());
        assert!(t
            .acquire(claim("h.shared.example", "/ab", "c", "z", 3))
            .is_ok());
        // Nested across namespaces, either way round, is an overlap.
        for p in ["/a/sub", "", "/b"] {
            assert!(
                t.acquire(claim("h.shared.example", p, "d", "w", 4))
                    .is_err(),
                "{p}"
            );
        }
    }

    #[test]
    fn the_holder_keeps_its_claim_until_released_then_the_next_card_takes_it() {
        let mut t = Claims::new(vec![]);
        // The younger card became Ready first: it holds, the older one waits.
        assert!(t.acquire(claim("h", "", "b", "young", 20)).is_ok());
        assert!(t.acquire(claim("h", "", "a", "old", 10)).is_err());
        // Re-acquiring a held claim keeps its time.
        let again = t.acquire(claim("h", "", "b", "young", 99)).unwrap();
        assert_eq!(again.since.as_second(), 20);
        assert_eq!(t.release("b/young"), vec!["h".to_string()]);
        assert!(t.acquire(claim("h", "", "a", "old", 30)).is_ok());
    }

    #[test]
    fn a_directory_holds_its_whole_host() {
        let mut t = Claims::new(vec!["*.shared.example".into()]);
        let mut dir = claim("d.shared.example", "", "", "dir", 1);
        dir.whole_host = true;
        assert!(t.acquire(dir.clone()).is_ok());
        let err = t
            .acquire(claim("d.shared.example", "/x", "a", "c", 2))
            .unwrap_err();
        assert_eq!(err.card(), "AgentDirectory dir");
        let mut other = claim("d.shared.example", "/y", "", "dir2", 3);
        other.whole_host = true;
        assert!(t.acquire(other.clone()).is_err());
        // And a card already on a host keeps it from a directory.
        t.acquire(claim("c.shared.example", "/z", "a", "c", 4))
            .unwrap();
        other.host = "c.shared.example".into();
        assert!(t.acquire(other).is_err());
    }

    #[test]
    fn moving_keeps_the_old_claim_until_retain_drops_it() {
        let mut t = Claims::new(vec![]);
        t.acquire(claim("one", "", "a", "x", 1)).unwrap();
        t.acquire(claim("two", "", "a", "x", 2)).unwrap();
        assert!(t.acquire(claim("one", "", "b", "y", 3)).is_err());
        assert_eq!(t.retain("a/x", Some(("two", ""))), vec!["one".to_string()]);
        assert!(t.acquire(claim("one", "", "b", "y", 3)).is_ok());
        assert_eq!(t.all().len(), 2);
    }

    /// The per-uid host index answers exactly what a scan of every claim would.
    fn assert_index_matches(t: &Claims) {
        let all = t.all();
        let mut scanned: HashMap<&str, Vec<&str>> = HashMap::new();
        for c in &all {
            let hosts = scanned.entry(&c.uid).or_default();
            if !hosts.contains(&c.host.as_str()) {
                hosts.push(&c.host);
            }
        }
        assert_eq!(scanned.len(), t.hosts_of.len(), "{:?}", t.hosts_of);
        for (uid, hosts) in &t.hosts_of {
            let mut want = scanned[&**uid].clone();
            let mut have: Vec<&str> = hosts.iter().map(|h| &**h).collect();
            want.sort_unstable();
            have.sort_unstable();
            assert_eq!(want, have, "hosts of {uid}");
        }
    }

    #[test]
    fn retain_touches_only_the_cards_own_hosts_and_keeps_the_index_exact() {
        let mut t = Claims::new(vec!["*.shared".into()]);
        // One card with nested claims on one host and a claim on another; others beside it.
        t.acquire(claim("h.shared", "/a", "ns", "x", 1)).unwrap();
        t.acquire(claim("h.shared", "/a/b", "ns", "x", 2)).unwrap();
        t.acquire(claim("k", "", "ns", "x", 3)).unwrap();
        t.acquire(claim("h.shared", "/c", "other", "y", 4)).unwrap();
        t.acquire(claim("m", "", "other", "z", 5)).unwrap();
        assert_index_matches(&t);
        // Keep one claim: the nested one and the other host go, the other cards stay.
        let mut freed = t.retain("ns/x", Some(("h.shared", "/a")));
        freed.sort();
        assert_eq!(freed, vec!["h.shared".to_string(), "k".to_string()]);
        assert_index_matches(&t);
        assert!(t.held("ns/x", "h.shared", "/a").is_some());
        assert!(t.held("ns/x", "h.shared", "/a/b").is_none());
        assert_eq!(t.all().len(), 3);
        // Keeping what it holds frees nothing; a uid with no claims frees nothing.
        assert!(t.retain("ns/x", Some(("h.shared", "/a"))).is_empty());
        assert!(t.retain("nobody", None).is_empty());
        assert_index_matches(&t);
        // Releasing drops the last claim, the emptied host and the index entry.
        assert_eq!(t.release("ns/x"), vec!["h.shared".to_string()]);
        assert_eq!(t.release("other/z"), vec!["m".to_string()]);
        assert_index_matches(&t);
        assert_eq!(t.all().len(), 1);
        assert!(t.acquire(claim("k", "", "third", "w", 6)).is_ok());
        assert_index_matches(&t);
    }
}
