//! The change feed of a directory: what it lists, as a log of upserts and deletes that a
//! client follows with a cursor instead of re-reading every page.
//!
//! Data flow: the lease holder compares each directory's listed entries with the directory's
//! [`FeedLog`] ([`FeedLog::advance`]) and appends what differs — an upsert for an entry that
//! is new or whose version changed, a delete (tombstone) for a logged entry no longer listed
//! — each with the next sequence number, then persists the log (gzip'd JSON in a ConfigMap of
//! the operator's namespace, [`FeedLog::encode`]). Every replica, the holder included, reads
//! the persisted log back from its ConfigMap watch and answers `GET /v1/changes` from it
//! ([`page`]), taking each upsert's bytes from its own catalog. So sequence numbers are
//! assigned once, by one writer, and survive restarts and hand-overs; a replica only serves
//! what has been persisted.
//!
//! The log is compacted: it keeps each identifier's latest change only (a client reading from
//! a cursor gets the newest state of everything that changed since). Tombstones are kept up
//! to the retention count; dropping the oldest raises the horizon, and a cursor below the
//! horizon has expired (the client re-lists). A cursor names the log's epoch (a new log — its
//! ConfigMap deleted — expires every cursor) and, in Kubernetes access mode, the namespaces
//! the caller could read, so a namespace entering or leaving its view arrives as upserts or
//! deletes.
//!
//! In Kubernetes access mode a cursor is sealed ([`CursorCodec::Sealed`]): its position and
//! namespaces are encrypted and authenticated (AES-256-GCM) under the log's own cursor key,
//! with the caller's identity bound in, so the server trusts only what it wrote for that
//! caller (a forged, altered or another caller's cursor does not open), and the caller reads
//! nothing in it: not the sequence numbers, which count changes it may not see. The key is
//! random, made with the log and persisted with it (in the operator's namespace, which tenants
//! do not read), so every replica opens the cursors of every other, across restarts and
//! hand-overs; a new log has a new key. Public mode keeps plain cursors (everything in them
//! is public).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::Arc;

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::entry::Entry;
use crate::contract::content_hash;

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
    by_seq: BTreeMap<u64, Change>,
    by_id: HashMap<Arc<str>, u64>,
    tombstones: usize,
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

/// Where a client is in a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The log's epoch.
    pub epoch: String,
    /// The last change the client has.
    pub seq: u64,
    /// Kubernetes access mode: hashes of the namespaces the client could read (`None` in
    /// public mode).
    pub seen: Option<BTreeSet<u32>>,
}

/// A namespace's short hash (in cursors).
pub fn namespace_hash(ns: &str) -> u32 {
    let d = content_hash(ns.as_bytes());
    let tail = &d[d.len().saturating_sub(8)..];
    u32::from_str_radix(tail, 16).unwrap_or(0)
}

impl Cursor {
    /// The opaque text form.
    pub fn encode(&self) -> String {
        let mut text = format!("1.{}.{}", self.epoch, self.seq);
        if let Some(seen) = &self.seen {
            text.push('.');
            let hashes: Vec<String> = seen.iter().map(|h| format!("{h:x}")).collect();
            text.push_str(&hashes.join("-"));
        }
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }

    /// Parse the text form: anything else is [`CursorError::Invalid`].
    pub fn parse(text: &str) -> Result<Cursor, CursorError> {
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|_| NOT_A_CURSOR)?;
        let raw = String::from_utf8(raw).map_err(|_| NOT_A_CURSOR)?;
        let mut parts = raw.split('.');
        let (Some("1"), Some(epoch), Some(seq)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(NOT_A_CURSOR);
        };
        let seq = seq.parse().map_err(|_| NOT_A_CURSOR)?;
        let seen = match parts.next() {
            None => None,
            Some("") => Some(BTreeSet::new()),
            Some(list) => Some(
                list.split('-')
                    .map(|h| u32::from_str_radix(h, 16))
                    .collect::<Result<_, _>>()
                    .map_err(|_| NOT_A_CURSOR)?,
            ),
        };
        if parts.next().is_some() || epoch.is_empty() {
            return Err(NOT_A_CURSOR);
        }
        Ok(Cursor {
            epoch: epoch.to_string(),
            seq,
            seen,
        })
    }
}

/// Bytes of a [`CursorKey`] (AES-256).
const CURSOR_KEY_BYTES: usize = 32;
/// Bytes of a sealed cursor's nonce (GCM's 96 bits) and tag.
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;

/// The secret a log's cursors are sealed with in Kubernetes access mode (see the module doc).
#[derive(Clone, PartialEq, Eq)]
pub struct CursorKey([u8; CURSOR_KEY_BYTES]);

/// Never printed.
impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorKey(..)")
    }
}

impl CursorKey {
    /// A new random key (from OpenSSL's CSPRNG).
    pub fn random() -> Result<CursorKey, openssl::error::ErrorStack> {
        let mut key = [0u8; CURSOR_KEY_BYTES];
        openssl::rand::rand_bytes(&mut key)?;
        Ok(CursorKey(key))
    }

    fn encode(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }

    fn decode(text: &str) -> Option<CursorKey> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()?;
        Some(CursorKey(raw.try_into().ok()?))
    }
}

/// Why a cursor given by a client is not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CursorError {
    /// Not a cursor this server gave out to this caller: forged, altered, cut, another
    /// caller's, or of the other access mode (400).
    Invalid(&'static str),
    /// A cursor of another log of this directory (a new log expires every cursor: 410).
    Expired,
}

/// How one caller's cursors are written and read: plain (public mode), or sealed for a caller
/// under the log's key (Kubernetes mode; see the module doc).
#[derive(Clone, Debug)]
pub enum CursorCodec {
    /// [`Cursor::encode`] / [`Cursor::parse`].
    Plain,
    /// Encrypted and authenticated, bound to `caller`.
    Sealed {
        /// The log's key.
        key: CursorKey,
        /// Who the cursors are for (what identifies the caller: its user name and uid).
        caller: String,
    },
}

/// A sealed cursor's text: `2.<epoch>.<base64url(nonce ‖ ciphertext ‖ tag)>`; the plaintext is
/// the position as 8 bytes and each namespace hash as 4 (a fixed width: its length says nothing
/// of the position).
const SEALED_PREFIX: &str = "2.";

fn aad(epoch: &str, caller: &str) -> Vec<u8> {
    format!("agentcard.dev/feed-cursor\u{0}{epoch}\u{0}{caller}").into_bytes()
}

impl CursorCodec {
    /// The text a client is given for `cursor`.
    pub fn encode(&self, cursor: &Cursor) -> String {
        let CursorCodec::Sealed { key, caller } = self else {
            return cursor.encode();
        };
        let mut plain = cursor.seq.to_be_bytes().to_vec();
        for h in cursor.seen.iter().flatten() {
            plain.extend_from_slice(&h.to_be_bytes());
        }
        let mut nonce = [0u8; NONCE_BYTES];
        let mut tag = [0u8; TAG_BYTES];
        let sealed = openssl::rand::rand_bytes(&mut nonce).and_then(|()| {
            openssl::symm::encrypt_aead(
                openssl::symm::Cipher::aes_256_gcm(),
                &key.0,
                Some(&nonce),
                &aad(&cursor.epoch, caller),
                &plain,
                &mut tag,
            )
        });
        // OpenSSL failing to encrypt is no state to serve from: an empty cursor is refused
        // when it comes back (the client re-lists), and nothing is disclosed.
        let Ok(ciphertext) = sealed else {
            tracing::error!("sealing a change-feed cursor failed");
            return String::new();
        };
        let mut raw = nonce.to_vec();
        raw.extend_from_slice(&ciphertext);
        raw.extend_from_slice(&tag);
        format!(
            "{SEALED_PREFIX}{}.{}",
            cursor.epoch,
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        )
    }

    /// The cursor `text` stands for in `log`: [`CursorError::Expired`] for one of another log
    /// of the same kind, [`CursorError::Invalid`] for anything this codec did not write.
    pub fn decode(&self, text: &str, log: &FeedLog) -> Result<Cursor, CursorError> {
        let text = text.trim();
        let CursorCodec::Sealed { key, caller } = self else {
            if text.starts_with(SEALED_PREFIX) {
                // The directory's access mode changed: its callers re-list.
                return Err(CursorError::Expired);
            }
            return Cursor::parse(text);
        };
        let forged = CursorError::Invalid(NOT_FOR_CALLER);
        let (epoch, sealed) = text
            .strip_prefix(SEALED_PREFIX)
            .and_then(|rest| rest.split_once('.'))
            .ok_or(forged.clone())?;
        if epoch != log.epoch {
            return Err(CursorError::Expired);
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sealed)
            .map_err(|_| forged.clone())?;
        if raw.len() < NONCE_BYTES + 8 + TAG_BYTES {
            return Err(forged);
        }
        let (nonce, rest) = raw.split_at(NONCE_BYTES);
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_BYTES);
        let plain = openssl::symm::decrypt_aead(
            openssl::symm::Cipher::aes_256_gcm(),
            &key.0,
            Some(nonce),
            &aad(epoch, caller),
            ciphertext,
            tag,
        )
        .map_err(|_| forged.clone())?;
        let (seq, hashes) = plain.split_at(8);
        if hashes.len() % 4 != 0 {
            return Err(forged);
        }
        let seq = u64::from_be_bytes(seq.try_into().map_err(|_| forged.clone())?);
        let seen = hashes
            .chunks_exact(4)
            .map(|h| u32::from_be_bytes([h[0], h[1], h[2], h[3]]))
            .collect();
        Ok(Cursor {
            epoch: epoch.to_string(),
            seq,
            seen: Some(seen),
        })
    }
}

const NOT_OURS: &str = "not a cursor this server gave out";
/// What a cursor of no form this server writes is.
const NOT_A_CURSOR: CursorError = CursorError::Invalid(NOT_OURS);
const NOT_FOR_CALLER: &str = "not a cursor this directory gave out to this caller";

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

fn cursor(log: &FeedLog, seq: u64, seen: Option<BTreeSet<u32>>) -> Cursor {
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

#[cfg(test)]
mod tests {
    use super::*;
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
            let namespaces: BTreeSet<&str> =
                p.items.iter().map(|i| card_of(&i.identifier).0).collect();
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
}
