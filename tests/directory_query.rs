//! Differential test of the directory's query engine: many random queries (every filter, text,
//! visibility, paging through every page) over generated cards, against a plain reference
//! filter written here over the raw card JSON.

#[path = "support/dircards.rs"]
mod dircards;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use agentcard_operator::directory::entry::{Entry, Field, Placement};
use agentcard_operator::directory::query::{Catalog, Query};
use bytes::Bytes;
use dircards::*;
use serde_json::Value;

struct Card {
    ns: String,
    identifier: String,
    json: Value,
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The values of `field` in `card`, read straight from the JSON.
fn reference_values(card: &Card, field: Field) -> Vec<String> {
    let j = &card.json;
    let skills = j["skills"].as_array().cloned().unwrap_or_default();
    match field {
        Field::Skill => skills
            .iter()
            .flat_map(|s| [s["id"].as_str(), s["name"].as_str()])
            .flatten()
            .map(str::to_string)
            .collect(),
        Field::Tag => skills.iter().flat_map(|s| strs(&s["tags"])).collect(),
        Field::Provider => j["provider"]["organization"]
            .as_str()
            .map(|s| vec![s.to_string()])
            .unwrap_or_default(),
        Field::Capability => {
            let mut out: Vec<String> = ["streaming", "pushNotifications", "extendedAgentCard"]
                .into_iter()
                .filter(|f| j["capabilities"][*f] == true)
                .map(str::to_string)
                .collect();
            out.extend(
                j["capabilities"]["extensions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["uri"].as_str().map(str::to_string)),
            );
            out
        }
        Field::InputMode => {
            let mut out = strs(&j["defaultInputModes"]);
            out.extend(skills.iter().flat_map(|s| strs(&s["inputModes"])));
            out
        }
        Field::OutputMode => {
            let mut out = strs(&j["defaultOutputModes"]);
            out.extend(skills.iter().flat_map(|s| strs(&s["outputModes"])));
            out
        }
        Field::Binding => j["supportedInterfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["protocolBinding"].as_str().map(str::to_string))
            .collect(),
        Field::Namespace => vec![card.ns.clone()],
        // These cards have no backend and no lifecycle.
        Field::Reachable => vec!["unknown".to_string()],
        Field::Lifecycle => vec!["Active".to_string()],
    }
}

fn lower_words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn reference_text_match(card: &Card, text: &str) -> bool {
    let j = &card.json;
    let mut words = lower_words(j["name"].as_str().unwrap_or_default());
    words.extend(lower_words(j["description"].as_str().unwrap_or_default()));
    for s in j["skills"].as_array().into_iter().flatten() {
        words.extend(lower_words(s["name"].as_str().unwrap_or_default()));
        words.extend(lower_words(s["description"].as_str().unwrap_or_default()));
        for t in strs(&s["tags"]).iter().chain(strs(&s["examples"]).iter()) {
            words.extend(lower_words(t));
        }
    }
    lower_words(text)
        .iter()
        .any(|q| words.iter().any(|w| w.starts_with(q.as_str())))
}

fn reference(cards: &[Card], q: &Query, visible: Option<&HashSet<String>>) -> Vec<String> {
    let mut out: Vec<String> = cards
        .iter()
        .filter(|c| visible.is_none_or(|v| v.contains(&c.ns)))
        .filter(|c| {
            q.filters.iter().all(|(field, wanted)| {
                let have = reference_values(c, *field);
                wanted
                    .iter()
                    .any(|w| have.iter().any(|h| h.eq_ignore_ascii_case(w)))
            })
        })
        .filter(|c| q.text.as_deref().is_none_or(|t| reference_text_match(c, t)))
        .map(|c| c.identifier.clone())
        .collect();
    out.sort();
    out
}

fn random_value(r: &mut Rng, field: Field, cards: &[Card]) -> String {
    // Usually a value some card has (in a random case), sometimes one nobody has.
    if r.below(8) == 0 {
        return "no-such-value".into();
    }
    let card = &cards[r.below(cards.len())];
    let values = reference_values(card, field);
    if values.is_empty() {
        return "no-such-value".into();
    }
    let v = values[r.below(values.len())].clone();
    if r.below(2) == 0 {
        v.to_uppercase()
    } else {
        v
    }
}

#[test]
fn the_engine_agrees_with_a_plain_filter_on_random_queries_and_pages() {
    let generated = generate(3000, 12, 7);
    let cards: Vec<Card> = generated
        .iter()
        .map(|(ns, name, host, json)| Card {
            ns: ns.clone(),
            identifier: format!("urn:air:{host}:{ns}:{name}"),
            json: json.clone(),
        })
        .collect();
    let entries: Vec<Arc<Entry>> = generated
        .iter()
        .map(|(ns, name, host, json)| {
            let placement = Placement {
                namespace: ns.clone(),
                name: name.clone(),
                host: host.clone(),
                url: format!("https://{host}/.well-known/agent-card.json"),
                ..Default::default()
            };
            Arc::new(Entry::build(placement, Bytes::from(json.to_string())).unwrap())
        })
        .collect();
    let catalog = Catalog::build(entries);
    let mut r = Rng(42);
    let namespaces: Vec<String> = (0..12).map(|i| format!("ns-{i}")).collect();
    let mut nonempty = 0;
    for round in 0..400 {
        let mut q = Query::default();
        for _ in 0..r.below(4) {
            let field = Field::ALL[r.below(Field::ALL.len())];
            let values: Vec<String> = (0..1 + r.below(3))
                .map(|_| random_value(&mut r, field, &cards))
                .collect();
            q.filters.insert(field, values);
        }
        if r.below(3) == 0 {
            // One word mostly, sometimes two or three; each whole or a two-letter prefix.
            let n = if r.below(4) == 0 { 2 + r.below(2) } else { 1 };
            let words: Vec<String> = (0..n)
                .map(|_| {
                    let w = WORDS[r.below(WORDS.len())];
                    if r.below(2) == 0 {
                        w[..2].to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect();
            q.text = Some(words.join(" "));
        }
        let visible: Option<HashSet<String>> = (r.below(3) == 0).then(|| {
            namespaces
                .iter()
                .filter(|_| r.below(2) == 0)
                .cloned()
                .collect()
        });
        let expected = reference(&cards, &q, visible.as_ref());
        if !expected.is_empty() {
            nonempty += 1;
        }
        // Page through every page with the cursor.
        let limit = 1 + r.below(60);
        let mut got = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = catalog.list(&q, visible.as_ref(), after.as_deref(), limit);
            assert_eq!(page.total, expected.len(), "round {round}: total of {q:?}");
            assert!(page.items.len() <= limit);
            got.extend(page.items.iter().map(|e| e.identifier.clone()));
            match page.next_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
        assert_eq!(got, expected, "round {round}: {q:?} visible {visible:?}");
        // Ranked search finds the same set, best first, scores within 1–100.
        let ranked = catalog.search(&q, visible.as_ref());
        let mut ids: Vec<String> = ranked
            .hits
            .iter()
            .map(|(e, _)| e.identifier.clone())
            .collect();
        assert!(ranked.hits.iter().all(|(_, s)| (1..=100).contains(s)));
        // Best first, ties in identifier order.
        let order: Vec<(u8, &str)> = ranked
            .hits
            .iter()
            .map(|(e, s)| (*s, e.identifier.as_str()))
            .collect();
        let mut sorted = order.clone();
        sorted.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        assert_eq!(order, sorted, "round {round}: the ranking's order of {q:?}");
        if let Some(text) = &q.text {
            let words = agentcard_operator::directory::entry::query_words(text);
            for (e, s) in &ranked.hits {
                assert_eq!(
                    *s,
                    e.score(&words),
                    "round {round}: the index scores as the entry does"
                );
            }
        }
        // A page of the ranking is that slice of it, the total all of it.
        let offset = r.below(ranked.hits.len() + 2);
        let page = catalog.search_page(&q, visible.as_ref(), offset, limit);
        assert_eq!(page.total, ranked.hits.len(), "round {round}: ranked total");
        let slice: Vec<(&str, u8)> = ranked
            .hits
            .iter()
            .skip(offset)
            .take(limit)
            .map(|(e, s)| (e.identifier.as_str(), *s))
            .collect();
        let got_page: Vec<(&str, u8)> = page
            .hits
            .iter()
            .map(|(e, s)| (e.identifier.as_str(), *s))
            .collect();
        assert_eq!(
            got_page, slice,
            "round {round}: page {offset}+{limit} of {q:?}"
        );
        // An offset past any ranking (a forged page token) is an empty page, the total kept.
        let past = catalog.search_page(&q, visible.as_ref(), usize::MAX, limit);
        assert!(past.hits.is_empty(), "round {round}: a page past the end");
        assert_eq!(past.total, ranked.hits.len());
        ids.sort();
        assert_eq!(ids, expected, "round {round}: search of {q:?}");
        // Facets count exactly the matching cards' values.
        let facets = catalog.facets(&q, visible.as_ref(), &[Field::Namespace, Field::Provider]);
        let mut by_ns: BTreeMap<String, usize> = BTreeMap::new();
        for id in &expected {
            let ns = id.split(':').nth(3).unwrap().to_string();
            *by_ns.entry(ns).or_default() += 1;
        }
        let got_ns: BTreeMap<String, usize> = facets[&Field::Namespace].iter().cloned().collect();
        assert_eq!(got_ns, by_ns, "round {round}: namespace facet of {q:?}");
        let providers: usize = facets[&Field::Provider].iter().map(|(_, c)| c).sum();
        assert_eq!(providers, expected.len(), "one provider per card");
    }
    assert!(
        nonempty > 150,
        "too few queries matched anything: {nonempty}"
    );
}
