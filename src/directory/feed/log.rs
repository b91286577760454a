//! The log: each listed identifier's latest change, tombstones up to the retention, and
//! its persisted form (gzip'd JSON parts under a head, [`FeedLog::encode`] / `decode`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::*;
use crate::contract::content_hash;
use crate::directory::entry::Entry;

/// Most bytes of one persisted part of a log, compressed, by default (a ConfigMap holds at
/// most 1 MiB).
pub const PART_BYTES: usize = 900 * 1024;

/// How long a replica waits for its own catalog to hold an upsert's version before it moves
/// on with what it holds (a card whose bytes it cannot read would stall its feed otherwise).
pub const CATCH_UP_SECONDS: u64 = 10;

/// How long a replica that holds no entry at all for a logged upsert waits before it moves on
/// (the upsert then carries no card).
pub const CATCH_UP_ABSENT_SECONDS: u64 = 120;

/// One logged change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Position in the log.
    pub seq: u64,
    /// The entry's identifier (`urn:air:<host>:<namespace>:<name>`).
    pub identifier: Arc<str>,
    /// The entry's version ([`version_of`]) for an upsert; `None` for a delete.
    pub version: Option<u64>,
    /// When it was logged (Unix seconds).
    pub at: u64,
}

impl Change {
    /// The AgentCard's namespace and name, from the identifier.
    pub fn card(&self) -> (&str, &str) {
        card_of(&self.identifier)
    }
}

/// `(namespace, name)` of `urn:air:<host>:<namespace>:<name>` (namespaces and names hold no
/// `:`, hosts may).
pub fn card_of(identifier: &str) -> (&str, &str) {
    let mut parts = identifier.rsplitn(3, ':');
    let name = parts.next().unwrap_or_default();
    let namespace = parts.next().unwrap_or_default();
    (namespace, name)
}

/// What identifies a listed entry's state: its bytes (their content hash), URL and publication
/// time, as a 64-bit FNV-1a hash — cheap (it is taken for every listed entry on each round of
/// the writer and for each upsert served) and the same in every build.
pub fn version_of(entry: &Entry) -> u64 {
    let p = &entry.placement;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    // Reachability and lifecycle count once known (a card with neither keeps the version it
    // had before they existed).
    let states: &[&str] = match (p.reachable, &p.lifecycle) {
        (None, None) => &[],
        _ => &[p.reachable_str(), p.lifecycle_str()],
    };
    let parts = [p.content_hash.as_str(), &p.url, &p.updated_at];
    for part in parts.iter().chain(states) {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A directory's change log (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct FeedLog {
    /// Names this log: cursors of another log are expired here.
    pub epoch: String,
    /// Cursors below this have expired (changes after them were dropped).
    pub horizon: u64,
    /// The last sequence number given out.
    pub last_seq: u64,
    /// The ConfigMap's `resourceVersion` this log was read from (the precondition of the
    /// next write); `None` for a log not yet persisted.
    pub resource_version: Option<String>,
    /// Parts the log was last persisted in (a write keeps at least as many).
    pub parts: usize,
    /// The key cursors of this log are sealed with in Kubernetes access mode (`None` for a
    /// log persisted before cursors were sealed, until the writer gives it one).
    pub cursor_key: Option<CursorKey>,
    pub(super) by_seq: BTreeMap<u64, Change>,
    by_id: HashMap<Arc<str>, u64>,
    pub(super) tombstones: usize,
    /// The namespaces of the listed entries, worked out once per log (every stream's wake in
    /// Kubernetes mode asks for them).
    listed_namespaces: std::sync::OnceLock<BTreeSet<String>>,
}

/// One persisted change: `[identifier, seq, version (16 hex digits) or null, at]`.
type Row = (String, u64, Option<String>, u64);

/// The persisted head: the log's position and part 0's changes, and the content hash of each
/// further part (its ConfigMap), so a reader assembles only parts of the same write.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    epoch: String,
    horizon: u64,
    last_seq: u64,
    #[serde(default)]
    parts: Vec<String>,
    /// The cursor key, base64 (absent in logs written before cursors were sealed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cursor_key: Option<String>,
    changes: Vec<Row>,
}

/// A further part: the changes of the identifiers it holds.
#[derive(Serialize, Deserialize)]
struct Part {
    epoch: String,
    changes: Vec<Row>,
}

/// A log as written: the head, and parts 1.. (each within the size asked).
#[derive(Debug)]
pub struct Encoded {
    /// The head (part 0).
    pub head: Vec<u8>,
    /// Parts 1.., in order.
    pub parts: Vec<Vec<u8>>,
}

/// Which part of `n` holds `identifier`.
fn part_of(identifier: &str, n: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in identifier.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // FNV's low bits mix poorly: fold the high half in.
    let h = h ^ (h >> 29) ^ (h >> 47);
    usize::try_from(h % n.max(1) as u64).unwrap_or(0)
}

fn gzip(v: &impl Serialize) -> Vec<u8> {
    let json = serde_json::to_vec(v).unwrap_or_default();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&json);
    gz.finish().unwrap_or_default()
}

/// Why a persisted log could not be read (yet): a reader waits for the rest of a write, or
/// for a log that is readable.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Not gzip.
    #[error("not gzip: {0}")]
    NotGzip(#[source] std::io::Error),
    /// Not a log's JSON.
    #[error("not a feed log: {0}")]
    NotLog(#[source] serde_json::Error),
    /// The head's cursor key is malformed.
    #[error("the cursor key is malformed")]
    CursorKey,
    /// A part the head names is not here yet (of a write still arriving).
    #[error("part {0} not read yet")]
    PartMissing(usize),
    /// A part is not the one the head names (of another write).
    #[error("part {0} is not the one the head names")]
    PartMismatch(usize),
    /// A part of another log.
    #[error("part {0} is of another log")]
    OtherLog(usize),
    /// A change outside the log's range.
    #[error("change {seq} outside ({horizon}, {last}]")]
    OutOfRange {
        /// Its sequence number.
        seq: u64,
        /// The log's horizon.
        horizon: u64,
        /// The log's last sequence number.
        last: u64,
    },
    /// An identifier logged twice.
    #[error("{0} logged twice")]
    Twice(String),
    /// A version that is not hex.
    #[error("{id}: version {version:?} is not hex")]
    Version {
        /// The identifier.
        id: String,
        /// Its version as written.
        version: String,
    },
    /// A sequence number used twice.
    #[error("sequence number {0} used twice")]
    SeqTwice(u64),
}

fn gunzip<T: serde::de::DeserializeOwned>(bytes: &[u8], max_json: u64) -> Result<T, LogError> {
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(max_json)
        .read_to_end(&mut json)
        .map_err(LogError::NotGzip)?;
    serde_json::from_slice(&json).map_err(LogError::NotLog)
}

/// A part's name in the head: 16 hex digits of its content hash (the head lists every part).
fn part_hash(bytes: &[u8]) -> String {
    let d = content_hash(bytes);
    d[d.len().saturating_sub(16)..].to_string()
}

/// Most parts a log is split into.
pub const MAX_PARTS: usize = 256;

impl FeedLog {
    /// An empty log named `epoch`.
    pub fn new(epoch: impl Into<String>) -> FeedLog {
        FeedLog {
            epoch: epoch.into(),
            ..FeedLog::default()
        }
    }

    /// Number of identifiers logged (listed and tombstones).
    pub fn len(&self) -> usize {
        self.by_seq.len()
    }

    /// Whether nothing is logged.
    pub fn is_empty(&self) -> bool {
        self.by_seq.is_empty()
    }

    /// The changes after `seq`, oldest first.
    pub fn after(&self, seq: u64) -> impl Iterator<Item = &Change> {
        self.by_seq.range(seq.saturating_add(1)..).map(|(_, c)| c)
    }

    /// The listed identifiers' latest upserts, oldest first.
    pub fn listed(&self) -> impl Iterator<Item = &Change> {
        self.by_seq.values().filter(|c| c.version.is_some())
    }

    /// The namespaces of the listed entries.
    pub fn listed_namespaces(&self) -> &BTreeSet<String> {
        self.listed_namespaces
            .get_or_init(|| self.listed().map(|c| c.card().0.to_string()).collect())
    }

    fn push(&mut self, identifier: Arc<str>, version: Option<u64>, at: u64) {
        self.listed_namespaces = Default::default();
        self.last_seq += 1;
        if let Some(old) = self.by_id.insert(identifier.clone(), self.last_seq) {
            if let Some(c) = self.by_seq.remove(&old) {
                if c.version.is_none() {
                    self.tombstones -= 1;
                }
            }
        }
        if version.is_none() {
            self.tombstones += 1;
        }
        let change = Change {
            seq: self.last_seq,
            identifier,
            version,
            at,
        };
        self.by_seq.insert(self.last_seq, change);
    }

    /// Drop the oldest tombstones past `retention`, raising the horizon.
    fn trim(&mut self, retention: usize) {
        self.listed_namespaces = Default::default();
        while self.tombstones > retention {
            let Some(seq) = self
                .by_seq
                .values()
                .find(|c| c.version.is_none())
                .map(|c| c.seq)
            else {
                break;
            };
            if let Some(c) = self.by_seq.remove(&seq) {
                self.by_id.remove(&c.identifier);
            }
            self.tombstones -= 1;
            self.horizon = self.horizon.max(seq);
        }
    }

    /// The log after recording how `entries` (what the directory lists now) differ from it:
    /// upserts in identifier order, then deletes; `None` when nothing differs. Keeps at most
    /// `retention` tombstones.
    pub fn advance(&self, entries: &[Arc<Entry>], retention: usize, now: u64) -> Option<FeedLog> {
        let mut sorted;
        let mut listed = entries;
        if !entries.is_sorted_by(|a, b| a.identifier <= b.identifier) {
            sorted = entries.to_vec();
            sorted.sort_by(|a, b| a.identifier.cmp(&b.identifier));
            listed = &sorted;
        }
        let mut next: Option<FeedLog> = None;
        // Listed entries the log holds as listed (whatever their version).
        let mut still_listed = 0;
        for e in listed {
            let version = version_of(e);
            let logged = self
                .by_id
                .get(e.identifier.as_str())
                .and_then(|s| self.by_seq.get(s))
                .and_then(|c| c.version);
            if logged.is_some() {
                still_listed += 1;
            }
            if logged != Some(version) {
                next.get_or_insert_with(|| self.clone()).push(
                    e.identifier.as_str().into(),
                    Some(version),
                    now,
                );
            }
        }
        // Every identifier the log holds as listed is still listed: nothing to delete.
        if still_listed < self.by_seq.len() - self.tombstones {
            let wanted: HashSet<&str> = listed.iter().map(|e| e.identifier.as_str()).collect();
            let gone: Vec<Arc<str>> = self
                .listed()
                .map(|c| c.identifier.clone())
                .filter(|id| !wanted.contains(id.as_ref()))
                .collect();
            let mut gone = gone;
            gone.sort();
            for id in gone {
                next.get_or_insert_with(|| self.clone()).push(id, None, now);
            }
        }
        let mut next = next?;
        next.trim(retention);
        Some(next)
    }

    /// The persisted form in as few parts as keep each within `max` bytes (at least
    /// `self.parts`, doubling as needed); `None` past [`MAX_PARTS`].
    pub fn encode_parts(&self, max: usize) -> Option<Encoded> {
        let mut n = self.parts.max(1);
        while n <= MAX_PARTS {
            let mut rows: Vec<Vec<Row>> = vec![Vec::new(); n];
            for c in self.by_seq.values() {
                rows[part_of(&c.identifier, n)].push((
                    c.identifier.to_string(),
                    c.seq,
                    c.version.map(|v| format!("{v:016x}")),
                    c.at,
                ));
            }
            let mut rows = rows.into_iter();
            let first = rows.next().unwrap_or_default();
            let parts: Vec<Vec<u8>> = rows
                .map(|changes| {
                    gzip(&Part {
                        epoch: self.epoch.clone(),
                        changes,
                    })
                })
                .collect();
            let head = gzip(&Head {
                epoch: self.epoch.clone(),
                horizon: self.horizon,
                last_seq: self.last_seq,
                parts: parts.iter().map(|p| part_hash(p)).collect(),
                cursor_key: self.cursor_key.as_ref().map(CursorKey::encode),
                changes: first,
            });
            if head.len() <= max && parts.iter().all(|p| p.len() <= max) {
                return Some(Encoded { head, parts });
            }
            n *= 2;
        }
        None
    }

    /// The persisted form in one part.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_parts(usize::MAX)
            .map(|e| e.head)
            .unwrap_or_default()
    }

    /// Read a persisted log in one part (at most `max_json` bytes once decompressed).
    pub fn decode(bytes: &[u8], max_json: u64) -> Result<FeedLog, LogError> {
        FeedLog::decode_parts(bytes, |_| None, max_json)
    }

    /// Read a persisted log: its head, and each further part `part(i)` gives (`i` from 1);
    /// an error when one is missing or not the one the head names (of another write: a
    /// reader waits for the rest), or when anything is malformed. At most `max_json` bytes
    /// each, once decompressed.
    pub fn decode_parts(
        head: &[u8],
        part: impl Fn(usize) -> Option<bytes::Bytes>,
        max_json: u64,
    ) -> Result<FeedLog, LogError> {
        let h: Head = gunzip(head, max_json)?;
        let mut log = FeedLog::new(h.epoch.clone());
        log.cursor_key = match &h.cursor_key {
            None => None,
            Some(k) => Some(CursorKey::decode(k).ok_or(LogError::CursorKey)?),
        };
        log.horizon = h.horizon;
        log.last_seq = h.last_seq;
        log.parts = h.parts.len() + 1;
        log.add_rows(h.changes)?;
        for (i, want) in h.parts.iter().enumerate() {
            let bytes = part(i + 1).ok_or(LogError::PartMissing(i + 1))?;
            if part_hash(&bytes) != *want {
                return Err(LogError::PartMismatch(i + 1));
            }
            let p: Part = gunzip(&bytes, max_json)?;
            if p.epoch != h.epoch {
                return Err(LogError::OtherLog(i + 1));
            }
            log.add_rows(p.changes)?;
        }
        Ok(log)
    }

    fn add_rows(&mut self, rows: Vec<Row>) -> Result<(), LogError> {
        self.listed_namespaces = Default::default();
        for (id, seq, version, at) in rows {
            if seq > self.last_seq || seq <= self.horizon {
                return Err(LogError::OutOfRange {
                    seq,
                    horizon: self.horizon,
                    last: self.last_seq,
                });
            }
            let id: Arc<str> = id.into();
            if version.is_none() {
                self.tombstones += 1;
            }
            if self.by_id.insert(id.clone(), seq).is_some() {
                return Err(LogError::Twice(id.to_string()));
            }
            let version = match version {
                None => None,
                Some(v) => Some(u64::from_str_radix(&v, 16).map_err(|_| LogError::Version {
                    id: id.to_string(),
                    version: v.clone(),
                })?),
            };
            let change = Change {
                seq,
                identifier: id,
                version,
                at,
            };
            if self.by_seq.insert(seq, change).is_some() {
                return Err(LogError::SeqTwice(seq));
            }
        }
        Ok(())
    }
}
