//! Text search, our index against tantivy's (in RAM), on the same generated cards and the same
//! queries, with the same scores: the evaluation that chose our own index.
//!
//! `cargo bench --features tantivy-eval --bench text_engines` (`DIR_BENCH_SIZES=100000`,
//! `DIR_BENCH_QUERIES=2000`). The feature only exists for this comparison: the operator does
//! not link tantivy.
//!
//! Both engines index the same tokens, [`Entry::tokens`] (lower-cased words, each with its
//! field weight: name 5, skill names and tags 3, description 2, the rest 1), and score as
//! [`Entry::score`] does: a query word scores the best weight among the card words it equals
//! (twice the weight) or starts (the weight), summed over the words. In tantivy that is, per
//! weight, one field of whole words and one of their proper prefixes (tantivy has no prefix
//! match on a word inside a field), each word a disjunction-max of constant-score term queries
//! over those fields, the words a union; documents are added in the catalog's identifier order
//! into one segment, so ties break the same way. Each query's first page (20) and match count
//! are compared between the two: the run says how many agree.
//!
//! Reported for each: build time, live heap of the index (a counting allocator; tantivy's
//! in-RAM directory included), and first-page latency p50/p99 over single-word queries, as in
//! `benches/directory.rs`.

#[path = "../tests/support/dircards.rs"]
mod dircards;
#[path = "support/heap.rs"]
mod heap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcard_operator::directory::entry::{Entry, Placement};
use agentcard_operator::directory::query::{Catalog, Query};
use bytes::Bytes;
use dircards::*;
use heap::live_bytes;
use tantivy::collector::{Count, TopDocs};
use tantivy::query::{BooleanQuery, ConstScoreQuery, DisjunctionMaxQuery, QueryClone, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Schema, STRING};
use tantivy::{Index, IndexReader, Searcher, TantivyDocument, Term};

/// The field weights [`Entry::tokens`] gives.
const WEIGHTS: [u8; 4] = [1, 2, 3, 5];

/// The tantivy side: an index with, per weight, a field of words and one of their prefixes.
struct Tantivy {
    /// `(weight, words field, prefixes field)`.
    fields: Vec<(u8, Field, Field)>,
    reader: IndexReader,
}

impl Tantivy {
    fn build(entries: &[Arc<Entry>]) -> tantivy::Result<Tantivy> {
        let mut schema = Schema::builder();
        let fields: Vec<(u8, Field, Field)> = WEIGHTS
            .iter()
            .map(|&w| {
                let words = schema.add_text_field(&format!("words{w}"), STRING);
                let prefixes = schema.add_text_field(&format!("prefixes{w}"), STRING);
                (w, words, prefixes)
            })
            .collect();
        let index = Index::create_in_ram(schema.build());
        // A budget large enough for one segment: document ids are the insertion order.
        let mut writer = index.writer_with_num_threads(1, 1 << 30)?;
        for e in entries {
            let mut doc = TantivyDocument::default();
            for (token, weight) in e.tokens() {
                let Some(&(_, words, prefixes)) = fields.iter().find(|f| f.0 == weight) else {
                    continue;
                };
                doc.add_text(words, &token);
                for (end, _) in token.char_indices().skip(1) {
                    doc.add_text(prefixes, &token[..end]);
                }
            }
            writer.add_document(doc)?;
        }
        writer.commit()?;
        drop(writer);
        let reader = index.reader()?;
        Ok(Tantivy { fields, reader })
    }

    /// The first `limit` positions (best first) and the number of matches for `words`.
    fn page(&self, searcher: &Searcher, words: &[String], limit: usize) -> (Vec<u32>, usize) {
        let per_word: Vec<Box<dyn tantivy::query::Query>> = words
            .iter()
            .map(|q| {
                let alternatives: Vec<Box<dyn tantivy::query::Query>> = self
                    .fields
                    .iter()
                    .flat_map(|&(w, words, prefixes)| {
                        [(words, 2.0 * f32::from(w)), (prefixes, f32::from(w))]
                    })
                    .map(|(field, score)| {
                        let term = TermQuery::new(
                            Term::from_field_text(field, q),
                            IndexRecordOption::Basic,
                        );
                        ConstScoreQuery::new(term.box_clone(), score).box_clone()
                    })
                    .collect();
                DisjunctionMaxQuery::new(alternatives).box_clone()
            })
            .collect();
        let query = BooleanQuery::union(per_word);
        match searcher.search(
            &query,
            &(TopDocs::with_limit(limit).order_by_score(), Count),
        ) {
            Ok((top, count)) => (top.into_iter().map(|(_, a)| a.doc_id).collect(), count),
            Err(e) => panic!("tantivy search: {e}"),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// p50 and p99 of `run` over `queries` calls.
fn measure(mut run: impl FnMut(usize), queries: usize) -> (Duration, Duration) {
    let mut times: Vec<Duration> = (0..queries)
        .map(|i| {
            let t = Instant::now();
            run(i);
            t.elapsed()
        })
        .collect();
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let sizes: Vec<usize> = std::env::var("DIR_BENCH_SIZES")
        .unwrap_or_else(|_| "100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let queries: usize = std::env::var("DIR_BENCH_QUERIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    for n in sizes {
        let entries: Vec<Arc<Entry>> = generate(n, 50, 11)
            .into_iter()
            .filter_map(|(ns, name, host, json)| {
                let placement = Placement {
                    url: format!("https://{host}/.well-known/agent-card.json"),
                    namespace: ns,
                    name,
                    host,
                    ..Placement::default()
                };
                Entry::build(placement, Bytes::from(json.to_string())).map(Arc::new)
            })
            .collect();
        let before = live_bytes();
        let t = Instant::now();
        let catalog = Catalog::build(entries);
        let ours_built = t.elapsed();
        let ours_heap = live_bytes().saturating_sub(before);
        let entries = catalog.entries().to_vec();

        let before = live_bytes();
        let t = Instant::now();
        let tantivy = match Tantivy::build(&entries) {
            Ok(t) => t,
            Err(e) => panic!("tantivy index: {e}"),
        };
        let tantivy_built = t.elapsed();
        let searcher = tantivy.reader.searcher();
        let tantivy_heap = live_bytes().saturating_sub(before);
        let segments = searcher.segment_readers().len();

        let mut rng = Rng(5);
        let words: Vec<String> = (0..queries).map(|_| rng.pick(WORDS).to_string()).collect();
        let ask = |w: &String| Query {
            text: Some(w.clone()),
            ..Default::default()
        };
        let asked: Vec<Query> = words.iter().map(ask).collect();
        let mut agree = 0;
        for (i, w) in words.iter().enumerate() {
            let page = catalog.search_page(&asked[i], None, 0, 20);
            let ours: Vec<&str> = page
                .hits
                .iter()
                .map(|(e, _)| e.identifier.as_str())
                .collect();
            let (top, count) = tantivy.page(&searcher, std::slice::from_ref(w), 20);
            let theirs: Vec<&str> = top
                .iter()
                .map(|&d| entries[d as usize].identifier.as_str())
                .collect();
            agree += usize::from(ours == theirs && page.total == count);
        }
        let (o50, o99) = measure(
            |i| {
                std::hint::black_box(catalog.search_page(&asked[i], None, 0, 20));
            },
            queries,
        );
        let (t50, t99) = measure(
            |i| {
                std::hint::black_box(tantivy.page(&searcher, std::slice::from_ref(&words[i]), 20));
            },
            queries,
        );
        let mib = |b: usize| b as f64 / 1048576.0;
        println!("== {n} cards, {queries} single-word text queries, first page of 20");
        println!(
            "{:<10} {:>10} {:>14} {:>12} {:>12}",
            "engine", "build", "index heap", "p50", "p99"
        );
        println!(
            "{:<10} {:>7.0} ms {:>10.1} MiB {:>12} {:>12}   (the whole catalog index: filters and text)",
            "ours",
            ours_built.as_secs_f64() * 1e3,
            mib(ours_heap),
            us(o50),
            us(o99)
        );
        println!(
            "{:<10} {:>7.0} ms {:>10.1} MiB {:>12} {:>12}   (text only; {segments} segment(s))",
            "tantivy",
            tantivy_built.as_secs_f64() * 1e3,
            mib(tantivy_heap),
            us(t50),
            us(t99)
        );
        println!("same first page and match count: {agree} of {queries} queries");
    }
}
