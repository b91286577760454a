//! Feed the index from the cluster: a watch on the ConfigMaps the controller publishes
//! (label selector [`PUBLISHED_SELECTOR`], all namespaces).
//!
//! A card ConfigMap carries the served bytes under `agent-card.json` and its routing in
//! annotations (host, path prefix, legacy flag, max-age, published-at); the JWKS ConfigMap is
//! taken from the operator's own namespace only, so no other namespace can inject keys. The
//! watcher re-lists after disconnects with exponential backoff; a re-list replaces the index
//! only once complete, and while the API server is unreachable the last known cards stay.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};

use crate::contract::*;
use crate::index::{CardEntry, Index, Published};

/// What a published ConfigMap means to the server.
enum Doc {
    Card(CardEntry),
    Jwks(Published),
    Ignored,
}

fn timestamp(text: Option<&String>) -> Option<SystemTime> {
    let ts: jiff::Timestamp = text?.parse().ok()?;
    let secs = u64::try_from(ts.as_second()).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Normalise a path prefix: `""`, or `/a/b` with one leading and no trailing slash.
pub fn normalize_prefix(p: &str) -> String {
    let trimmed = p.trim().trim_matches('/');
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("/{trimmed}")
    }
}

fn classify(cm: &ConfigMap, operator_ns: &str) -> Doc {
    let labels = cm.labels();
    let ann = cm.annotations();
    let created = cm
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| u64::try_from(t.0.as_second()).ok())
        .map_or(UNIX_EPOCH, |s| UNIX_EPOCH + Duration::from_secs(s));
    let modified = timestamp(ann.get(ANN_PUBLISHED_AT)).unwrap_or(created);
    let max_age = ann
        .get(ANN_MAX_AGE)
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MAX_AGE);
    let data = cm.data.as_ref();
    match labels.get(LABEL_CONTENT).map(String::as_str) {
        Some(CONTENT_CARD) => {
            let (Some(host), Some(body)) = (ann.get(ANN_HOST), data.and_then(|d| d.get(KEY_CARD)))
            else {
                return Doc::Ignored;
            };
            Doc::Card(CardEntry {
                source: format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any()),
                host: host.trim().trim_end_matches('.').to_ascii_lowercase(),
                prefix: normalize_prefix(ann.get(ANN_PATH_PREFIX).map_or("", String::as_str)),
                legacy: ann.get(ANN_LEGACY_PATH).is_some_and(|v| v == "true"),
                created,
                content: Arc::new(Published::new(body.clone().into_bytes(), modified, max_age)),
            })
        }
        Some(CONTENT_JWKS) if cm.namespace().as_deref() == Some(operator_ns) => {
            match data.and_then(|d| d.get(KEY_JWKS)) {
                Some(body) => {
                    Doc::Jwks(Published::new(body.clone().into_bytes(), modified, max_age))
                }
                None => Doc::Ignored,
            }
        }
        _ => Doc::Ignored,
    }
}

/// Keep `index` in step with the published ConfigMaps until the process ends.
pub async fn watch_cluster(client: Client, operator_ns: String, index: Arc<Index>) {
    let api: Api<ConfigMap> = Api::all(client);
    let config = watcher::Config::default().labels(PUBLISHED_SELECTOR);
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let mut relist: Vec<CardEntry> = Vec::new();
    let mut relist_jwks: Option<Published> = None;
    let jwks_source = |cm: &ConfigMap| {
        cm.namespace().as_deref() == Some(operator_ns.as_str())
            && cm.labels().get(LABEL_CONTENT).map(String::as_str) == Some(CONTENT_JWKS)
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => {
                relist.clear();
                relist_jwks = None;
            }
            Ok(Event::InitApply(cm)) => match classify(&cm, &operator_ns) {
                Doc::Card(e) => relist.push(e),
                Doc::Jwks(j) => relist_jwks = Some(j),
                Doc::Ignored => {}
            },
            Ok(Event::InitDone) => {
                index.replace_all(std::mem::take(&mut relist));
                index.set_jwks(relist_jwks.take());
                index.mark_ready();
                tracing::info!(cards = index.len(), "card index synced");
            }
            Ok(Event::Apply(cm)) => match classify(&cm, &operator_ns) {
                Doc::Card(e) => index.upsert(e),
                Doc::Jwks(j) => index.set_jwks(Some(j)),
                Doc::Ignored => index.remove(&format!(
                    "{}/{}",
                    cm.namespace().unwrap_or_default(),
                    cm.name_any()
                )),
            },
            Ok(Event::Delete(cm)) => {
                if jwks_source(&cm) {
                    index.set_jwks(None);
                } else {
                    index.remove(&format!(
                        "{}/{}",
                        cm.namespace().unwrap_or_default(),
                        cm.name_any()
                    ));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "ConfigMap watch failed; serving the last known cards and retrying")
            }
        }
    }
}
