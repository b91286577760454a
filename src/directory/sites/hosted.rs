//! What the directories host now, as every request reads it: each directory's [`Site`] by
//! host (replaced whole by [`crate::directory::sites`] when a rebuild is due) and each directory's
//! persisted change-feed [`FeedLog`] (read back from its ConfigMaps by the cluster watch,
//! written by the lease holder's feed writer). Readers take an `Arc` and never hold a lock
//! across an `.await`; a change of either bumps one counter that change streams and the feed
//! writer wait on.
//!
//! The served cards themselves are in [`crate::index::Index`], which knows nothing of
//! directories: the card server and the directory both point down at it, not at each other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::directory::feed::FeedLog;
use crate::directory::sites::site::Site;

/// The directories' sites and change-feed logs (see the module doc). Cheap to share behind
/// an `Arc`.
#[derive(Default)]
pub struct Hosted {
    /// Directory sites by host, replaced whole when rebuilt.
    sites: RwLock<Arc<HashMap<String, Arc<Site>>>>,
    /// Each directory's persisted change-feed log, by directory name.
    feeds: RwLock<HashMap<String, Arc<FeedLog>>>,
    /// Bumped when sites or feed logs change (feed streams and the log writer wait on it).
    changed: tokio::sync::watch::Sender<u64>,
    /// Bumped each time the sites are replaced.
    sites_version: AtomicU64,
}

impl Hosted {
    /// Nothing hosted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace every directory site (by host).
    pub fn set_sites(&self, sites: HashMap<String, Arc<Site>>) {
        *crate::locks::write(&self.sites) = Arc::new(sites);
        self.sites_version.fetch_add(1, Ordering::AcqRel);
        self.changed.send_modify(|n| *n += 1);
    }

    /// How many times the sites were replaced (a site seen at one version is the same at it).
    pub fn sites_version(&self) -> u64 {
        self.sites_version.load(Ordering::Acquire)
    }

    /// Every directory site.
    pub fn sites(&self) -> Arc<HashMap<String, Arc<Site>>> {
        crate::locks::read(&self.sites).clone()
    }

    /// The directory site holding `host`, if any.
    pub fn site(&self, host: &str) -> Option<Arc<Site>> {
        crate::locks::read(&self.sites).get(host).cloned()
    }

    /// Set directory `name`'s change-feed log, unless the one held is newer (same epoch, a
    /// later last change): a log read back from the watch may trail the one just written.
    pub fn set_feed(&self, name: &str, log: Arc<FeedLog>) {
        let mut feeds = crate::locks::write(&self.feeds);
        let stale = feeds
            .get(name)
            .is_some_and(|held| held.epoch == log.epoch && held.last_seq > log.last_seq);
        if !stale {
            feeds.insert(name.to_string(), log);
            drop(feeds);
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Forget directory `name`'s change-feed log (its ConfigMap is gone).
    pub fn remove_feed(&self, name: &str) {
        let removed = crate::locks::write(&self.feeds).remove(name).is_some();
        if removed {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Directory `name`'s change-feed log, when one is persisted.
    pub fn feed(&self, name: &str) -> Option<Arc<FeedLog>> {
        crate::locks::read(&self.feeds).get(name).cloned()
    }

    /// A receiver that sees each change of the sites or feed logs.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}
