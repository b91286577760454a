//! The query engine: filters, text ranking, cursors and facets over one directory's entries.
//! Pure (no HTTP, no Kubernetes): the ARD and native handlers are thin views of it.
//!
//! A [`Catalog`] is an immutable snapshot, built when the listed cards change: entries sorted
//! by identifier (the stable order of listings) plus, per field and lower-cased value, the
//! sorted positions of the entries that have it. A query is OR within a field and AND across
//! fields, so it is a union of posting lists per field and an intersection across fields, then
//! the caller's visibility (namespaces it may read) and, with text, a ranking.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::entry::{query_words, Entry, Field};

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

/// One directory's listed cards, indexed.
#[derive(Debug, Default)]
pub struct Catalog {
    entries: Vec<Arc<Entry>>,
    postings: HashMap<(Field, String), Vec<u32>>,
    /// Text token → the entries holding it, each `position << 3 | weight` (sorted by token, so
    /// a prefix is a range).
    tokens: BTreeMap<Box<str>, Vec<u32>>,
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

/// Entries ranked by text relevance.
#[derive(Debug)]
pub struct Ranked {
    /// `(entry, score 0–100)`, best first (ties by identifier).
    pub hits: Vec<(Arc<Entry>, u8)>,
}

/// One facet's counts, largest first (ties by value).
pub type Buckets = Vec<(String, usize)>;

impl Catalog {
    /// Index `entries` (any order; duplicates by identifier keep the first).
    pub fn build(mut entries: Vec<Arc<Entry>>) -> Catalog {
        entries.sort_by(|a, b| a.identifier.cmp(&b.identifier));
        entries.dedup_by(|a, b| a.identifier == b.identifier);
        let mut postings: HashMap<(Field, String), Vec<u32>> = HashMap::new();
        let mut tokens: BTreeMap<Box<str>, Vec<u32>> = BTreeMap::new();
        for (i, e) in entries.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            for (t, w) in e.tokens() {
                let packed = (i << 3) | u32::from(w.min(7));
                match tokens.get_mut(t) {
                    Some(list) => list.push(packed),
                    None => {
                        tokens.insert(t.into(), vec![packed]);
                    }
                }
            }
            for field in Field::ALL {
                for v in e.values(field) {
                    postings.entry((field, v)).or_default().push(i);
                }
            }
        }
        for list in postings.values_mut() {
            list.shrink_to_fit();
        }
        for list in tokens.values_mut() {
            list.shrink_to_fit();
        }
        Catalog {
            entries,
            postings,
            tokens,
        }
    }

    /// Text relevance (0–100, as [`Entry::score`]) of every entry matching a word of `text`,
    /// from the token index: a word scores twice its token's weight on an exact match, the
    /// weight when it only starts the token.
    fn text_scores(&self, text: Option<&str>) -> Option<HashMap<u32, u8>> {
        let query = query_words(text?);
        if query.is_empty() {
            return None;
        }
        let mut totals: HashMap<u32, u32> = HashMap::new();
        for q in &query {
            let mut best: HashMap<u32, u32> = HashMap::new();
            for (token, list) in self.tokens.range::<str, _>((
                std::ops::Bound::Included(q.as_str()),
                std::ops::Bound::Unbounded,
            )) {
                if !token.starts_with(q.as_str()) {
                    break;
                }
                let exact = **token == **q;
                for packed in list {
                    let (i, w) = (packed >> 3, packed & 7);
                    let s = if exact { w * 2 } else { w };
                    let b = best.entry(i).or_insert(0);
                    *b = (*b).max(s);
                }
            }
            for (i, s) in best {
                *totals.entry(i).or_insert(0) += s;
            }
        }
        let max = 10 * u32::try_from(query.len()).unwrap_or(u32::MAX);
        Some(
            totals
                .into_iter()
                .map(|(i, t)| {
                    (
                        i,
                        u8::try_from((t * 100).div_ceil(max).min(100)).unwrap_or(100),
                    )
                })
                .collect(),
        )
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
        let i = self
            .entries
            .binary_search_by(|e| e.identifier.as_str().cmp(identifier))
            .ok()?;
        let e = &self.entries[i];
        is_visible(e, visible).then(|| e.clone())
    }

    /// The entry of AgentCard `namespace/name`, when visible.
    pub fn get_card(
        &self,
        namespace: &str,
        name: &str,
        visible: Visibility<'_>,
    ) -> Option<Arc<Entry>> {
        self.entries
            .iter()
            .find(|e| e.placement.namespace == namespace && e.placement.name == name)
            .filter(|e| is_visible(e, visible))
            .cloned()
    }

    /// Positions matching the filters, ascending (`None`: no filter, everything).
    fn filtered(&self, query: &Query) -> Option<Vec<u32>> {
        let mut result: Option<Vec<u32>> = None;
        for (field, values) in &query.filters {
            let mut union: Vec<u32> = Vec::new();
            for v in values {
                if let Some(list) = self.postings.get(&(*field, v.to_lowercase())) {
                    union = merge(&union, list);
                }
            }
            result = Some(match result {
                None => union,
                Some(prev) => intersect(&prev, &union),
            });
        }
        result
    }

    fn matching(&self, query: &Query, visible: Visibility<'_>) -> Vec<u32> {
        if query.nothing {
            return Vec::new();
        }
        let all = || (0..u32::try_from(self.entries.len()).unwrap_or(u32::MAX)).collect();
        let mut positions = self.filtered(query).unwrap_or_else(all);
        if let Some(ids) = &query.identifiers {
            let mut wanted: Vec<u32> = ids
                .iter()
                .filter_map(|id| {
                    let i = self
                        .entries
                        .binary_search_by(|e| e.identifier.as_str().cmp(id))
                        .ok()?;
                    u32::try_from(i).ok()
                })
                .collect();
            wanted.sort_unstable();
            positions = intersect(&positions, &wanted);
        }
        if visible.is_some() {
            positions.retain(|&i| is_visible(&self.entries[i as usize], visible));
        }
        // A retired card's tombstone is found by its identifier or by asking for its state,
        // not among the agents one may call.
        if !query.filters.contains_key(&Field::Lifecycle) && query.identifiers.is_none() {
            positions.retain(|&i| !self.entries[i as usize].placement.retired());
        }
        positions
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
        let mut positions = self.matching(query, visible);
        if let Some(scores) = self.text_scores(query.text.as_deref()) {
            positions.retain(|i| scores.contains_key(i));
        }
        let total = positions.len();
        let start = match after {
            Some(id) => {
                positions.partition_point(|&i| self.entries[i as usize].identifier.as_str() <= id)
            }
            None => 0,
        };
        let items: Vec<Arc<Entry>> = positions[start..]
            .iter()
            .take(limit)
            .map(|&i| self.entries[i as usize].clone())
            .collect();
        let more = positions.len() > start + items.len();
        Page {
            next_after: more
                .then(|| items.last().map(|e| e.identifier.clone()))
                .flatten(),
            items,
            total,
        }
    }

    /// Entries matching `query`, ranked by the text's relevance (all scores 100 without text).
    pub fn search(&self, query: &Query, visible: Visibility<'_>) -> Ranked {
        let scores = self.text_scores(query.text.as_deref());
        let mut hits: Vec<(Arc<Entry>, u8)> = self
            .matching(query, visible)
            .into_iter()
            .filter_map(|i| {
                let score = match &scores {
                    None => 100,
                    Some(s) => *s.get(&i)?,
                };
                (score > 0).then(|| (self.entries[i as usize].clone(), score))
            })
            .collect();
        // Positions are in identifier order and the sort is stable: ties stay by identifier.
        // Deprecated agents after active ones, whatever their score.
        hits.sort_by(|a, b| {
            (a.0.placement.deprecated())
                .cmp(&b.0.placement.deprecated())
                .then(b.1.cmp(&a.1))
        });
        Ranked { hits }
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
        let mut counts: BTreeMap<Field, BTreeMap<String, usize>> = BTreeMap::new();
        let mut total = 0;
        for i in self.matching(query, visible) {
            let e = &self.entries[i as usize];
            if scores.as_ref().is_some_and(|s| !s.contains_key(&i)) {
                continue;
            }
            total += 1;
            for field in &fields {
                let c = counts.entry(*field).or_default();
                for v in e.facet_values(*field) {
                    *c.entry(v.to_string()).or_default() += 1;
                }
            }
        }
        let facets = fields
            .iter()
            .map(|f| {
                let mut buckets: Buckets =
                    counts.remove(f).unwrap_or_default().into_iter().collect();
                buckets.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                (*f, buckets)
            })
            .collect();
        (facets, total)
    }
}

fn is_visible(e: &Entry, visible: Visibility<'_>) -> bool {
    visible.is_none_or(|ns| ns.contains(&e.placement.namespace))
}

fn merge(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
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
