//! Cursors: where a client is in a log, plain (public mode) or sealed under the log's key
//! with the caller bound in (Kubernetes mode).

use std::collections::BTreeSet;

use base64::Engine;

use super::*;
use crate::contract::content_hash;

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

    pub(super) fn encode(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }

    pub(super) fn decode(text: &str) -> Option<CursorKey> {
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
pub(super) const SEALED_PREFIX: &str = "2.";

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
pub(super) const NOT_FOR_CALLER: &str = "not a cursor this directory gave out to this caller";
