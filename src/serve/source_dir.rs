//! Feed the index from a directory: `DIR/<host>.json` is the card served for `<host>`,
//! `DIR/jwks.json` the JWKS served on every host (files, or links to files, as in a mounted
//! ConfigMap). The directory is rescanned a few times a
//! second; a file is re-read only when its size or modification time changed, and a file that
//! is not valid JSON (say, half written) leaves the previous version served. With a directory
//! host, every card is also listed in a public directory served there (for benchmarks and use
//! without Kubernetes), rebuilt after each scan that changed something.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::contract::{content_hash, KEY_JWKS, PATH_CARD};
use crate::crd::AccessMode;
use crate::directory::entry::{Entry, Placement};
use crate::directory::feed::FeedLog;
use crate::directory::sites::hosted::Hosted;
use crate::directory::sites::site::Site;
use crate::index::{CardEntry, Index, Published};
use crate::serve::Content;

/// How files are served.
#[derive(Clone, Copy, Debug)]
pub struct DirOptions {
    /// `Cache-Control` max-age for every file.
    pub max_age: u32,
    /// Also serve cards at the legacy `/.well-known/agent.json`.
    pub legacy: bool,
    /// Least time between scans (longer for a directory whose scan takes long: see
    /// [`rest_after`]).
    pub interval: Duration,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: SystemTime,
}

/// A public directory on `host` listing every card of the index (namespace `static`, named
/// after its host).
pub fn static_site(index: &Index, host: &str) -> Site {
    let entries = index
        .entries()
        .iter()
        .filter_map(|e| {
            let updated = e
                .content
                .last_modified
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()
                .and_then(|d| jiff::Timestamp::from_second(i64::try_from(d.as_secs()).ok()?).ok())
                .map(|t| t.to_string())
                .unwrap_or_default();
            let placement = Placement {
                namespace: "static".into(),
                name: e.host.clone(),
                host: e.host.clone(),
                url: format!("https://{}{PATH_CARD}", e.host),
                content_hash: content_hash(&e.content.body),
                key_id: String::new(),
                updated_at: updated,
                ..Placement::default()
            };
            Entry::build(placement, e.content.body.clone()).map(Arc::new)
        })
        .collect();
    Site::new(
        "static".into(),
        String::new(),
        host.to_string(),
        String::new(),
        None,
        None,
        AccessMode::Public,
        entries,
    )
}

/// Record the directory's changes in its change-feed log, kept in memory: this process is
/// its only writer (a restart starts a new log, and earlier cursors expire).
fn record_changes(hosted: &Hosted, site: &Site) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let held = hosted.feed(&site.name);
    let base = held
        .as_deref()
        .cloned()
        .unwrap_or_else(|| FeedLog::new(format!("{:x}-{}", now, std::process::id())));
    match base.advance(site.catalog.entries(), FEED_RETENTION, now) {
        Some(next) => hosted.set_feed(&site.name, Arc::new(next)),
        None if held.is_none() => hosted.set_feed(&site.name, Arc::new(base)),
        None => {}
    }
}

/// Deletes the in-memory change feed keeps.
const FEED_RETENTION: usize = 100_000;

/// Scan `dir` forever, keeping `content`'s cards in step with its files (and, with
/// `directory_host`, a directory of them).
pub async fn watch_dir(
    dir: PathBuf,
    content: Content,
    opts: DirOptions,
    directory_host: Option<String>,
) {
    let mut seen: HashMap<PathBuf, Stamp> = HashMap::new();
    loop {
        let started = std::time::Instant::now();
        let d = dir.clone();
        let idx = content.cards.clone();
        let mut s = std::mem::take(&mut seen);
        // File I/O off the async workers.
        let result = tokio::task::spawn_blocking(move || {
            let r = scan(&d, &idx, &mut s, opts);
            (s, r)
        })
        .await;
        match result {
            Ok((s, Ok(changed))) => {
                seen = s;
                if let Some(host) = directory_host.as_deref().filter(|_| changed) {
                    let site = static_site(&content.cards, host);
                    record_changes(&content.directories, &site);
                    content
                        .directories
                        .set_sites(HashMap::from([(host.to_string(), Arc::new(site))]));
                }
                content.cards.mark_ready();
            }
            Ok((s, Err(e))) => {
                seen = s;
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the card directory; serving the last known cards");
            }
            Err(e) => tracing::error!(error = %e, "directory scan panicked"),
        }
        tokio::time::sleep(rest_after(started.elapsed(), opts.interval)).await;
    }
}

/// Parts of each scan cycle spent resting per part scanning: a scan of a large directory (a
/// `stat` per file) then takes at most 1/[`REST_FACTOR`]+1 of a core, instead of a core at 20,000
/// files scanned every 200 ms; a change is seen within the larger interval.
const REST_FACTOR: u32 = 20;

/// How long to rest after a scan that took `scan`: `interval`, or [`REST_FACTOR`] times the
/// scan when that is longer.
fn rest_after(scan: Duration, interval: Duration) -> Duration {
    interval.max(scan * REST_FACTOR)
}

/// One pass over the directory.
fn scan(
    dir: &Path,
    index: &Index,
    seen: &mut HashMap<PathBuf, Stamp>,
    opts: DirOptions,
) -> std::io::Result<bool> {
    let mut present = Vec::new();
    let mut changed = false;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        // Followed through symlinks: a ConfigMap volume's files are links into `..data/`, which
        // the kubelet swaps on each update (the new target's stamp shows the change).
        let meta = match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => m,
            _ => continue,
        };
        present.push(path.clone());
        let stamp = Stamp {
            len: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        };
        if seen.get(&path) == Some(&stamp) {
            continue;
        }
        let Ok(body) = std::fs::read(&path) else {
            continue;
        };
        if serde_json::from_slice::<serde_json::Value>(&body).is_err() {
            tracing::warn!(file = %path.display(), "not valid JSON (yet); keeping the previous version");
            continue;
        }
        seen.insert(path.clone(), stamp);
        changed = true;
        let published = Published::new(body, stamp.modified, opts.max_age);
        if name == KEY_JWKS {
            index.set_jwks(Some(published));
        } else {
            index.upsert(CardEntry {
                source: name.clone(),
                host: stem.trim_end_matches('.').to_ascii_lowercase(),
                prefix: String::new(),
                legacy: opts.legacy,
                created: stamp.modified,
                content: Arc::new(published),
            });
        }
    }
    let gone: Vec<PathBuf> = seen
        .keys()
        .filter(|p| !present.contains(p))
        .cloned()
        .collect();
    for path in gone {
        changed = true;
        seen.remove(&path);
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if name == KEY_JWKS {
            index.set_jwks(None);
        } else {
            index.remove(&name);
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_scan_rests_twenty_times_its_length_a_short_one_the_interval() {
        let interval = Duration::from_millis(200);
        assert_eq!(rest_after(Duration::from_millis(2), interval), interval);
        assert_eq!(
            rest_after(Duration::from_millis(50), interval),
            Duration::from_secs(1)
        );
    }
}
