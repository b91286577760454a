//! The directory's cache of rendered responses: a repeated registry query is answered with
//! the bytes rendered the first time, as a static file server would answer it.
//!
//! Data flow: [`super::http::handle`] checks the caller, then turns a cacheable request (a
//! registry API or manifest GET/HEAD, or a POST query) into a [`Key`]: the site snapshot's
//! [`crate::directory::sites::site::Site::generation`], the caller's visibility class (every namespace in Public
//! mode; a SHA-256 of the exact set of namespaces the caller may read in Kubernetes mode), the
//! path, the query parameters as the engine reads them (sorted by name) and, for a POST, the
//! exact body.
//! A hit is the [`Rendered`] body and its strong ETag: the response is a lookup and a clone of
//! reference-counted bytes, and a matching `If-None-Match` is a 304 without rendering
//! anything. A miss renders with [`super::http::answer`]; a 200 is kept, errors are not.
//!
//! What is kept never answers for another snapshot or another visibility class: both are in
//! the key, so two callers share an entry only when the engine would be asked exactly the same
//! of the same snapshot. When [`Hosted`] swaps the sites, [`ResponseCache::sync`] drops the
//! entries of the snapshots no longer served (an entry a request still holding an old snapshot
//! adds later is never looked up, and goes with the next swap or eviction).
//!
//! The cache is bounded in bytes (bodies, ETags, keys and a fixed overhead per entry) by
//! `--directory-cache-bytes`; 0 turns it off. It is [`quick_cache`]'s: sharded (requests on
//! every core look up at once), scan-resistant (a burst of one-off queries does not push out
//! the pages asked for all the time), and bounded by weight; a response larger than one shard's
//! share of the bound is not kept. Hits and misses are counted for Prometheus.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Method};
use prometheus_client::metrics::counter::Counter;

use super::query::Visibility;
use crate::directory::sites::hosted::Hosted;
use crate::directory::sites::site::Site;

/// Default of `--directory-cache-bytes`: room for about 1,500 first pages of 20 cards, an
/// eighth of the chart's memory limit.
pub const DEFAULT_BYTES: u64 = 32 * 1024 * 1024;

/// What an entry costs beyond its bytes (the key's and value's fixed parts, the table's slot).
const ENTRY_OVERHEAD: u64 = 256;

/// What decides a cacheable answer: two requests with equal keys get the same bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// [`Site::generation`] of the snapshot answering.
    site: u64,
    /// The caller's visibility class: `None` sees every namespace (Public mode); otherwise
    /// the SHA-256 of the namespaces it may read, sorted, one per line (names hold no line
    /// breaks). A digest, not the list: a caller who may read thousands of namespaces would
    /// otherwise make every key it looks up, hashes and compares that long.
    visible: Option<[u8; 32]>,
    /// A POST (a query in the body) rather than a GET or HEAD.
    post: bool,
    /// The request path.
    path: Box<str>,
    /// The query parameters as the engine reads them: sorted by name, repeated ones in order,
    /// encoded again.
    query: Box<str>,
    /// A POST's body, byte for byte (a re-serialised JSON could merge bodies the request
    /// parser tells apart, such as one with a duplicate field).
    body: Bytes,
}

impl Key {
    /// The key of a request to `site` (`None`: not cacheable, a method other than GET, HEAD
    /// and POST) from a caller who may see `visible`.
    pub fn new(
        site: &Site,
        method: &Method,
        path: &str,
        query: Option<&str>,
        body: &Bytes,
        visible: Visibility<'_>,
    ) -> Option<Key> {
        let post = if method == Method::POST {
            true
        } else if method == Method::GET || method == Method::HEAD {
            false
        } else {
            return None;
        };
        Some(Key {
            site: site.generation,
            visible: visible.map(visibility_class),
            post,
            path: path.into(),
            query: normalised_query(query.unwrap_or_default()),
            // A copy: the request's body may be a slice of the connection's read buffer,
            // which a kept key would otherwise hold (and the weight would not count).
            body: if post {
                Bytes::copy_from_slice(body)
            } else {
                Bytes::new()
            },
        })
    }

    fn weight(&self) -> u64 {
        let bytes = self.visible.map_or(0, |v| v.len())
            + self.path.len()
            + self.query.len()
            + self.body.len();
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// `query` as the engine reads it: parameters sorted by name (repeated ones in order) and
/// encoded again. A query in that form already, as a client sends it most often, is taken as
/// it is without being parsed.
fn normalised_query(query: &str) -> Box<str> {
    if in_normal_form(query) {
        return query.into();
    }
    reencoded(query).into()
}

/// Whether `query` is what [`reencoded`] would make of it: `name=value` pairs, names
/// non-empty and in order, both of characters form encoding keeps as they are.
fn in_normal_form(query: &str) -> bool {
    let kept = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'*' | b'-' | b'.' | b'_'))
    };
    let mut previous = "";
    query.is_empty()
        || query.split('&').all(|pair| {
            let Some((name, value)) = pair.split_once('=') else {
                return false;
            };
            let fine = !name.is_empty() && kept(name) && kept(value) && name >= previous;
            previous = name;
            fine
        })
}

/// `query` parsed as the engine parses it, then form-encoded again in name order.
fn reencoded(query: &str) -> String {
    let params = super::http::params(Some(query));
    let mut normalised = url::form_urlencoded::Serializer::new(String::new());
    for (k, values) in &params {
        for v in values {
            normalised.append_pair(k, v);
        }
    }
    normalised.finish()
}

/// The digest of a visibility class: SHA-256 over its namespaces, sorted, one per line.
fn visibility_class(visible: &HashSet<String>) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut names: Vec<&str> = visible.iter().map(String::as_str).collect();
    names.sort_unstable();
    let mut digest = Sha256::new();
    for name in names {
        digest.update(name.as_bytes());
        digest.update(b"\n");
    }
    digest.finalize().into()
}

/// A 200 answer as sent: its body and the strong ETag of the body.
#[derive(Clone, Debug)]
pub struct Rendered {
    /// The JSON body.
    pub body: Bytes,
    /// `"<content hash>"`.
    pub etag: HeaderValue,
}

impl Rendered {
    /// `body` with its ETag (hashed once, here).
    pub fn new(body: Bytes) -> Rendered {
        let etag = format!("\"{}\"", crate::contract::content_hash(&body));
        Rendered {
            // A quoted hex digest: always a valid header value.
            etag: HeaderValue::from_str(&etag).unwrap_or_else(|_| HeaderValue::from_static("")),
            body,
        }
    }
}

/// The weight of an entry: the bytes it holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByBytes;

impl quick_cache::Weighter<Key, Rendered> for ByBytes {
    fn weight(&self, key: &Key, value: &Rendered) -> u64 {
        let value = u64::try_from(value.body.len() + value.etag.len()).unwrap_or(u64::MAX);
        ENTRY_OVERHEAD
            .saturating_add(key.weight())
            .saturating_add(value)
    }
}

/// Rendered responses of every directory of the process, bounded in bytes (see the module
/// doc).
pub struct ResponseCache {
    /// `None` when turned off.
    entries: Option<quick_cache::sync::Cache<Key, Rendered, ByBytes>>,
    /// The sites version whose dead snapshots were last dropped.
    synced: AtomicU64,
    hits: Counter,
    misses: Counter,
}

impl ResponseCache {
    /// A cache of at most `max_bytes` (0: none), counting lookups in `hits` and `misses`.
    pub fn new(max_bytes: u64, hits: Counter, misses: Counter) -> ResponseCache {
        let entries = (max_bytes > 0).then(|| {
            // A guess at the entries it will hold (first pages of some 20 KiB); it sizes the
            // memory of evicted keys kept to spot returning ones, not the bound.
            let items = usize::try_from(max_bytes / (16 * 1024))
                .unwrap_or(usize::MAX)
                .max(64);
            quick_cache::sync::Cache::with_weighter(items, max_bytes, ByBytes)
        });
        ResponseCache {
            entries,
            synced: AtomicU64::new(0),
            hits,
            misses,
        }
    }

    /// A cache that keeps nothing.
    pub fn disabled() -> ResponseCache {
        ResponseCache::new(0, Counter::default(), Counter::default())
    }

    /// Whether anything is kept.
    pub fn is_enabled(&self) -> bool {
        self.entries.is_some()
    }

    /// The response kept for `key`, counted as a hit or a miss.
    pub fn get(&self, key: &Key) -> Option<Rendered> {
        let found = self.entries.as_ref()?.get(key);
        match &found {
            Some(_) => self.hits.inc(),
            None => self.misses.inc(),
        };
        found
    }

    /// Keep `rendered` for `key` (evicting others past the bound; one larger than a shard's
    /// share of the bound is not kept).
    pub fn insert(&self, key: Key, rendered: Rendered) {
        if let Some(entries) = &self.entries {
            entries.insert(key, rendered);
        }
    }

    /// Drop the entries of snapshots `hosted` no longer serves, once per swap of its sites:
    /// one atomic load per request otherwise.
    pub fn sync(&self, hosted: &Hosted) {
        let Some(entries) = &self.entries else {
            return;
        };
        let version = hosted.sites_version();
        if self.synced.load(Ordering::Acquire) == version
            || self.synced.swap(version, Ordering::AcqRel) == version
        {
            return;
        }
        let live: HashSet<u64> = hosted.sites().values().map(|s| s.generation).collect();
        entries.retain(|k, _| live.contains(&k.site));
    }

    /// Bytes held (weights of the entries).
    pub fn bytes(&self) -> u64 {
        self.entries.as_ref().map_or(0, |c| c.weight())
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.as_ref().map_or(0, |c| c.len())
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;
    use crate::crd::AccessMode;
    use crate::directory::entry::{Entry, Placement};
    use crate::directory::http::cached_answer;

    fn entry(namespace: &str, name: &str) -> Arc<Entry> {
        let placement = Placement {
            namespace: namespace.into(),
            name: name.into(),
            host: format!("{name}.example"),
            url: format!("https://{name}.example/.well-known/agent-card.json"),
            content_hash: name.into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
            ..Placement::default()
        };
        let card = serde_json::json!({
            "name": name, "description": "d", "version": "1",
            "supportedInterfaces": [{"url": format!("https://{name}.example/a2a"),
                "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [],
            "skills": [{"id": "forecast", "name": "f", "description": "f", "tags": ["t"]}],
        });
        let body = Bytes::from(serde_json::to_vec(&card).unwrap());
        Arc::new(Entry::build(placement, body).unwrap())
    }

    fn site(mode: AccessMode, entries: Vec<Arc<Entry>>) -> Site {
        Site::new(
            "dir".into(),
            "uid".into(),
            "dir.example".into(),
            String::new(),
            None,
            None,
            mode,
            entries,
        )
    }

    fn counted(max_bytes: u64) -> (ResponseCache, Counter, Counter) {
        let (hits, misses) = (Counter::default(), Counter::default());
        (
            ResponseCache::new(max_bytes, hits.clone(), misses.clone()),
            hits,
            misses,
        )
    }

    fn get(
        cache: &ResponseCache,
        site: &Site,
        query: &str,
        visible: Option<&HashSet<String>>,
    ) -> Rendered {
        cached_answer(
            cache,
            site,
            &Method::GET,
            "/v1/agents",
            Some(query),
            &Bytes::new(),
            visible,
        )
        .unwrap()
    }

    #[test]
    fn a_query_in_normal_form_is_kept_as_it_is_and_any_other_is_reencoded() {
        for normal in [
            "",
            "skill=forecast",
            "limit=20&skill=forecast",
            "skill=a&skill=b&tag=x",
            "a=&b=c.d-e_f*",
        ] {
            assert!(in_normal_form(normal), "{normal}");
            assert_eq!(reencoded(normal), normal);
            assert_eq!(&*normalised_query(normal), normal);
        }
        for other in [
            "skill=forecast&limit=20",
            "skill=a b",
            "skill=a+b",
            "skill=a%20b",
            "skill",
            "a=1&&b=2",
            "=x",
            "a=b=c",
            "q=caf%C3%A9",
            "a=~",
            "b=1&a=2&b=0",
        ] {
            assert!(!in_normal_form(other), "{other}");
            assert_eq!(&*normalised_query(other), reencoded(other), "{other}");
        }
        assert_eq!(
            reencoded("skill=forecast&limit=20"),
            "limit=20&skill=forecast"
        );
    }

    #[test]
    fn a_post_key_owns_its_body_rather_than_a_slice_of_the_read_buffer() {
        let s = site(AccessMode::Public, vec![entry("a", "one")]);
        // A body as hyper hands it over: a slice of a larger read buffer.
        let buffer = Bytes::from(vec![b'x'; 64 * 1024]);
        let body = buffer.slice(100..120);
        let key = Key::new(&s, &Method::POST, "/search", None, &body, None).unwrap();
        assert_eq!(key.body, body);
        let held = key.body.as_ptr_range();
        let buf = buffer.as_ptr_range();
        assert!(
            held.end <= buf.start || held.start >= buf.end,
            "the key holds the read buffer"
        );
        assert_eq!(key.weight(), 20 + "/search".len() as u64);
    }

    #[test]
    fn a_repeated_query_is_a_hit_whatever_its_parameter_order() {
        let (cache, hits, misses) = counted(DEFAULT_BYTES);
        let s = site(
            AccessMode::Public,
            vec![entry("a", "one"), entry("a", "two")],
        );
        let first = get(&cache, &s, "skill=forecast&limit=1", None);
        assert_eq!((hits.get(), misses.get()), (0, 1));
        let again = get(&cache, &s, "limit=1&skill=forecast", None);
        assert_eq!((hits.get(), misses.get()), (1, 1));
        assert_eq!(first.body, again.body);
        assert_eq!(first.etag, again.etag);
        assert_eq!(cache.len(), 1);
        // Another query is another entry; an error is answered but not kept.
        get(&cache, &s, "skill=forecast&limit=2", None);
        let bad = cached_answer(
            &cache,
            &s,
            &Method::GET,
            "/v1/agents",
            Some("colour=red"),
            &Bytes::new(),
            None,
        );
        assert_eq!(bad.unwrap_err().status, 400);
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_swapped_snapshot_starts_empty_and_drops_the_old_entries() {
        let (cache, hits, _) = counted(DEFAULT_BYTES);
        let index = Hosted::new();
        let old = Arc::new(site(AccessMode::Public, vec![entry("a", "one")]));
        index.set_sites(HashMap::from([("dir.example".to_string(), old.clone())]));
        cache.sync(&index);
        let before = get(&cache, &old, "skill=forecast", None);
        assert_eq!(cache.len(), 1);
        let new = Arc::new(site(
            AccessMode::Public,
            vec![entry("a", "one"), entry("a", "two")],
        ));
        index.set_sites(HashMap::from([("dir.example".to_string(), new.clone())]));
        cache.sync(&index);
        assert!(cache.is_empty(), "the old snapshot's entries are dropped");
        let after = get(&cache, &new, "skill=forecast", None);
        assert_eq!(
            hits.get(),
            0,
            "nothing rendered from the old snapshot answers"
        );
        assert_ne!(before.body, after.body);
        assert_ne!(before.etag, after.etag);
        // Syncing again at the same version keeps what the live snapshot has.
        cache.sync(&index);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_bound_is_respected_and_zero_keeps_nothing() {
        let entries: Vec<Arc<Entry>> = (0..30).map(|i| entry("a", &format!("n{i:02}"))).collect();
        let s = site(AccessMode::Public, entries);
        let one = get(&ResponseCache::disabled(), &s, "limit=1", None);
        // Room for a few one-card pages, in any shard.
        let bound = 64 * 1024;
        let (cache, _, _) = counted(bound);
        for limit in 1..=30 {
            for skill in ["forecast", "other"] {
                get(&cache, &s, &format!("limit={limit}&skill={skill}"), None);
                assert!(cache.bytes() <= bound, "{} > {bound}", cache.bytes());
            }
        }
        assert!(cache.len() > 1, "something is kept");
        assert!(
            cache.len() < 60,
            "not everything is kept ({} entries of {} bytes and more)",
            cache.len(),
            one.body.len()
        );
        let (off, hits, misses) = counted(0);
        get(&off, &s, "limit=1", None);
        get(&off, &s, "limit=1", None);
        assert!(!off.is_enabled() && off.is_empty());
        assert_eq!((hits.get(), misses.get()), (0, 0));
    }

    #[test]
    fn visibility_classes_never_share_an_entry() {
        let (cache, hits, misses) = counted(DEFAULT_BYTES);
        let s = site(
            AccessMode::Kubernetes,
            vec![entry("team-a", "alpha"), entry("team-b", "beta")],
        );
        let only_a: HashSet<String> = HashSet::from(["team-a".to_string()]);
        let only_b: HashSet<String> = HashSet::from(["team-b".to_string()]);
        let both: HashSet<String> = HashSet::from(["team-a".into(), "team-b".into()]);
        let none: HashSet<String> = HashSet::new();
        let a = get(&cache, &s, "skill=forecast", Some(&only_a));
        let b = get(&cache, &s, "skill=forecast", Some(&only_b));
        let ab = get(&cache, &s, "skill=forecast", Some(&both));
        let nothing = get(&cache, &s, "skill=forecast", Some(&none));
        let everyone = get(&cache, &s, "skill=forecast", None);
        assert_eq!(
            (hits.get(), misses.get()),
            (0, 5),
            "five classes, five renders"
        );
        let text = |r: &Rendered| String::from_utf8_lossy(&r.body).into_owned();
        assert!(text(&a).contains("alpha") && !text(&a).contains("beta"));
        assert!(text(&b).contains("beta") && !text(&b).contains("alpha"));
        assert!(text(&ab).contains("alpha") && text(&ab).contains("beta"));
        assert!(!text(&nothing).contains("alpha") && !text(&nothing).contains("beta"));
        assert_eq!(ab.body, everyone.body, "same bytes, still separate entries");
        // The same class again (a set built in another order) is a hit on its own entry.
        let b_again: HashSet<String> = HashSet::from(["team-b".to_string()]);
        assert_eq!(
            get(&cache, &s, "skill=forecast", Some(&b_again)).body,
            b.body
        );
        let ba: HashSet<String> = HashSet::from(["team-b".into(), "team-a".into()]);
        assert_eq!(get(&cache, &s, "skill=forecast", Some(&ba)).body, ab.body);
        assert_eq!((hits.get(), misses.get()), (2, 5));
    }

    #[test]
    fn post_bodies_are_keyed_byte_for_byte_and_other_methods_not_at_all() {
        let s = site(AccessMode::Public, vec![]);
        let body = |b: &str| Bytes::from(b.to_string());
        let key = |m: &Method, b: &str| Key::new(&s, m, "/search", None, &body(b), None);
        assert_eq!(key(&Method::POST, "{}"), key(&Method::POST, "{}"));
        assert_ne!(key(&Method::POST, "{}"), key(&Method::POST, "{ }"));
        assert_eq!(
            key(&Method::GET, "x"),
            key(&Method::HEAD, "y"),
            "GET ignores bodies"
        );
        assert!(key(&Method::DELETE, "{}").is_none());
    }
}
