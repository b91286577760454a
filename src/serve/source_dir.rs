//! Feed the index from a directory: `DIR/<host>.json` is the card served for `<host>`,
//! `DIR/jwks.json` the JWKS served on every host (files, or links to files, as in a mounted
//! ConfigMap). The directory is scanned once at start; then the file system says what changed
//! (inotify, through the `notify` crate) and only the files it names are looked at again, so
//! an idle directory of 100,000 files costs no CPU. An event the watcher cannot name a file
//! for (its queue overflowed, or a ConfigMap volume swapped its `..data` link) makes one full
//! scan. Where no watcher can be set up, the directory is rescanned periodically instead.
//! A file is re-read only when its size or modification time changed, and a file that is not
//! valid JSON (say, half written) leaves the previous version served. With a directory host,
//! every card is also listed in a public directory served there (for benchmarks and use
//! without Kubernetes), rebuilt after each change.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

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
                name: e.host.to_string(),
                host: e.host.to_string(),
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

/// What the directory watcher did, on `/metrics`: a directory followed by its events is
/// scanned once, and then only the files that changed are looked at.
#[derive(Clone, Debug, Default)]
pub struct DirMetrics {
    /// Full scans of the directory.
    pub scans: Counter,
    /// Files looked at again because the file system said they changed.
    pub file_looks: Counter,
}

impl DirMetrics {
    /// Register the counters (`agentcard_card_dir_scans_total`,
    /// `agentcard_card_dir_file_looks_total`) in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "agentcard_card_dir_scans",
            "Full scans of the card directory (one at start; more only when the file system's events were lost, a ConfigMap volume swapped its data, or no watcher could be set up)",
            self.scans.clone(),
        );
        registry.register(
            "agentcard_card_dir_file_looks",
            "Card files looked at again because the file system said they changed",
            self.file_looks.clone(),
        );
    }
}

/// Keep `content`'s cards in step with the files of `dir` forever (and, with
/// `directory_host`, a directory of them): one scan, then the file system's change events,
/// or periodic scans where it gives none.
pub async fn watch_dir(
    dir: PathBuf,
    content: Content,
    opts: DirOptions,
    directory_host: Option<String>,
    metrics: DirMetrics,
) {
    let mut seen: HashMap<PathBuf, Stamp> = HashMap::new();
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    // Set up before the first scan: nothing that changes during it goes unnoticed.
    let watcher = watch_events(&dir, tx);
    let mut pending = Pending::Everything;
    loop {
        let started = std::time::Instant::now();
        let d = dir.clone();
        let idx = content.cards.clone();
        let mut s = std::mem::take(&mut seen);
        let look = std::mem::replace(&mut pending, Pending::Files(HashSet::new()));
        match &look {
            Pending::Everything => metrics.scans.inc(),
            Pending::Files(files) => metrics.file_looks.inc_by(files.len() as u64),
        };
        // File I/O off the async workers.
        let result = tokio::task::spawn_blocking(move || {
            let r = match look {
                Pending::Everything => scan(&d, &idx, &mut s, opts),
                Pending::Files(files) => {
                    // Every file is looked at (no short circuit).
                    let looked: Vec<bool> = files
                        .iter()
                        .map(|f| refresh(f, &idx, &mut s, opts))
                        .collect();
                    Ok(looked.contains(&true))
                }
            };
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
                pending = Pending::Everything;
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the card directory; serving the last known cards");
            }
            Err(e) => {
                pending = Pending::Everything;
                tracing::error!(error = %e, "directory scan panicked");
            }
        }
        if watcher.is_none() {
            tokio::time::sleep(rest_after(started.elapsed(), opts.interval)).await;
            pending = Pending::Everything;
            continue;
        }
        if matches!(pending, Pending::Everything) {
            // The look failed: again after a rest.
            tokio::time::sleep(rest_after(started.elapsed(), opts.interval)).await;
            continue;
        }
        // Wait for a change, then take what else comes within a moment (a file written in
        // several steps, many files copied at once) in the same look.
        let Some(first) = events.recv().await else {
            pending = Pending::Everything;
            continue;
        };
        pending.add(first);
        let settle = tokio::time::sleep(SETTLE);
        tokio::pin!(settle);
        loop {
            tokio::select! {
                () = &mut settle => break,
                next = events.recv() => match next {
                    Some(e) => pending.add(e),
                    None => break,
                },
            }
        }
    }
}

/// How long after a change event further events are gathered into the same look.
const SETTLE: Duration = Duration::from_millis(50);

/// What the next look at the directory covers.
enum Pending {
    /// A full scan.
    Everything,
    /// These card files only.
    Files(HashSet<PathBuf>),
}

/// What one file system event says to look at.
enum Change {
    /// The whole directory (the watcher lost events, or a ConfigMap volume swapped its data).
    Everything,
    /// These files.
    Files(Vec<PathBuf>),
}

impl Pending {
    fn add(&mut self, change: Change) {
        match (&mut *self, change) {
            (Pending::Everything, _) => {}
            (Pending::Files(_), Change::Everything) => *self = Pending::Everything,
            (Pending::Files(files), Change::Files(paths)) => files.extend(paths),
        }
    }
}

/// What `event` (from the watcher of `dir`) says to look at: `None` for a file opened or read
/// (the server's own reads among them: nothing is sent, nothing wakes), the card files it names, or the whole directory
/// when it names something else there (the `..data` link of a ConfigMap volume), the directory
/// itself was moved or removed, or the watcher asks for a rescan.
fn change_of(dir: &Path, event: notify::Result<notify::Event>) -> Option<Change> {
    use notify::event::{AccessKind, AccessMode, EventKind};
    let Ok(event) = event else {
        return Some(Change::Everything);
    };
    if event.need_rescan() {
        return Some(Change::Everything);
    }
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return None,
        _ => {}
    }
    let elsewhere = |p: &PathBuf| {
        p.as_path() == dir
            || p.file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with('.'))
    };
    if event.paths.iter().any(elsewhere) {
        return Some(Change::Everything);
    }
    Some(Change::Files(event.paths))
}

/// A watcher of `dir` sending what each event says to look at into `tx`; `None` (periodic
/// scans instead) when the file system cannot watch it.
fn watch_events(
    dir: &Path,
    tx: tokio::sync::mpsc::UnboundedSender<Change>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let watched = dir.to_path_buf();
    let handler = move |event: notify::Result<notify::Event>| {
        if let Some(change) = change_of(&watched, event) {
            // The receiver goes only when the server stops.
            let _ = tx.send(change);
        }
    };
    let watched = notify::recommended_watcher(handler).and_then(|mut w| {
        w.watch(dir, notify::RecursiveMode::NonRecursive)?;
        Ok(w)
    });
    match watched {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the card directory for changes; rescanning it periodically");
            None
        }
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
    let mut present = HashSet::new();
    let mut changed = false;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if card_file(&path).is_none() {
            continue;
        }
        changed |= refresh(&path, index, seen, opts);
        if seen.contains_key(&path) {
            present.insert(path);
        }
    }
    let gone: Vec<PathBuf> = seen
        .keys()
        .filter(|p| !present.contains(*p))
        .cloned()
        .collect();
    for path in gone {
        changed |= forget(&path, index, seen);
    }
    Ok(changed)
}

/// The name of the card (or JWKS) file at `path`: `*.json`, not hidden.
fn card_file(path: &Path) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    (name.ends_with(".json") && !name.starts_with('.')).then_some(name)
}

/// Look at the file `path` again: serve it when it is new or changed (and valid JSON), stop
/// serving it when it is gone. Whether anything served changed.
fn refresh(
    path: &Path,
    index: &Index,
    seen: &mut HashMap<PathBuf, Stamp>,
    opts: DirOptions,
) -> bool {
    let Some(name) = card_file(path) else {
        return false;
    };
    // Followed through symlinks: a ConfigMap volume's files are links into `..data/`, which
    // the kubelet swaps on each update (the new target's stamp shows the change).
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        _ => return forget(path, index, seen),
    };
    let stamp = Stamp {
        len: meta.len(),
        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    };
    if seen.get(path) == Some(&stamp) {
        return false;
    }
    let Ok(body) = std::fs::read(path) else {
        return false;
    };
    if serde_json::from_slice::<serde_json::Value>(&body).is_err() {
        tracing::warn!(file = %path.display(), "not valid JSON (yet); keeping the previous version");
        return false;
    }
    seen.insert(path.to_path_buf(), stamp);
    let published = Published::new(body, stamp.modified, opts.max_age);
    if name == KEY_JWKS {
        index.set_jwks(Some(published));
    } else {
        let stem = name.strip_suffix(".json").unwrap_or(name);
        index.upsert(CardEntry {
            source: name.into(),
            host: stem.trim_end_matches('.').to_ascii_lowercase().into(),
            prefix: String::new(),
            legacy: opts.legacy,
            created: stamp.modified,
            content: Arc::new(published),
            extended: None,
        });
    }
    true
}

/// Stop serving the file `path` (gone, or no longer a file). Whether it was served.
fn forget(path: &Path, index: &Index, seen: &mut HashMap<PathBuf, Stamp>) -> bool {
    if seen.remove(path).is_none() {
        return false;
    }
    match card_file(path) {
        Some(KEY_JWKS) => index.set_jwks(None),
        Some(name) => index.remove(name),
        None => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wake_nothing_card_files_are_looked_at_and_the_rest_rescans() {
        use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind};
        let dir = Path::new("/cards");
        let event = |kind, path: &str| Ok(notify::Event::new(kind).add_path(dir.join(path)));
        let read = EventKind::Access(AccessKind::Open(AccessMode::Read));
        assert!(change_of(dir, event(read, "a.json")).is_none());
        let written = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert!(matches!(
            change_of(dir, event(written, "a.json")),
            Some(Change::Files(f)) if f == [dir.join("a.json")]
        ));
        let swapped = EventKind::Create(CreateKind::Any);
        assert!(matches!(
            change_of(dir, event(swapped, "..data")),
            Some(Change::Everything)
        ));
        let moved = Ok(notify::Event::new(EventKind::Modify(ModifyKind::Any)).add_path(dir.into()));
        assert!(matches!(change_of(dir, moved), Some(Change::Everything)));
    }

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
