//! The change feed's unit tests: the log, its persisted form, cursors and pages.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use super::cursor::{NOT_FOR_CALLER, SEALED_PREFIX};
use super::*;
use crate::contract::content_hash;
use crate::directory::entry::Entry;
use crate::directory::entry::Placement;
use bytes::Bytes;

fn entry(ns: &str, name: &str, text: &str) -> Arc<Entry> {
    let body = format!(r#"{{"name":"{name}","description":"{text}","skills":[]}}"#);
    let placement = Placement {
        namespace: ns.into(),
        name: name.into(),
        host: format!("{name}.example"),
        url: format!("https://{name}.example/.well-known/agent-card.json"),
        content_hash: content_hash(body.as_bytes()),
        key_id: "k".into(),
        updated_at: "2026-01-01T00:00:00Z".into(),
        ..Placement::default()
    };
    Arc::new(Entry::build(placement, Bytes::from(body)).unwrap())
}

fn lookup(entries: &[Arc<Entry>]) -> impl Fn(&str) -> Option<Arc<Entry>> + '_ {
    move |id| entries.iter().find(|e| e.identifier == id).cloned()
}

fn kinds(p: &Page) -> Vec<String> {
    p.items
        .iter()
        .map(|i| {
            let (_, name) = card_of(&i.identifier);
            format!("{}{name}", if i.upsert { "+" } else { "-" })
        })
        .collect()
}

#[test]
fn changes_are_logged_once_compacted_and_followed_from_a_cursor() {
    let (a, b, c) = (
        entry("t", "a", "1"),
        entry("t", "b", "1"),
        entry("t", "c", "1"),
    );
    let log = FeedLog::new("e1");
    let log = log.advance(&[b.clone(), a.clone()], 10, 100).unwrap();
    assert!(
        log.advance(&[a.clone(), b.clone()], 10, 101).is_none(),
        "nothing changed"
    );
    let first = page(&log, lookup(&[a.clone(), b.clone()]), None, 10, None, 100).unwrap();
    assert_eq!(kinds(&first), ["+a", "+b"]);
    assert_eq!(first.next, first.latest);
    // b edited, a deleted, c created.
    let b2 = entry("t", "b", "2");
    let now = [b2.clone(), c.clone()];
    let log = log.advance(&now, 10, 102).unwrap();
    let p = page(&log, lookup(&now), Some(&first.next), 10, None, 102).unwrap();
    assert_eq!(kinds(&p), ["+b", "+c", "-a"]);
    // Paging: one at a time ends at the same place, each change once.
    let mut cur = first.next.clone();
    let mut seen = Vec::new();
    loop {
        let p = page(&log, lookup(&now), Some(&cur), 1, None, 102).unwrap();
        if p.items.is_empty() {
            break;
        }
        seen.extend(kinds(&p));
        cur = p.next;
    }
    assert_eq!(seen, ["+b", "+c", "-a"]);
    assert_eq!(cur, p.latest);
    // From the start: the listed entries and the tombstone, each once.
    let all = page(&log, lookup(&now), None, 10, None, 102).unwrap();
    assert_eq!(kinds(&all), ["+b", "+c", "-a"]);
}

#[test]
fn old_cursors_other_epochs_and_garbage_are_refused() {
    let entries: Vec<Arc<Entry>> = (0..5).map(|i| entry("t", &format!("n{i}"), "x")).collect();
    let log = FeedLog::new("e1").advance(&entries, 2, 0).unwrap();
    let start = page(&log, lookup(&entries), None, 100, None, 0)
        .unwrap()
        .next;
    // Three deletes with room for two tombstones: the first is dropped, the horizon moves.
    let log = log.advance(&entries[3..], 2, 1).unwrap();
    assert_eq!(log.horizon, 6);
    assert_eq!(
        page(&log, lookup(&entries), Some(&start), 10, None, 1).unwrap_err(),
        FeedError::Expired
    );
    let other = Cursor {
        epoch: "e0".into(),
        ..start.clone()
    };
    assert_eq!(
        page(&log, lookup(&entries), Some(&other), 10, None, 1).unwrap_err(),
        FeedError::Expired
    );
    for bad in ["", "x", "MS5lMQ", "Mi5lMS4z"] {
        assert!(Cursor::parse(bad).is_err(), "{bad}");
    }
    let c = Cursor {
        epoch: "e1".into(),
        seq: 7,
        seen: Some([1, 0xffff_ffff].into()),
    };
    assert_eq!(Cursor::parse(&c.encode()).unwrap(), c);
}

fn sealed(caller: &str, key: &CursorKey) -> CursorCodec {
    CursorCodec::Sealed {
        key: key.clone(),
        caller: caller.into(),
    }
}

#[test]
fn sealed_cursors_open_only_for_their_caller_and_say_nothing_of_the_position() {
    let mut log = FeedLog::new("e1");
    log.cursor_key = Some(CursorKey::random().unwrap());
    let key = log.cursor_key.clone().unwrap();
    let alice = sealed("alice\u{0}u1", &key);
    let c = Cursor {
        epoch: "e1".into(),
        seq: 7,
        seen: Some([namespace_hash("evil")].into()),
    };
    let text = alice.encode(&c);
    assert_eq!(alice.decode(&text, &log).unwrap(), c);
    // Sealed with a fresh nonce each time; the length does not follow the position.
    let far = Cursor {
        seq: 123_456_789_012,
        ..c.clone()
    };
    assert_ne!(alice.encode(&c), text);
    assert_eq!(alice.encode(&far).len(), text.len());
    // Nothing in it reads as the position or a namespace.
    assert!(Cursor::parse(&text).is_err());
    // The old attack: a plain cursor naming another namespace's hash.
    let forged = Cursor {
        seen: Some([namespace_hash("team-a")].into()),
        ..c.clone()
    };
    let bad = CursorError::Invalid(NOT_FOR_CALLER);
    assert_eq!(alice.decode(&forged.encode(), &log), Err(bad.clone()));
    // Altered anywhere past the epoch, cut, or another caller's: refused alike.
    let body_at = SEALED_PREFIX.len() + "e1.".len();
    for i in body_at..text.len() {
        let mut b = text.clone().into_bytes();
        b[i] = if b[i] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(b).unwrap();
        assert!(alice.decode(&altered, &log).is_err(), "altered at {i}");
    }
    assert_eq!(
        alice.decode(&text[..text.len() - 4], &log),
        Err(bad.clone())
    );
    let bob = sealed("bob\u{0}u2", &key);
    assert_eq!(bob.decode(&text, &log), Err(bad.clone()));
    // Another log's key does not open it either; another epoch has expired.
    let other = sealed("alice\u{0}u1", &CursorKey::random().unwrap());
    assert_eq!(other.decode(&text, &log), Err(bad));
    let renamed = text.replacen("2.e1.", "2.e0.", 1);
    assert_eq!(alice.decode(&renamed, &log), Err(CursorError::Expired));
    // Public mode reads plain cursors, and takes a sealed one for the other mode's.
    assert_eq!(CursorCodec::Plain.decode(&c.encode(), &log).unwrap(), c);
    assert_eq!(
        CursorCodec::Plain.decode(&text, &log),
        Err(CursorError::Expired)
    );
    // The key persists with the log (every replica seals and opens alike).
    let back = FeedLog::decode(&log.encode(), 1 << 20).unwrap();
    assert_eq!(back.cursor_key, log.cursor_key);
    assert_eq!(format!("{key:?}"), "CursorKey(..)");
}

#[test]
fn the_persisted_form_reads_back_the_same_and_refuses_what_it_cannot_be() {
    let entries: Vec<Arc<Entry>> = (0..50).map(|i| entry("t", &format!("n{i}"), "x")).collect();
    let log = FeedLog::new("e1").advance(&entries, 100, 5).unwrap();
    let log = log.advance(&entries[10..], 100, 6).unwrap();
    let back = FeedLog::decode(&log.encode(), 1 << 20).unwrap();
    assert_eq!(back.epoch, "e1");
    assert_eq!(back.last_seq, log.last_seq);
    assert_eq!(back.by_seq, log.by_seq);
    assert_eq!(back.tombstones, 10);
    assert!(FeedLog::decode(b"not gzip", 1 << 20).is_err());
    // A size limit splits it into parts, read back only all together.
    let split = log.encode_parts(700).unwrap();
    assert!(!split.parts.is_empty(), "{} part", split.parts.len() + 1);
    assert!(split.parts.iter().all(|p| p.len() <= 700) && split.head.len() <= 700);
    let part = |i: usize| {
        split
            .parts
            .get(i - 1)
            .map(|b| bytes::Bytes::from(b.clone()))
    };
    let back = FeedLog::decode_parts(&split.head, part, 1 << 20).unwrap();
    assert_eq!(back.by_seq, log.by_seq);
    assert_eq!(back.parts, split.parts.len() + 1);
    // Another write's part, or one not read yet: not assembled.
    let missing = FeedLog::decode_parts(
        &split.head,
        |i| if i == 1 { None } else { part(i) },
        1 << 20,
    );
    assert!(missing
        .unwrap_err()
        .to_string()
        .contains("part 1 not read yet"));
    let edited = log.advance(&entries[20..], 100, 7).unwrap();
    let other = edited.encode_parts(700).unwrap();
    let mixed = FeedLog::decode_parts(
        &split.head,
        |i| {
            Some(bytes::Bytes::from(
                other
                    .parts
                    .get(i - 1)
                    .or(split.parts.get(i - 1))
                    .unwrap()
                    .clone(),
            ))
        },
        1 << 20,
    );
    assert!(mixed.is_err());
    // A log persisted in parts stays in at least as many.
    assert!(back.encode_parts(usize::MAX).unwrap().parts.len() >= split.parts.len());
}

#[test]
fn a_replica_without_the_logged_version_holds_the_page_until_it_catches_up() {
    let (a, b) = (entry("t", "a", "1"), entry("t", "b", "1"));
    let log = FeedLog::new("e")
        .advance(&[a.clone(), b.clone()], 10, 100)
        .unwrap();
    // This replica has not seen b yet.
    let only_a = [a.clone()];
    let at = |since: Option<&Cursor>, now| page(&log, lookup(&only_a), since, 10, None, now);
    let p = at(None, 100).unwrap();
    assert_eq!(kinds(&p), ["+a"]);
    let p2 = at(Some(&p.next), 101).unwrap();
    assert!(p2.items.is_empty());
    assert_eq!(p2.next, p.next);
    // Holding no entry for b, it waits longer than for another version of it, then moves
    // on with what it has (nothing for b).
    let soon = at(Some(&p.next), 115).unwrap();
    assert!(soon.items.is_empty());
    let late = at(Some(&p.next), 300).unwrap();
    assert_eq!(late.items.len(), 1);
    assert!(late.items[0].upsert && late.items[0].entry.is_none());
    assert_eq!(late.next, late.latest);
}

#[test]
fn a_page_ends_before_the_card_that_would_pass_its_bytes_and_carries_at_least_one() {
    let entries: Vec<Arc<Entry>> = (0..10)
        .map(|i| entry("t", &format!("n{i}"), &"x".repeat(1000)))
        .collect();
    let log = FeedLog::new("e").advance(&entries, 10, 0).unwrap();
    let each = entries[0].body.len();
    let bound = Bound {
        changes: 100,
        bytes: 3 * each + each / 2,
    };
    let p = page(&log, lookup(&entries), None, bound, None, 0).unwrap();
    assert_eq!(p.items.len(), 3);
    // Followed page by page, every change comes once.
    let mut cur = p.next.clone();
    let mut n = p.items.len();
    while cur != p.latest {
        let q = page(&log, lookup(&entries), Some(&cur), bound, None, 0).unwrap();
        assert!(!q.items.is_empty() && q.items.len() <= 3);
        n += q.items.len();
        cur = q.next;
    }
    assert_eq!(n, 10);
    let tiny = Bound {
        changes: 100,
        bytes: 1,
    };
    assert_eq!(
        page(&log, lookup(&entries), None, tiny, None, 0)
            .unwrap()
            .items
            .len(),
        1
    );
}

#[test]
fn a_caller_sees_only_its_namespaces_and_their_leaving_as_deletes() {
    let (a, b, x) = (
        entry("team", "a", "1"),
        entry("team", "b", "1"),
        entry("other", "x", "1"),
    );
    let all = [a.clone(), b.clone(), x.clone()];
    let log = FeedLog::new("e").advance(&all, 10, 0).unwrap();
    let team: HashSet<String> = ["team".to_string()].into();
    let first = page(&log, lookup(&all), None, 10, Some(&team), 0).unwrap();
    assert_eq!(kinds(&first), ["+a", "+b"]);
    // x changes: nothing for this caller, but its cursor moves past it.
    let x2 = entry("other", "x", "2");
    let all2 = [a.clone(), b.clone(), x2.clone()];
    let log = log.advance(&all2, 10, 1).unwrap();
    let p = page(&log, lookup(&all2), Some(&first.next), 10, Some(&team), 1).unwrap();
    assert!(p.items.is_empty());
    assert_eq!(p.next.seq, log.last_seq);
    // The caller may now read `other` and no longer `team`.
    let other: HashSet<String> = ["other".to_string()].into();
    let q = page(&log, lookup(&all2), Some(&p.next), 10, Some(&other), 1).unwrap();
    let mut got = kinds(&q);
    got.sort();
    assert_eq!(got, ["+x", "-a", "-b"]);
    let r = page(&log, lookup(&all2), Some(&q.next), 10, Some(&other), 1).unwrap();
    assert!(r.items.is_empty(), "nothing twice: {:?}", kinds(&r));
}

#[test]
fn a_view_change_comes_a_namespace_at_a_time_within_the_page_bound() {
    let mut all = Vec::new();
    for ns in ["n1", "n2", "n3"] {
        for name in ["a", "b", "c"] {
            all.push(entry(ns, &format!("{ns}{name}"), "1"));
        }
    }
    let log = FeedLog::new("e").advance(&all, 100, 0).unwrap();
    let none: HashSet<String> = HashSet::new();
    let start = page(&log, lookup(&all), None, 10, Some(&none), 0).unwrap();
    assert!(start.items.is_empty());
    // The caller may now read all three: 9 upserts, 4 a page at most (a namespace whole).
    let three: HashSet<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
    let mut cursor = start.next.clone();
    let mut got = Vec::new();
    let mut pages = 0;
    loop {
        let p = page(&log, lookup(&all), Some(&cursor), 4, Some(&three), 0).unwrap();
        if p.items.is_empty() {
            break;
        }
        assert!(p.items.len() <= 4, "{:?}", kinds(&p));
        let namespaces: BTreeSet<&str> = p.items.iter().map(|i| card_of(&i.identifier).0).collect();
        assert_eq!(
            p.items.len(),
            3 * namespaces.len(),
            "whole namespaces: {:?}",
            kinds(&p)
        );
        got.extend(kinds(&p));
        cursor = p.next;
        pages += 1;
        assert!(pages < 10);
    }
    got.sort();
    let mut want: Vec<String> = all
        .iter()
        .map(|e| format!("+{}", e.placement.name))
        .collect();
    want.sort();
    assert_eq!(got, want, "every card once");
    assert_eq!(pages, 3);
    // Bytes bound a page too: one namespace a page when two would pass it.
    let one_card = all[0].body.len();
    let bound = Bound {
        changes: 100,
        bytes: 4 * one_card,
    };
    let p = page(
        &log,
        lookup(&all),
        Some(&start.next),
        bound,
        Some(&three),
        0,
    )
    .unwrap();
    assert_eq!(p.items.len(), 3);
    // Losing them again: deletes, as bounded.
    let q = page(&log, lookup(&all), Some(&cursor), 4, Some(&none), 0).unwrap();
    assert_eq!(q.items.len(), 3);
    assert!(q.items.iter().all(|i| !i.upsert));
}
