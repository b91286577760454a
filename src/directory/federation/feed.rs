//! Reading another directory of this operator through its change feed (`kind:
//! AgentDirectory`): from the cursor until a page is empty (nothing changed costs one
//! request), from the start again into a fresh set when the cursor expired (410). Each upsert
//! becomes an entry ([`super::card`]) unless its claimed `path` says it is this directory's
//! own, read back.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::card::{entry_of, lifecycle_of, reachable_of, Said};
use super::client::{cut, get, MAX_PAGES, MAX_RESPONSE_BYTES};
use super::error::Error;
use super::state::MAX_IDENTIFIER;
use super::state::{Held, Read, Refresh, State};

/// Changes asked for per feed page.
const FEED_PAGE: usize = 1000;

/// A change as an upstream directory's feed gives it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FeedChange {
    #[serde(rename = "type")]
    kind: String,
    identifier: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    card: Option<Box<RawValue>>,
    #[serde(default)]
    origin: Option<FeedOrigin>,
    #[serde(default)]
    reachable: Option<String>,
    #[serde(default)]
    lifecycle: Option<Value>,
}

/// An upstream's `origin` of an entry it federated itself: the registries it says the entry
/// passed through (`path`; older operators wrote it as `via`).
#[derive(Deserialize)]
pub(super) struct FeedOrigin {
    #[serde(default)]
    via: Vec<String>,
    #[serde(default)]
    path: Option<Vec<String>>,
}

impl FeedOrigin {
    fn claimed(self) -> Vec<String> {
        self.path.unwrap_or(self.via)
    }
}

/// Most registries an entry's `path` may name (an entry that claims more is refused).
pub const MAX_PATH: usize = 16;

#[derive(Deserialize)]
pub(super) struct FeedPage {
    changes: Vec<FeedChange>,
    metadata: FeedMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FeedMeta {
    next_cursor: String,
    #[serde(default)]
    registry: Option<String>,
}

/// Follow the upstream directory's change feed from the cursor until a page is empty; from
/// the start again (into a fresh set) when the cursor expired.
pub(super) async fn read_feed(
    http: &reqwest::Client,
    r: &Refresh<'_>,
    state: &mut State,
) -> Result<(), Error> {
    let up = r.up;
    let base = up.url.trim_end_matches('/');
    let mut fresh: Option<Held> = None;
    for _ in 0..MAX_PAGES {
        let url = match &state.cursor {
            Some(c) => format!("{base}/v1/changes?limit={FEED_PAGE}&since={c}"),
            None => format!("{base}/v1/changes?limit={FEED_PAGE}"),
        };
        let got = get(http, &url, None, MAX_RESPONSE_BYTES).await?;
        if got.status == 410 && state.cursor.is_some() {
            // Expired: read everything again, and replace the set only once it is read.
            state.cursor = None;
            fresh = Some(Held::default());
            continue;
        }
        if got.status != 200 {
            return Err(Error::status(&url, got.status));
        }
        let page: FeedPage = serde_json::from_slice(&got.body)
            .map_err(|e| Error::malformed(&url, "a change feed page", e))?;
        let held = fresh.as_mut().unwrap_or(&mut state.held);
        let registry = page
            .metadata
            .registry
            .clone()
            .unwrap_or_else(|| up.url.clone());
        let empty = page.changes.is_empty();
        for c in page.changes {
            match c.kind.as_str() {
                "delete" => held.remove(&cut(&c.identifier)),
                "upsert" if !held.admits(&c.identifier, r.max) => {}
                "upsert" => {
                    let mut path = c.origin.map(FeedOrigin::claimed).unwrap_or_default();
                    path.push(registry.clone());
                    let read =
                        if path.len() > MAX_PATH || path.iter().any(|p| p.len() > MAX_IDENTIFIER) {
                            Read::Refused(format!(
                                "{}: its origin names more than {MAX_PATH} registries, or one of \
                             more than {MAX_IDENTIFIER} bytes",
                                c.identifier
                            ))
                        } else if path.iter().any(|v| v == r.own) {
                            Read::Refused(format!(
                                "{}: this directory's own entry, read back",
                                c.identifier
                            ))
                        } else {
                            let bytes = c.card.map(|r| Bytes::from(r.get().to_string()));
                            let said = Said {
                                url: c.url,
                                updated_at: c.updated_at,
                                reachable: reachable_of(c.reachable.as_deref()),
                                lifecycle: lifecycle_of(c.lifecycle.as_ref()),
                            };
                            entry_of(
                                up,
                                &c.identifier,
                                bytes,
                                (&c.namespace, &c.name),
                                (said, format!("{base}/v1/changes")),
                                path,
                                state.jwks.as_ref().map(|j| &*j.1),
                            )
                        };
                    held.take(&c.identifier, read, r.include, r.max);
                }
                _ => {}
            }
        }
        state.cursor = Some(page.metadata.next_cursor);
        if empty {
            if let Some(set) = fresh {
                state.held = set;
            }
            return Ok(());
        }
    }
    if fresh.is_some() {
        // A re-read from the start that did not end: the next refresh starts it again (going
        // on from its cursor into the old set would miss the deletes it had passed).
        state.cursor = None;
    }
    Err(Error::TooManyPages(base.to_string()))
}
