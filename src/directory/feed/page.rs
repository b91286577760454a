//! Pages: what a client reading from a cursor is answered, within its page bounds, for the
//! namespaces it may read.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use super::*;
use crate::directory::entry::Entry;

/// What a page could not be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedError {
    /// The cursor is older than what the log keeps (or of another log): re-list.
    Expired,
}

/// One change as a client receives it.
#[derive(Clone, Debug)]
pub struct Item {
    /// Position in the log (for a change of the caller's view: its cursor's position).
    pub seq: u64,
    /// The identifier.
    pub identifier: Arc<str>,
    /// An upsert (else a delete).
    pub upsert: bool,
    /// The entry as served here, for an upsert (`None` when this replica cannot read it).
    pub entry: Option<Arc<Entry>>,
    /// When it was logged (Unix seconds).
    pub at: u64,
}

/// One page of changes.
#[derive(Clone, Debug)]
pub struct Page {
    /// The changes, oldest first.
    pub items: Vec<Item>,
    /// Where the client is after this page.
    pub next: Cursor,
    /// The newest position of the log.
    pub latest: Cursor,
}

/// How much one page may carry: changes, and bytes of the cards its upserts carry (a page
/// ends before the change that would pass either, but carries at least one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Most changes.
    pub changes: usize,
    /// Most bytes of cards.
    pub bytes: usize,
}

/// A bound on the count alone.
impl From<usize> for Bound {
    fn from(changes: usize) -> Bound {
        Bound {
            changes,
            bytes: usize::MAX,
        }
    }
}

/// The changes after `since` (from the start when `None`), within `limit` (a change of the
/// caller's view adds its items on top), with each upsert's entry as `lookup` finds
/// it. `visible` is the caller's namespaces in Kubernetes mode (`None`: public). An upsert
/// whose version `lookup` does not hold yet ends the page there, unless it was logged more
/// than [`CATCH_UP_SECONDS`] before `now`.
pub fn page(
    log: &FeedLog,
    lookup: impl Fn(&str) -> Option<Arc<Entry>>,
    since: Option<&Cursor>,
    limit: impl Into<Bound>,
    visible: Option<&HashSet<String>>,
    now: u64,
) -> Result<Page, FeedError> {
    let limit: Bound = limit.into();
    let start = match since {
        Some(c) if c.epoch != log.epoch || c.seq < log.horizon || c.seq > log.last_seq => {
            return Err(FeedError::Expired)
        }
        Some(c) => c.seq,
        None => 0,
    };
    let seen_now = visible.map(|v| {
        v.iter()
            .map(|ns| namespace_hash(ns))
            .collect::<BTreeSet<u32>>()
    });
    let seen_before = since.and_then(|c| c.seen.clone()).unwrap_or_default();
    let mut items = Vec::new();
    let resolve = |c: &Change| -> Option<Option<Arc<Entry>>> {
        let found = lookup(&c.identifier);
        let fresh = found
            .as_ref()
            .is_some_and(|e| Some(version_of(e)) == c.version);
        // Another version here moves on after a while with what this replica serves; none
        // at all waits longer (it is most likely deleted, and the log will say so soon).
        let wait = if found.is_some() {
            CATCH_UP_SECONDS
        } else {
            CATCH_UP_ABSENT_SECONDS
        };
        if fresh || now.saturating_sub(c.at) > wait {
            Some(found)
        } else {
            None
        }
    };
    // The caller's view changed: deletes for what it could read and no longer may, upserts
    // for what it may now read and had not been sent. (Unchanged, the usual case, costs no
    // pass over the log.) A namespace's items come whole, within the page's bound (at least
    // one namespace): the next cursor names the namespaces done, and a view change that does
    // not fit goes on at the next page, before anything newer.
    let mut seen_next = seen_now.clone();
    let mut count = 0;
    let mut bytes = 0usize;
    let view_changed = seen_now.as_ref().is_some_and(|now| *now != seen_before);
    if let (Some(v), Some(now_seen), Some(_), true) = (visible, &seen_now, since, view_changed) {
        // Per namespace hash, its items (`None`: a card not readable here yet, so it waits).
        let mut groups: BTreeMap<u32, Option<Vec<Item>>> = BTreeMap::new();
        for c in log.by_seq.values() {
            let ns = c.card().0;
            let hash = namespace_hash(ns);
            let was = seen_before.contains(&hash);
            let is = v.contains(ns);
            let item = |upsert, entry| Item {
                seq: start,
                identifier: c.identifier.clone(),
                upsert,
                entry,
                at: c.at,
            };
            let item = if was && !is && (c.seq <= start || c.version.is_none()) {
                item(false, None)
            } else if !was && is && c.seq <= start && c.version.is_some() {
                let Some(entry) = resolve(c) else {
                    groups.insert(hash, None);
                    continue;
                };
                item(true, entry)
            } else {
                continue;
            };
            if let Some(group) = groups.entry(hash).or_insert_with(|| Some(Vec::new())) {
                group.push(item);
            }
        }
        // Done: the namespaces' hashes as they were, changed one namespace at a time.
        let mut done = seen_before.clone();
        let changed: BTreeSet<u32> = seen_before
            .symmetric_difference(now_seen)
            .copied()
            .collect();
        let mut complete = true;
        for hash in changed {
            let Some(group) = groups.remove(&hash).unwrap_or(Some(Vec::new())) else {
                complete = false;
                break;
            };
            let group_bytes: usize = group
                .iter()
                .map(|i| i.entry.as_ref().map_or(0, |e| e.body.len()))
                .sum();
            let fits = count + group.len() <= limit.changes
                && bytes.saturating_add(group_bytes) <= limit.bytes;
            if !fits && !items.is_empty() {
                complete = false;
                break;
            }
            count += group.len();
            bytes = bytes.saturating_add(group_bytes);
            items.extend(group);
            if !done.remove(&hash) {
                done.insert(hash);
            }
        }
        if !complete {
            return Ok(Page {
                items,
                next: cursor(log, start, Some(done)),
                latest: cursor(log, log.last_seq, seen_now),
            });
        }
        seen_next = Some(done);
    }
    let mut at = start;
    for c in log.after(start) {
        if count >= limit.changes {
            break;
        }
        let ns = c.card().0;
        if visible.is_some_and(|v| !v.contains(ns)) {
            at = c.seq;
            continue;
        }
        let entry = match &c.version {
            None => None,
            Some(_) => match resolve(c) {
                Some(e) => e,
                None => break,
            },
        };
        bytes = bytes.saturating_add(entry.as_ref().map_or(0, |e| e.body.len()));
        if count > 0 && bytes > limit.bytes {
            break;
        }
        items.push(Item {
            seq: c.seq,
            identifier: c.identifier.clone(),
            upsert: c.version.is_some(),
            entry,
            at: c.at,
        });
        at = c.seq;
        count += 1;
    }
    Ok(Page {
        items,
        next: cursor(log, at, seen_next),
        latest: cursor(log, log.last_seq, seen_now),
    })
}

pub(super) fn cursor(log: &FeedLog, seq: u64, seen: Option<BTreeSet<u32>>) -> Cursor {
    Cursor {
        epoch: log.epoch.clone(),
        seq,
        seen,
    }
}

/// The namespaces a caller's visibility must be asked about for a page after `since`: those
/// with listed entries and those of later tombstones.
pub fn namespaces(log: &FeedLog, since: u64) -> BTreeSet<String> {
    let mut out = log.listed_namespaces().clone();
    out.extend(
        log.after(since)
            .filter(|c| c.version.is_none())
            .map(|c| c.card().0.to_string()),
    );
    out
}
