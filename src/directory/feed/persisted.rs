//! A directory's change-feed log as its ConfigMaps bring it in: the lease holder writes a log
//! as a head and further parts ([`crate::directory::feed::FeedLog::encode_parts`]), parts first, in the
//! operator's namespace; every replica reads them back here, from the cluster watch.
//!
//! Data flow: the watch hands each log ConfigMap's bytes in ([`Persisted::apply`]); once a
//! head and every part it names are here the log is decoded and handed back, for the index to
//! serve; a ConfigMap gone is forgotten ([`Persisted::remove`]), the head's with its log.
//! Pure: no client, no index.

use std::collections::HashMap;

use bytes::Bytes;

use crate::directory::feed::FeedLog;

/// Most bytes of a change-feed log once decompressed.
pub const MAX_FEED_JSON: u64 = 64 * 1024 * 1024;

/// The log ConfigMaps seen, by directory.
#[derive(Debug, Default)]
pub struct Persisted {
    /// Each log ConfigMap (`namespace/name`): the directory it is for, and which part (`None`:
    /// the head).
    sources: HashMap<String, (String, Option<usize>)>,
    /// Each directory's log head, its resourceVersion, and whether it was read in full.
    heads: HashMap<String, (Bytes, Option<String>, bool)>,
    /// Further parts of the logs, by directory and number.
    parts: HashMap<(String, usize), Bytes>,
}

/// What a ConfigMap gone made of a log.
#[derive(Debug, PartialEq, Eq)]
pub enum Gone {
    /// Not a log ConfigMap seen here.
    Nothing,
    /// A part: the log stays.
    Part,
    /// The head of directory `0`'s log: the log goes.
    Log(String),
}

impl Persisted {
    /// ConfigMap `source` holds `bytes` of directory `dir`'s log: its head (`part` `None`,
    /// at `resource_version`) or a further part. The log when it is now whole and was not
    /// read yet (a writer writes the parts before the head, so a part arriving after a head
    /// that was read belongs to the next write and costs no decode of the whole log).
    pub fn apply(
        &mut self,
        source: String,
        (dir, part): (&str, Option<usize>),
        bytes: Bytes,
        resource_version: Option<String>,
    ) -> Option<FeedLog> {
        self.sources.insert(source, (dir.to_string(), part));
        match part {
            None => {
                self.heads
                    .insert(dir.to_string(), (bytes, resource_version, false));
            }
            Some(i) => {
                self.parts.insert((dir.to_string(), i), bytes);
            }
        }
        self.assemble(dir)
    }

    fn assemble(&mut self, dir: &str) -> Option<FeedLog> {
        let Some((head, rv, false)) = self.heads.get(dir) else {
            return None;
        };
        let part = |i: usize| self.parts.get(&(dir.to_string(), i)).cloned();
        match FeedLog::decode_parts(head, part, MAX_FEED_JSON) {
            Ok(mut log) => {
                log.resource_version = rv.clone();
                if let Some(h) = self.heads.get_mut(dir) {
                    h.2 = true;
                }
                Some(log)
            }
            Err(e) => {
                tracing::debug!(directory = %dir, reason = %e, "change-feed log not assembled yet");
                None
            }
        }
    }

    /// ConfigMap `source` is gone (or no longer a log's).
    pub fn remove(&mut self, source: &str) -> Gone {
        match self.sources.remove(source) {
            Some((dir, None)) => {
                self.heads.remove(&dir);
                Gone::Log(dir)
            }
            Some((dir, Some(i))) => {
                self.parts.remove(&(dir, i));
                Gone::Part
            }
            None => Gone::Nothing,
        }
    }

    /// The log ConfigMaps seen (`namespace/name`), for a re-list to drop those gone.
    pub fn sources(&self) -> impl Iterator<Item = &String> {
        self.sources.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_handed_back_once_whole_and_once_only() {
        let mut log = FeedLog::new("e1");
        log.last_seq = 0;
        let one = log.encode_parts(usize::MAX).unwrap();
        let mut p = Persisted::default();
        let got = p.apply(
            "ops/log".into(),
            ("d", None),
            Bytes::from(one.head.clone()),
            Some("7".into()),
        );
        assert_eq!(
            got.map(|l| (l.epoch, l.resource_version)),
            Some(("e1".to_string(), Some("7".to_string())))
        );
        // A head applied again (a resync, or the next write) is read again.
        assert!(p
            .apply("ops/log".into(), ("d", None), Bytes::from(one.head), None)
            .is_some());
        assert_eq!(p.remove("ops/other"), Gone::Nothing);
        assert_eq!(p.remove("ops/log"), Gone::Log("d".into()));
        assert_eq!(p.sources().count(), 0);
    }
}
