//! The query engine: filters, text ranking, cursors and facets over one directory's entries.
//! Pure (no HTTP, no Kubernetes): the ARD and native handlers are thin views of it.
//!
//! A [`Catalog`] is an immutable snapshot, built when the listed cards change: entries sorted
//! by identifier (the stable order of listings); per field and lower-cased value, the
//! positions of the entries that have it ([`super::postings::Set`]); the text index
//! ([`super::text`]); and, per position, the entry's namespace (as a number) and lifecycle, so
//! visibility and tombstones are checked without reading the entries. A query is OR within a
//! field and AND across fields, so it is a union of sets per field and an intersection across
//! fields (as bitsets), then the caller's visibility (namespaces it may read), tombstones left
//! out and, with text, the entries some word matches; a ranking orders those by a counting
//! sort on (deprecated, score), which keeps identifier order within a score, or keeps one
//! page of it in a bounded heap. The web page lists in the order people read titles ("Agent 2"
//! before "Agent 10"): a rank per position, built the first time it is asked for.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use super::entry::{query_words, Entry, Field};
use super::postings::{self, Growing, Set};
use super::text::{Scores, TextIndex};

/// What a caller asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// Per field, the accepted values (any of them matches; compared without case).
    pub filters: BTreeMap<Field, Vec<String>>,
    /// Free text: entries must match at least one word, ranked by relevance.
    pub text: Option<String>,
    /// Only these identifiers (any of them), when given.
    pub identifiers: Option<Vec<String>>,
    /// Match nothing (a filter no entry of this catalog can meet, e.g. another artifact type).
    pub nothing: bool,
}

/// The namespaces a caller may see (`None`: every namespace).
pub type Visibility<'a> = Option<&'a HashSet<String>>;

/// Per-position state bit: the entry is a retired card's tombstone.
const RETIRED: u8 = 1;
/// Per-position state bit: the entry is deprecated (ranked after active ones).
const DEPRECATED: u8 = 2;

/// One directory's listed cards, indexed.
#[derive(Debug, Default)]
pub struct Catalog {
    entries: Vec<Arc<Entry>>,
    /// The namespaces of the entries, sorted, without repeats.
    namespaces: Vec<String>,
    /// Per position: the index of its entry's namespace in `namespaces`.
    namespace_of: Vec<u32>,
    /// Per position: [`RETIRED`] and [`DEPRECATED`] bits.
    state: Vec<u8>,
    /// Per field and lower-cased value, the positions of the entries that have it.
    postings: HashMap<(Field, String), Set>,
    text: TextIndex,
    /// Per position, its place in title order ([`Catalog::list_by_title`]); built on first
    /// use, since only the web page asks.
    title_rank: OnceLock<Vec<u32>>,
}

/// One page of an ordered listing.
#[derive(Debug)]
pub struct Page {
    /// The entries, in order.
    pub items: Vec<Arc<Entry>>,
    /// Identifier of the last item when more follow.
    pub next_after: Option<String>,
    /// Number of entries matching in all.
    pub total: usize,
}

/// Entries ranked by text relevance, borrowed from the catalog (a ranking of many thousand
/// entries copies no entry and touches no reference count; a page clones what it shows).
#[derive(Debug)]
pub struct Ranked<'a> {
    /// `(entry, score 0–100)`, best first (ties by identifier).
    pub hits: Vec<(&'a Arc<Entry>, u8)>,
}

/// One page of a ranking, the entries cloned for the answer.
#[derive(Debug)]
pub struct RankedPage {
    /// `(entry, score 0–100)`, best first (ties by identifier).
    pub hits: Vec<(Arc<Entry>, u8)>,
    /// Number of entries ranked in all.
    pub total: usize,
}

/// Number of ranks: active scores 100 to 0, then deprecated ones.
const RANKS: usize = 202;

/// One facet's counts, largest first (ties by value).
pub type Buckets = Vec<(String, usize)>;

/// Who may see what and which tombstones count, per position, for one query.
struct Admit<'c> {
    /// Per namespace index: visible (`None`: all are).
    namespaces: Option<Vec<bool>>,
    /// Whether retired entries are left out.
    skip_retired: bool,
    /// The text scores, when the query has text (entries scoring 0 are left out).
    scores: Option<&'c Scores>,
}

impl Catalog {
    /// Index `entries` (any order; duplicates by identifier keep the first).
    pub fn build(mut entries: Vec<Arc<Entry>>) -> Catalog {
        entries.sort_by(|a, b| a.identifier.cmp(&b.identifier));
        entries.dedup_by(|a, b| a.identifier == b.identifier);
        let mut growing: HashMap<(Field, String), Growing> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            for field in Field::ALL {
                for v in e.values(field) {
                    growing.entry((field, v)).or_default().push(i, 0);
                }
            }
        }
        let len = entries.len();
        let postings = growing
            .into_iter()
            .map(|(k, g)| (k, Set::new(g, len)))
            .collect();
        let text = TextIndex::build(entries.len(), |i| entries[i].tokens());
        let mut namespaces: Vec<String> = entries
            .iter()
            .map(|e| e.placement.namespace.clone())
            .collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        let namespace_of = entries
            .iter()
            .map(|e| {
                let i = namespaces.partition_point(|n| *n < e.placement.namespace);
                u32::try_from(i).unwrap_or(u32::MAX)
            })
            .collect();
        let state = entries.iter().map(|e| state_of(e)).collect();
        Catalog {
            entries,
            namespaces,
            namespace_of,
            state,
            postings,
            text,
            title_rank: OnceLock::new(),
        }
    }

    /// Text relevance (0–100, as [`Entry::score`]) of every position, when the query has
    /// words.
    fn text_scores(&self, text: Option<&str>) -> Option<Scores> {
        let words = query_words(text?);
        (!words.is_empty()).then(|| self.text.scores(&words, self.entries.len()))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the catalog lists nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, in identifier order.
    pub fn entries(&self) -> &[Arc<Entry>] {
        &self.entries
    }

    /// The entry `identifier`, when visible.
    pub fn get(&self, identifier: &str, visible: Visibility<'_>) -> Option<Arc<Entry>> {
        let i = self.position(identifier)?;
        let e = &self.entries[i as usize];
        is_visible(e, visible).then(|| e.clone())
    }

    /// The entry of AgentCard `namespace/name`, when visible.
    pub fn get_card(
        &self,
        namespace: &str,
        name: &str,
        visible: Visibility<'_>,
    ) -> Option<Arc<Entry>> {
        // A local card always holds its own namespace/name: a federated entry claiming it
        // (an upstream says what it likes) is found only where no local card is, visible to
        // this caller or not.
        let mut federated = None;
        for e in &self.entries {
            if e.placement.namespace != namespace || e.placement.name != name {
                continue;
            }
            if e.origin.is_none() {
                return is_visible(e, visible).then(|| e.clone());
            }
            federated.get_or_insert(e);
        }
        federated.filter(|e| is_visible(e, visible)).cloned()
    }

    /// The position of the entry `identifier`.
    fn position(&self, identifier: &str) -> Option<u32> {
        let i = self
            .entries
            .binary_search_by(|e| e.identifier.as_str().cmp(identifier))
            .ok()?;
        u32::try_from(i).ok()
    }

    /// Positions matching the filters and identifiers, as a bitset (`None`: neither given,
    /// everything): per field the union of its values' sets, across fields the intersection.
    fn filtered(&self, query: &Query) -> Option<Vec<u64>> {
        let words = self.entries.len().div_ceil(64);
        let mut result: Option<Vec<u64>> = None;
        let mut and = |set: Vec<u64>| match &mut result {
            None => result = Some(set),
            Some(prev) => prev.iter_mut().zip(set).for_each(|(p, s)| *p &= s),
        };
        for (field, values) in &query.filters {
            let mut union = vec![0u64; words];
            for v in values {
                if let Some(set) = self.postings.get(&(*field, v.to_lowercase())) {
                    set.or_into(&mut union);
                }
            }
            and(union);
        }
        if let Some(ids) = &query.identifiers {
            let mut wanted = vec![0u64; words];
            postings::set_bits(&mut wanted, ids.iter().filter_map(|id| self.position(id)));
            and(wanted);
        }
        result
    }

    /// What decides, per position, whether a filtered entry is admitted for `query`.
    fn admit<'c>(
        &self,
        query: &Query,
        visible: Visibility<'_>,
        scores: Option<&'c Scores>,
    ) -> Admit<'c> {
        Admit {
            namespaces: visible.map(|v| self.namespaces.iter().map(|n| v.contains(n)).collect()),
            // A retired card's tombstone is found by its identifier or by asking for its
            // state, not among the agents one may call.
            skip_retired: !query.filters.contains_key(&Field::Lifecycle)
                && query.identifiers.is_none(),
            scores,
        }
    }

    /// Whether the entry at position `i` passes `admit`.
    fn admitted(&self, admit: &Admit<'_>, i: u32) -> bool {
        let at = i as usize;
        let visible = admit.namespaces.as_ref().is_none_or(|v| {
            let ns = self.namespace_of.get(at).copied().unwrap_or(u32::MAX);
            v.get(ns as usize).copied().unwrap_or(false)
        });
        let retired = self.state.get(at).is_some_and(|s| s & RETIRED != 0);
        visible && !(admit.skip_retired && retired) && admit.scores.is_none_or(|s| s.matches(i))
    }

    /// Calls `f` with each position matching `query` (filters, identifiers, visibility,
    /// tombstones and, with `scores`, text), ascending. Without filters, text walks only the
    /// positions some word matches.
    fn each_match(
        &self,
        query: &Query,
        visible: Visibility<'_>,
        scores: Option<&Scores>,
        f: impl FnMut(u32),
    ) {
        if query.nothing {
            return;
        }
        let admit = self.admit(query, visible, scores);
        let admitted = |&i: &u32| self.admitted(&admit, i);
        match (self.filtered(query), scores) {
            (Some(set), _) => postings::bits(&set).filter(admitted).for_each(f),
            (None, Some(s)) => s.positions().filter(admitted).for_each(f),
            (None, None) => (0..u32::try_from(self.entries.len()).unwrap_or(u32::MAX))
                .filter(admitted)
                .for_each(f),
        }
    }

    /// The positions [`Catalog::each_match`] visits.
    fn matching(
        &self,
        query: &Query,
        visible: Visibility<'_>,
        scores: Option<&Scores>,
    ) -> Vec<u32> {
        let mut out = Vec::new();
        self.each_match(query, visible, scores, |i| out.push(i));
        out
    }

    /// Where position `i` ranks: deprecated after active, then by score (100 first), as a
    /// number below [`RANKS`].
    fn rank(&self, i: u32, score: u8) -> usize {
        let deprecated = self
            .state
            .get(i as usize)
            .is_some_and(|s| s & DEPRECATED != 0);
        usize::from(deprecated) * 101 + usize::from(100 - score.min(100))
    }

    /// Entries matching `query` in identifier order, `limit` of them after identifier
    /// `after`. Text narrows to entries matching a word; order stays by identifier.
    pub fn list(
        &self,
        query: &Query,
        visible: Visibility<'_>,
        after: Option<&str>,
        limit: usize,
    ) -> Page {
        let scores = self.text_scores(query.text.as_deref());
        let positions = self.matching(query, visible, scores.as_ref());
        let start = match after {
            Some(id) => {
                positions.partition_point(|&i| self.entries[i as usize].identifier.as_str() <= id)
            }
            None => 0,
        };
        self.page(&positions, start, limit, |e| e.identifier.clone())
    }

    /// The page of `limit` entries of `positions` from `start`, with the cursor `cursor` makes
    /// of its last entry when more follow.
    fn page(
        &self,
        positions: &[u32],
        start: usize,
        limit: usize,
        cursor: impl Fn(&Entry) -> String,
    ) -> Page {
        let items: Vec<Arc<Entry>> = positions[start.min(positions.len())..]
            .iter()
            .take(limit)
            .map(|&i| self.entries[i as usize].clone())
            .collect();
        let more = positions.len() > start + items.len();
        Page {
            next_after: more.then(|| items.last().map(|e| cursor(e))).flatten(),
            items,
            total: positions.len(),
        }
    }

    /// Per position, its place in title order (see [`title_order`]).
    fn title_rank(&self) -> &[u32] {
        self.title_rank.get_or_init(|| {
            let folded: Vec<String> = self
                .entries
                .iter()
                .map(|e| e.title().to_lowercase())
                .collect();
            let mut order: Vec<u32> = (0..self.entries.len())
                .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                .collect();
            // Positions ascend in identifier order: the last tie-break.
            order.sort_by(|&a, &b| {
                let (ea, eb) = (&self.entries[a as usize], &self.entries[b as usize]);
                alphanumeric_sort::compare_str(&folded[a as usize], &folded[b as usize])
                    .then_with(|| ea.title().cmp(eb.title()))
                    .then(a.cmp(&b))
            });
            let mut rank = vec![0u32; order.len()];
            for (place, &i) in order.iter().enumerate() {
                rank[i as usize] = u32::try_from(place).unwrap_or(u32::MAX);
            }
            rank
        })
    }

    /// One page of the entries matching `query` in the order people read their titles
    /// ([`title_order`]), after the cursor `after` that an earlier page's `next_after` gave
    /// (a title and an identifier: it holds while entries come and go).
    pub fn list_by_title(
        &self,
        query: &Query,
        visible: Visibility<'_>,
        after: Option<&str>,
        limit: usize,
    ) -> Page {
        let scores = self.text_scores(query.text.as_deref());
        let mut positions = self.matching(query, visible, scores.as_ref());
        let rank = self.title_rank();
        positions.sort_unstable_by_key(|&i| rank[i as usize]);
        let start = match after.and_then(|a| a.rsplit_once(TITLE_CURSOR)) {
            Some((title, identifier)) => positions.partition_point(|&i| {
                let e = &self.entries[i as usize];
                title_order(e.title(), title).then_with(|| e.identifier.as_str().cmp(identifier))
                    != Ordering::Greater
            }),
            None => 0,
        };
        self.page(&positions, start, limit, |e| {
            format!("{}{TITLE_CURSOR}{}", e.title(), e.identifier)
        })
    }

    /// Entries matching `query`, ranked by the text's relevance (all scores 100 without text).
    /// Deprecated agents come after active ones, whatever their score; ties stay in
    /// identifier order. [`Catalog::search_page`] answers one page of it for less.
    pub fn search(&self, query: &Query, visible: Visibility<'_>) -> Ranked<'_> {
        let scores = self.text_scores(query.text.as_deref());
        let score = |i: u32| scores.as_ref().map_or(100, |s| s.get(i));
        let positions = self.matching(query, visible, scores.as_ref());
        // Counting sort on the rank: stable (positions ascend), linear.
        let mut next = [0usize; RANKS + 1];
        for &i in &positions {
            next[self.rank(i, score(i)) + 1] += 1;
        }
        for r in 1..next.len() {
            next[r] += next[r - 1];
        }
        let Some(first) = self.entries.first() else {
            return Ranked { hits: Vec::new() };
        };
        let mut hits = vec![(first, 0); positions.len()];
        for i in positions {
            let s = score(i);
            let slot = &mut next[self.rank(i, s)];
            hits[*slot] = (&self.entries[i as usize], s);
            *slot += 1;
        }
        Ranked { hits }
    }

    /// The `limit` entries from `offset` of [`Catalog::search`]'s ranking, and how many rank
    /// in all: one pass over the matches keeping the best `offset + limit` in a bounded heap
    /// (matches come in identifier order, so a later one displaces the worst kept only with a
    /// better rank), without materializing or sorting the whole ranking.
    pub fn search_page(
        &self,
        query: &Query,
        visible: Visibility<'_>,
        offset: usize,
        limit: usize,
    ) -> RankedPage {
        let scores = self.text_scores(query.text.as_deref());
        let score = |i: u32| scores.as_ref().map_or(100, |s| s.get(i));
        let keep = offset.saturating_add(limit);
        let mut best: BinaryHeap<(usize, u32)> = BinaryHeap::with_capacity(keep.min(1024));
        let mut total = 0;
        self.each_match(query, visible, scores.as_ref(), |i| {
            total += 1;
            let r = self.rank(i, score(i));
            if best.len() < keep {
                best.push((r, i));
            } else if best.peek().is_some_and(|worst| r < worst.0) {
                if let Some(mut worst) = best.peek_mut() {
                    *worst = (r, i);
                }
            }
        });
        let hits = best
            .into_sorted_vec()
            .into_iter()
            .skip(offset)
            .map(|(_, i)| (self.entries[i as usize].clone(), score(i)))
            .collect();
        RankedPage { hits, total }
    }

    /// Counts of each value of `fields` over the entries matching `query`.
    pub fn facets(
        &self,
        query: &Query,
        visible: Visibility<'_>,
        fields: &[Field],
    ) -> BTreeMap<Field, Buckets> {
        self.facets_with_total(query, visible, fields).0
    }

    /// [`Catalog::facets`] and the number of entries matching `query` (one pass for both).
    /// A field asked for twice is counted once.
    pub fn facets_with_total(
        &self,
        query: &Query,
        visible: Visibility<'_>,
        fields: &[Field],
    ) -> (BTreeMap<Field, Buckets>, usize) {
        let mut fields = fields.to_vec();
        fields.sort_unstable();
        fields.dedup();
        let scores = self.text_scores(query.text.as_deref());
        let positions = self.matching(query, visible, scores.as_ref());
        let mut counts: BTreeMap<Field, HashMap<&str, usize>> = BTreeMap::new();
        for &i in &positions {
            let e = &self.entries[i as usize];
            for field in &fields {
                let c = counts.entry(*field).or_default();
                for v in e.facet_values(*field) {
                    *c.entry(v).or_default() += 1;
                }
            }
        }
        let facets = fields
            .iter()
            .map(|f| {
                let mut buckets: Buckets = counts
                    .remove(f)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(v, c)| (v.to_string(), c))
                    .collect();
                buckets.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                (*f, buckets)
            })
            .collect();
        (facets, positions.len())
    }
}

/// The [`RETIRED`] and [`DEPRECATED`] bits of `e`.
/// Between the title and the identifier of a [`Catalog::list_by_title`] cursor (the last one:
/// a title may hold anything, an identifier never holds this).
const TITLE_CURSOR: char = '\u{1f}';

/// The order of titles as people read them: numbers by value ("Agent 2" before "Agent 10"),
/// letters without regard to case, then case, so the order is total.
pub fn title_order(a: &str, b: &str) -> Ordering {
    alphanumeric_sort::compare_str(a.to_lowercase(), b.to_lowercase()).then_with(|| a.cmp(b))
}

fn state_of(e: &Entry) -> u8 {
    let mut s = 0;
    if e.placement.retired() {
        s |= RETIRED;
    }
    if e.placement.deprecated() {
        s |= DEPRECATED;
    }
    s
}

fn is_visible(e: &Entry, visible: Visibility<'_>) -> bool {
    visible.is_none_or(|ns| ns.contains(&e.placement.namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::entry::Placement;
    use bytes::Bytes;
    use serde_json::json;

    fn entry(ns: &str, name: &str, card: serde_json::Value) -> Arc<Entry> {
        let placement = Placement {
            namespace: ns.into(),
            name: name.into(),
            host: format!("{name}.example.com"),
            url: format!("https://{name}.example.com/.well-known/agent-card.json"),
            ..Default::default()
        };
        Arc::new(Entry::build(placement, Bytes::from(card.to_string())).unwrap())
    }

    fn catalog() -> Catalog {
        Catalog::build(vec![
            entry(
                "a",
                "weather",
                json!({"name": "Weather", "description": "Forecasts",
                "provider": {"organization": "Acme"}, "capabilities": {"streaming": true},
                "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
                "supportedInterfaces": [{"protocolBinding": "JSONRPC"}],
                "skills": [{"id": "forecast", "name": "Weather forecast", "tags": ["weather", "forecast"],
                    "examples": ["Will it rain in Paris?"]}]}),
            ),
            entry(
                "b",
                "travel",
                json!({"name": "Travel", "description": "Books trips and checks the weather",
                "provider": {"organization": "Globex"},
                "supportedInterfaces": [{"protocolBinding": "GRPC"}],
                "skills": [{"id": "book", "name": "Book", "tags": ["travel"]}]}),
            ),
            entry(
                "a",
                "stocks",
                json!({"name": "Stocks", "description": "Quotes",
                "provider": {"organization": "acme"}, "capabilities": {"extensions": [{"uri": "https://x.example/ext"}]},
                "skills": [{"id": "quote", "name": "Quote", "tags": ["finance"]}]}),
            ),
        ])
    }

    fn q(filters: &[(Field, &[&str])], text: Option<&str>) -> Query {
        Query {
            filters: filters
                .iter()
                .map(|(f, v)| (*f, v.iter().map(|s| s.to_string()).collect()))
                .collect(),
            text: text.map(str::to_string),
            ..Default::default()
        }
    }

    fn names(page: &Page) -> Vec<&str> {
        page.items
            .iter()
            .map(|e| e.placement.name.as_str())
            .collect()
    }

    #[test]
    fn the_web_order_reads_numbers_by_value_and_its_cursor_survives_removals() {
        let named = |name: &str, title: &str| entry("n", name, json!({"name": title}));
        let all = vec![
            named("a", "Agent 10"),
            named("b", "Agent 2"),
            named("c", "agent 3"),
            named("d", "Zeta"),
            named("e", "alpha"),
            named("f", ""),
            named("g", "Agent 2"),
        ];
        let c = Catalog::build(all.clone());
        let titles =
            |p: &Page| -> Vec<String> { p.items.iter().map(|e| e.title().to_string()).collect() };
        let every = c.list_by_title(&Query::default(), None, None, 100);
        // "f" has no card name: its AgentCard's name is its title.
        assert_eq!(
            titles(&every),
            ["Agent 2", "Agent 2", "agent 3", "Agent 10", "alpha", "f", "Zeta"]
        );
        // Equal titles keep identifier order.
        assert_eq!(names(&every)[..2], ["b", "g"]);
        // Pages of two walk every entry once.
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let p = c.list_by_title(&Query::default(), None, after.as_deref(), 2);
            seen.extend(names(&p).into_iter().map(str::to_string));
            match p.next_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
        assert_eq!(seen, names(&every));
        // The cursor after "agent 3" still holds once that entry is gone.
        let first = c.list_by_title(&Query::default(), None, None, 3);
        assert_eq!(names(&first), ["b", "g", "c"]);
        let without: Vec<_> = all
            .into_iter()
            .filter(|e| e.placement.name != "c")
            .collect();
        let later = Catalog::build(without);
        let next = later.list_by_title(&Query::default(), None, first.next_after.as_deref(), 10);
        assert_eq!(names(&next), ["a", "e", "f", "d"]);
        assert_eq!(title_order("Agent 9", "agent 10"), Ordering::Less);
    }

    #[test]
    fn or_within_a_field_and_across_fields() {
        let c = catalog();
        let p = c.list(&q(&[(Field::Provider, &["ACME"])], None), None, None, 10);
        assert_eq!(names(&p), ["stocks", "weather"]);
        let p = c.list(
            &q(&[(Field::Tag, &["weather", "travel"])], None),
            None,
            None,
            10,
        );
        assert_eq!(names(&p), ["travel", "weather"]);
        let p = c.list(
            &q(
                &[
                    (Field::Tag, &["weather", "travel"]),
                    (Field::Binding, &["grpc"]),
                ],
                None,
            ),
            None,
            None,
            10,
        );
        assert_eq!(names(&p), ["travel"]);
        let p = c.list(
            &q(&[(Field::Skill, &["Weather forecast"])], None),
            None,
            None,
            10,
        );
        assert_eq!(names(&p), ["weather"]);
        let p = c.list(
            &q(&[(Field::Capability, &["https://x.example/ext"])], None),
            None,
            None,
            10,
        );
        assert_eq!(names(&p), ["stocks"]);
    }

    #[test]
    fn cursors_walk_every_entry_once_and_visibility_hides_namespaces() {
        let c = catalog();
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let p = c.list(&Query::default(), None, after.as_deref(), 1);
            assert_eq!(p.total, 3);
            seen.extend(p.items.iter().map(|e| e.placement.name.clone()));
            match p.next_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
        assert_eq!(seen, ["stocks", "travel", "weather"]);
        let only_b = HashSet::from(["b".to_string()]);
        let p = c.list(&Query::default(), Some(&only_b), None, 10);
        assert_eq!((names(&p), p.total), (vec!["travel"], 1));
        let f = c.facets(&Query::default(), Some(&only_b), &[Field::Provider]);
        assert_eq!(f[&Field::Provider], vec![("Globex".to_string(), 1)]);
    }

    #[test]
    fn text_ranks_name_matches_above_description_matches() {
        let c = catalog();
        let r = c.search(&q(&[], Some("weather")), None);
        let order: Vec<&str> = r
            .hits
            .iter()
            .map(|(e, _)| e.placement.name.as_str())
            .collect();
        assert_eq!(order, ["weather", "travel"]);
        assert!(r.hits[0].1 > r.hits[1].1 && r.hits[1].1 > 0);
        assert!(r.hits.iter().all(|(_, s)| *s <= 100));
        assert!(c
            .search(&q(&[], Some("nothing-like-this")), None)
            .hits
            .is_empty());
    }

    #[test]
    fn deprecated_agents_rank_after_active_ones_and_tombstones_not_at_all() {
        use crate::crd::{LifecycleState, ServedLifecycle};
        let with_state = |name: &str, text: &str, state: Option<LifecycleState>| {
            let placement = Placement {
                namespace: "a".into(),
                name: name.into(),
                host: format!("{name}.example.com"),
                lifecycle: state.map(|state| {
                    Box::new(ServedLifecycle {
                        state,
                        ..Default::default()
                    })
                }),
                ..Default::default()
            };
            let body = Bytes::from(json!({ "name": text }).to_string());
            Arc::new(Entry::build(placement, body).unwrap())
        };
        let c = Catalog::build(vec![
            with_state("old", "weather weather", Some(LifecycleState::Deprecated)),
            with_state("gone", "weather", Some(LifecycleState::Retired)),
            with_state("new", "weather station", None),
            with_state("other", "weathering", None),
        ]);
        let query = q(&[], Some("weather"));
        let ranked: Vec<&str> = c
            .search(&query, None)
            .hits
            .iter()
            .map(|(e, _)| e.placement.name.as_str())
            .collect();
        assert_eq!(ranked, ["new", "other", "old"]);
        let page = c.search_page(&query, None, 1, 5);
        let names: Vec<&str> = page
            .hits
            .iter()
            .map(|(e, _)| e.placement.name.as_str())
            .collect();
        assert_eq!((names, page.total), (vec!["other", "old"], 3));
    }

    #[test]
    fn facets_count_matching_entries() {
        let c = catalog();
        let f = c.facets(&Query::default(), None, &[Field::Namespace, Field::Tag]);
        assert_eq!(
            f[&Field::Namespace],
            vec![("a".to_string(), 2), ("b".to_string(), 1)]
        );
        assert_eq!(f[&Field::Tag].len(), 4);
    }
}
