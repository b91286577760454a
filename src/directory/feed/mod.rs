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

pub mod changes;
mod cursor;
mod log;
mod page;
pub mod persisted;

pub use cursor::*;
pub use log::*;
pub use page::*;

#[cfg(test)]
mod tests;
