//! The directory change feed at 100,000 generated cards (`FEED_BENCH_CARDS`): recording them
//! in a log (the lease holder's work on a bulk publish), the persisted size and parts, a round with
//! nothing changed and one with one edit (its steady cost), and a client following every
//! change from the start in pages of 1,000, rendered as the JSON answer (changes/s, bytes per
//! change). Engine and view only, no HTTP.
//!
//! `cargo bench --bench feed`

#[path = "../tests/support/dircards.rs"]
mod dircards;

use std::sync::Arc;
use std::time::Instant;

use agentcard_operator::contract::content_hash;
use agentcard_operator::directory::entry::{Entry, Placement};
use agentcard_operator::directory::feed::changes::page_json;
use agentcard_operator::directory::feed::{page, CursorCodec, FeedLog, PART_BYTES};
use agentcard_operator::directory::query::Catalog;
use bytes::Bytes;

fn entry(ns: &str, name: &str, host: &str, body: String) -> Arc<Entry> {
    let placement = Placement {
        namespace: ns.to_string(),
        name: name.to_string(),
        host: host.to_string(),
        url: format!("https://{host}/.well-known/agent-card.json"),
        content_hash: content_hash(body.as_bytes()),
        key_id: "k1".into(),
        updated_at: "2026-12-01T00:00:00Z".into(),
        ..Placement::default()
    };
    Arc::new(Entry::build(placement, Bytes::from(body)).expect("a card"))
}

fn main() {
    let n: usize = std::env::var("FEED_BENCH_CARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let entries: Vec<Arc<Entry>> = dircards::generate(n, 50, 11)
        .into_iter()
        .map(|(ns, name, host, json)| entry(&ns, &name, &host, json.to_string()))
        .collect();
    let raw: usize = entries.iter().map(|e| e.body.len()).sum();
    let catalog = Catalog::build(entries);
    // What the writer is given: the catalog's entries, in identifier order.
    let entries = catalog.entries().to_vec();

    let t = Instant::now();
    let log = FeedLog::new("bench")
        .advance(&entries, 100_000, 1)
        .expect("changes");
    let recorded = t.elapsed();
    let t = Instant::now();
    let persisted = log.encode_parts(PART_BYTES).expect("fits");
    let encoded = t.elapsed();
    let bytes: usize = persisted.head.len() + persisted.parts.iter().map(Vec::len).sum::<usize>();
    println!(
        "record {n} upserts: {:.0} ms; persisted log {bytes} bytes gzip'd in {} ConfigMaps of at most {PART_BYTES} bytes ({:.1} bytes per entry, encoded in {:.0} ms)",
        recorded.as_secs_f64() * 1e3,
        persisted.parts.len() + 1,
        bytes as f64 / n as f64,
        encoded.as_secs_f64() * 1e3
    );
    let t = Instant::now();
    assert!(log.advance(&entries, 100_000, 2).is_none());
    let idle = t.elapsed();
    let mut edited = entries.clone();
    // (the edited entry keeps its identifier, so the order holds)
    let e = &entries[n / 2];
    edited[n / 2] = entry(
        &e.placement.namespace,
        &e.placement.name,
        &e.placement.host,
        format!("{{\"name\":\"edited\",\"description\":\"{}\"}}", n),
    );
    let t = Instant::now();
    let one = log.advance(&edited, 100_000, 3).expect("one change");
    let one_edit = t.elapsed();
    println!(
        "a round with nothing changed: {:.1} ms; with one edit: {:.1} ms (then {} entries, last seq {})",
        idle.as_secs_f64() * 1e3,
        one_edit.as_secs_f64() * 1e3,
        one.len(),
        one.last_seq
    );

    let t = Instant::now();
    let (mut changes, mut bytes, mut since) = (0usize, 0usize, None);
    loop {
        let p = page(
            &log,
            |id| catalog.get(id, None),
            since.as_ref(),
            1000,
            None,
            1,
        )
        .expect("a page");
        if p.items.is_empty() {
            break;
        }
        changes += p.items.len();
        bytes += serde_json::to_vec(&page_json(
            &p,
            "urn:air:bench:agentcard-operator:bench",
            &CursorCodec::Plain,
        ))
        .expect("json")
        .len();
        since = Some(p.next);
    }
    let took = t.elapsed();
    assert_eq!(changes, n);
    println!(
        "follow {changes} changes from the start in pages of 1,000: {:.0} ms, {:.0} changes/s, {:.0} bytes per change (cards average {:.0} bytes)",
        took.as_secs_f64() * 1e3,
        changes as f64 / took.as_secs_f64(),
        bytes as f64 / changes as f64,
        raw as f64 / n as f64
    );
}
