//! The directory's query engine at 10,000 and 100,000 generated cards: index build time, memory
//! per card against the raw card bytes, and per-query latency (p50/p99 over many queries) for a
//! single filter, three filters, text search, and first and deep pages, each beside a plain
//! linear scan over the same entries in the same run.
//!
//! `cargo bench --bench directory` (`DIR_BENCH_SIZES=10000,100000`, `DIR_BENCH_QUERIES=2000`;
//! `DIR_BENCH_ONLY=text` runs only the queries whose label contains `text`, and
//! `DIR_BENCH_LINEAR=0` skips the linear scans, for profiling one query).
//! Memory is the live heap counted by a wrapping global allocator, not RSS (which freed memory
//! the allocator keeps would blur).

#[path = "../tests/support/dircards.rs"]
mod dircards;
#[path = "support/heap.rs"]
mod heap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcard_operator::directory::entry::{Entry, Field, Placement};
use agentcard_operator::directory::query::{Catalog, Query};
use bytes::Bytes;
use dircards::*;
use heap::live_bytes;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn measure(mut run: impl FnMut(usize) -> usize, queries: usize) -> (Duration, Duration, usize) {
    let mut times = Vec::with_capacity(queries);
    let mut found = 0;
    for i in 0..queries {
        let t = Instant::now();
        found += run(i);
        times.push(t.elapsed());
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99), found)
}

/// The plain baseline answering the same question as the engine: every entry checked against
/// the query (the total needs them all), ranked by score with text, then the page.
fn linear(entries: &[Arc<Entry>], q: &Query, skip: usize, limit: usize) -> usize {
    let words: Vec<String> = q
        .text
        .as_deref()
        .map(|t| agentcard_operator::directory::entry::words(t).collect())
        .unwrap_or_default();
    let mut hits: Vec<(&Arc<Entry>, u8)> = entries
        .iter()
        .filter(|e| {
            q.filters.iter().all(|(f, vals)| {
                vals.iter()
                    .any(|v| e.values(*f).iter().any(|x| x.eq_ignore_ascii_case(v)))
            })
        })
        .map(|e| {
            (
                e,
                if words.is_empty() {
                    100
                } else {
                    e.score(&words)
                },
            )
        })
        .filter(|(_, s)| *s > 0)
        .collect();
    let total = hits.len();
    if !words.is_empty() {
        hits.sort_by_key(|h| std::cmp::Reverse(h.1));
    }
    std::hint::black_box(total);
    hits.iter().skip(skip).take(limit).count()
}

/// How a scenario asks the engine: a listing page by cursor, a page of the ranking (what
/// `POST /search` asks), or the whole ranking.
enum Ask {
    List,
    Page,
    Ranking,
}

fn query(filters: &[(Field, &str)], text: Option<&str>) -> Query {
    Query {
        filters: filters
            .iter()
            .map(|(f, v)| (*f, vec![v.to_string()]))
            .collect(),
        text: text.map(str::to_string),
        ..Default::default()
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("DIR_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let queries: usize = std::env::var("DIR_BENCH_QUERIES")
        .ok()
        .and_then(|q| q.parse().ok())
        .unwrap_or(2000);
    for n in sizes {
        let generated = generate(n, 50, 11);
        let bodies: Vec<(Placement, Bytes)> = generated
            .iter()
            .map(|(ns, name, host, json)| {
                (
                    Placement {
                        namespace: ns.clone(),
                        name: name.clone(),
                        host: host.clone(),
                        url: format!("https://{host}/.well-known/agent-card.json"),
                        content_hash: "0123456789abcdef0123456789abcdef".into(),
                        key_id: "k1".into(),
                        updated_at: "2026-11-30T00:00:00Z".into(),
                        ..Placement::default()
                    },
                    Bytes::from(json.to_string()),
                )
            })
            .collect();
        drop(generated);
        let raw: usize = bodies.iter().map(|(_, b)| b.len()).sum();
        // Live heap now: the card bytes (kept, shared by the entries) and little else.
        let before = live_bytes();
        let t = Instant::now();
        let entries: Vec<Arc<Entry>> = bodies
            .into_iter()
            .filter_map(|(p, b)| Entry::build(p, b).map(Arc::new))
            .collect();
        let built_entries = t.elapsed();
        let entries_each = live_bytes().saturating_sub(before) as f64 / n as f64;
        let t = Instant::now();
        let catalog = Catalog::build(entries.clone());
        let built_index = t.elapsed();
        let overhead = live_bytes().saturating_sub(before) as f64 / n as f64;
        let raw_each = raw as f64 / n as f64;
        println!(
            "== {n} cards ({:.1} MiB of signed card bytes, {raw_each:.0} B each)",
            raw as f64 / 1048576.0
        );
        println!(
            "build: entries {:.0} ms, index {:.0} ms; heap per card: {raw_each:.0} B card + {overhead:.0} B entry and index = {:.2}x the raw card bytes",
            built_entries.as_secs_f64() * 1e3,
            built_index.as_secs_f64() * 1e3,
            (raw_each + overhead) / raw_each
        );
        println!(
            "  of which entries {entries_each:.0} B (struct {} B), index {:.0} B",
            std::mem::size_of::<Entry>(),
            overhead - entries_each
        );
        let entries = catalog.entries().to_vec();
        let deep = n / 2;
        let mut rng = Rng(5);
        let tags: Vec<&str> = (0..queries).map(|_| rng.pick(TAGS)).collect();
        let skills: Vec<&str> = (0..queries).map(|_| rng.pick(SKILLS)).collect();
        let providers: Vec<&str> = (0..queries).map(|_| rng.pick(PROVIDERS)).collect();
        let bindings: Vec<&str> = (0..queries).map(|_| rng.pick(BINDINGS)).collect();
        let words_: Vec<&str> = (0..queries).map(|_| rng.pick(WORDS)).collect();
        type Scenario<'a> = (&'a str, Box<dyn Fn(usize) -> Query + 'a>, usize, Ask);
        let scenarios: Vec<Scenario> = vec![
            (
                "single filter (tag), first page",
                Box::new(|i| query(&[(Field::Tag, tags[i])], None)),
                0,
                Ask::List,
            ),
            (
                "three filters (skill, provider, binding), first page",
                Box::new(|i| {
                    query(
                        &[
                            (Field::Skill, skills[i]),
                            (Field::Provider, providers[i]),
                            (Field::Binding, bindings[i]),
                        ],
                        None,
                    )
                }),
                0,
                Ask::List,
            ),
            (
                "text search, first page",
                Box::new(|i| query(&[], Some(words_[i]))),
                0,
                Ask::Page,
            ),
            (
                "text search, whole ranking (Catalog::search)",
                Box::new(|i| query(&[], Some(words_[i]))),
                0,
                Ask::Ranking,
            ),
            (
                "no filter, deep page (offset n/2)",
                Box::new(|_| Query::default()),
                deep,
                Ask::List,
            ),
            (
                "single filter (tag), deep page",
                Box::new(|i| query(&[(Field::Tag, tags[i])], None)),
                deep / 20,
                Ask::List,
            ),
        ];
        println!(
            "{:<55} {:>12} {:>12} {:>12} {:>12}",
            "query (limit 20)", "engine p50", "engine p99", "linear p50", "linear p99"
        );
        let only = std::env::var("DIR_BENCH_ONLY").unwrap_or_default();
        let linear_runs = match std::env::var("DIR_BENCH_LINEAR").as_deref() {
            Ok("0") => 0,
            _ => queries.min(300),
        };
        for (label, make, skip, ask) in scenarios.iter().filter(|s| s.0.contains(only.as_str())) {
            let qs: Vec<Query> = (0..queries).map(make).collect();
            // Deep pages go by cursor: the identifier of the entry before the page.
            let cursor = |q: &Query| -> Option<String> {
                (*skip > 0).then(|| {
                    let p = catalog.list(q, None, None, *skip);
                    p.items.last().map(|e| e.identifier.clone())
                })?
            };
            let cursors: Vec<Option<String>> = qs.iter().map(cursor).collect();
            let (e50, e99, found_e) = measure(
                |i| match ask {
                    Ask::List => catalog
                        .list(&qs[i], None, cursors[i].as_deref(), 20)
                        .items
                        .len(),
                    Ask::Page => catalog.search_page(&qs[i], None, 0, 20).hits.len(),
                    Ask::Ranking => catalog.search(&qs[i], None).hits.len().min(20),
                },
                queries,
            );
            let us = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);
            // Skipped linear scans print as "-", never as a time.
            let (l50, l99) = if linear_runs > 0 {
                let (l50, l99, _) = measure(|i| linear(&entries, &qs[i], *skip, 20), linear_runs);
                (us(l50), us(l99))
            } else {
                ("-".to_owned(), "-".to_owned())
            };
            let _ = found_e;
            println!(
                "{label:<55} {:>12} {:>12} {:>12} {:>12}",
                us(e50),
                us(e99),
                l50,
                l99
            );
        }
    }
}
