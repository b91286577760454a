//! The lease holder's half of the directories' change feeds: it records what each directory
//! lists in the directory's [`FeedLog`] and persists the log, so that every replica serves the
//! same sequence numbers (see [`crate::directory::feed`]).
//!
//! Data flow: woken by [`Hosted`] (sites rebuilt, logs read back), at most once a second, for
//! each served directory it takes the log as last persisted ([`Index::feed`]), appends how the
//! directory's entries differ ([`FeedLog::advance`]) and writes it: a new log with `create`
//! (never over one this replica has not read yet), a changed one with a server-side apply whose
//! `resourceVersion` is the one the log was read from, so a write based on a stale log is
//! refused (409) and made again from the newer one. The ConfigMap lives in the operator's
//! namespace, owned by the AgentDirectory (it goes with it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;

use crate::contract::*;
use crate::directory::feed::{CursorKey, FeedLog, MAX_PARTS};
use crate::directory::sites::hosted::Hosted;
use crate::directory::sites::site::Site;
use crate::index::Index;

/// Time between two rounds of writes (changes within it share a write).
const ROUND: Duration = Duration::from_secs(1);

/// How long a new lease holder waits before its first write, so its watches catch up with
/// what the previous holder wrote.
const SETTLE: Duration = Duration::from_secs(2);

/// How often a round runs with no change seen (retries of failed writes).
const IDLE_ROUND: Duration = Duration::from_secs(30);

/// The name of directory `dir`'s log ConfigMap.
pub fn configmap_name(dir: &str) -> String {
    let name = format!("agentcard-feed-{dir}");
    // Room for the parts' `-<n>`.
    if name.len() <= 240 {
        return name;
    }
    let digest = content_hash(dir.as_bytes());
    format!("agentcard-feed-{}", &digest[digest.len() - 16..])
}

/// Keep every directory's log persisted while this process holds the lease (runs until
/// aborted).
pub async fn run(
    client: Client,
    cards: Arc<Index>,
    hosted: Arc<Hosted>,
    namespace: String,
    retention: usize,
    part_bytes: usize,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    // The content hash of each part this process wrote last (`(directory, part)`).
    let mut parts: HashMap<(String, usize), String> = HashMap::new();
    let mut changes = hosted.changes();
    // Per directory, the sites' version and the log last found in step: the same again needs
    // no round.
    let mut done: HashMap<String, (u64, u64)> = HashMap::new();
    tokio::time::sleep(SETTLE).await;
    loop {
        if cards.is_ready() {
            // The version first: sites replaced meanwhile have a higher one, and are looked at
            // in the next round.
            let version = hosted.sites_version();
            let sites = hosted.sites();
            done.retain(|name, _| sites.values().any(|s| &s.name == name));
            for site in sites.values() {
                let mark = (version, hosted.feed(&site.name).map_or(0, |l| l.last_seq));
                if done.get(&site.name) == Some(&mark) {
                    continue;
                }
                let limits = (retention, part_bytes);
                match persist(&api, &hosted, site, limits, &mut parts).await {
                    // Written since it was read: the round is made again from the newer log.
                    Ok(false) => {}
                    Ok(true) => {
                        let last = hosted.feed(&site.name).map_or(0, |l| l.last_seq);
                        done.insert(site.name.clone(), (mark.0, last));
                    }
                    Err(e) => {
                        tracing::warn!(directory = %site.name, error = %e, "change feed not persisted; retrying")
                    }
                }
            }
        }
        tokio::time::sleep(ROUND).await;
        let _ = tokio::time::timeout(IDLE_ROUND, changes.changed()).await;
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A new log's epoch: unique enough that no cursor of an earlier log of the same name is
/// taken for one of this.
fn new_epoch(dir: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let digest = content_hash(format!("{dir}/{nanos}/{}", std::process::id()).as_bytes());
    digest[digest.len() - 12..].to_string()
}

/// Why a directory's change feed was not persisted (retried with backoff, said in the log).
#[derive(Debug, thiserror::Error)]
enum PersistError {
    /// OpenSSL could not make a cursor key.
    #[error("making a cursor key: {0}")]
    CursorKey(#[source] openssl::error::ErrorStack),
    /// The log does not fit in its ConfigMaps.
    #[error(
        "{entries} logged entries do not fit in {} ConfigMaps of {part_bytes} bytes",
        MAX_PARTS
    )]
    TooLarge {
        /// Changes logged.
        entries: usize,
        /// Bytes of one ConfigMap.
        part_bytes: usize,
    },
    /// The API server refused a write.
    #[error("{verb} ConfigMap {name}: {source}")]
    Write {
        /// `writing` or `creating`.
        verb: &'static str,
        /// The ConfigMap.
        name: String,
        /// Its answer.
        source: kube::Error,
    },
}

/// Record and write `site`'s changes, if any: the parts that changed, then the head (with
/// the precondition), whose part hashes make readers wait for the parts of this write.
/// `false` when the log was written by another since it was read (the round is to be made
/// again).
async fn persist(
    api: &Api<ConfigMap>,
    hosted: &Hosted,
    site: &Site,
    (retention, part_bytes): (usize, usize),
    written_parts: &mut HashMap<(String, usize), String>,
) -> Result<bool, PersistError> {
    if site.uid.is_empty() {
        return Ok(true);
    }
    let held = hosted.feed(&site.name);
    let mut base = held
        .as_deref()
        .cloned()
        .unwrap_or_else(|| FeedLog::new(new_epoch(&site.name)));
    // A new log, or one written before cursors were sealed, gets its cursor key (written at
    // once: Kubernetes-mode callers wait for it).
    let keyless = base.cursor_key.is_none();
    if keyless {
        base.cursor_key = Some(CursorKey::random().map_err(PersistError::CursorKey)?);
    }
    let next = base.advance(site.catalog.entries(), retention, now());
    let mut next = match (next, held.is_some() && !keyless) {
        (Some(next), _) => next,
        // A directory listing nothing still gets a log (clients get a cursor).
        (None, false) => base,
        (None, true) => return Ok(true),
    };
    let Some(encoded) = next.encode_parts(part_bytes) else {
        return Err(PersistError::TooLarge {
            entries: next.len(),
            part_bytes,
        });
    };
    next.parts = encoded.parts.len() + 1;
    let name = configmap_name(&site.name);
    let params = PatchParams::apply(MANAGER).force();
    for (i, bytes) in encoded.parts.into_iter().enumerate() {
        let key = (site.name.clone(), i + 1);
        let hash = content_hash(&bytes);
        if written_parts.get(&key) == Some(&hash) {
            continue;
        }
        let part = configmap(site, Some(i + 1), bytes, None);
        let part_name = format!("{name}-{}", i + 1);
        api.patch(&part_name, &params, &Patch::Apply(&part))
            .await
            .map_err(|source| PersistError::Write {
                verb: "writing",
                name: part_name.clone(),
                source,
            })?;
        written_parts.insert(key, hash);
    }
    let cm = configmap(site, None, encoded.head, next.resource_version.clone());
    let written = if held.is_none() {
        match api.create(&PostParams::default(), &cm).await {
            Ok(cm) => cm,
            // One exists that this replica has not read yet: its watch brings it.
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(false),
            Err(source) => {
                return Err(PersistError::Write {
                    verb: "creating",
                    name,
                    source,
                })
            }
        }
    } else {
        match api.patch(&name, &params, &Patch::Apply(&cm)).await {
            Ok(cm) => cm,
            // Written since it was read (or gone): the watch brings the newer state.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => return Ok(false),
            Err(source) => {
                return Err(PersistError::Write {
                    verb: "writing",
                    name,
                    source,
                })
            }
        }
    };
    next.resource_version = written.metadata.resource_version;
    hosted.set_feed(&site.name, Arc::new(next));
    Ok(true)
}

/// The log's head ConfigMap (`part` `None`; `resource_version` is the write's precondition)
/// or its part `part`.
fn configmap(
    site: &Site,
    part: Option<usize>,
    bytes: Vec<u8>,
    resource_version: Option<String>,
) -> ConfigMap {
    let base = configmap_name(&site.name);
    let (name, content, annotations) = match part {
        None => (
            base,
            CONTENT_FEED,
            serde_json::json!({ANN_DIRECTORY: site.name}),
        ),
        Some(i) => (
            format!("{base}-{i}"),
            CONTENT_FEED_PART,
            serde_json::json!({ANN_DIRECTORY: site.name, ANN_FEED_PART: i.to_string()}),
        ),
    };
    let mut cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: content},
            "annotations": annotations,
        },
    }))
    .unwrap_or_default();
    cm.metadata.resource_version = resource_version;
    cm.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "agentcard.dev/v1alpha1".into(),
        kind: "AgentDirectory".into(),
        name: site.name.clone(),
        uid: site.uid.clone(),
        ..OwnerReference::default()
    }]);
    cm.binary_data = Some([(KEY_FEED.to_string(), ByteString(bytes))].into());
    cm
}
