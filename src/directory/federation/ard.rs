//! Reading any ARD registry (`kind: ARD`): paging `GET /agents` (the first page asked with
//! `If-None-Match`: nothing changed costs one request), each card inline (`data`) or read from
//! its URL on the upstream's own origin (with `If-None-Match`; only listed cards keep their
//! ETag and bytes).

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::card::{entry_of, lifecycle_of, reachable_of, Said};
use super::client::{cut, get, MAX_CARD_BYTES, MAX_PAGES, MAX_RESPONSE_BYTES};
use super::error::Error;
use super::state::{Held, Read, Refresh, State};
use crate::a2a::Jwks;
use crate::crd::agentdirectory::Upstream;
use crate::crd::ServedLifecycle;
use crate::directory::ard::TYPE_A2A;
use crate::directory::feed::card_of;

/// The same from an ARD entry's flattened `metadata` (`lifecycle`, `lifecycleSince`, ...).
pub(super) fn ard_lifecycle(meta: &serde_json::Map<String, Value>) -> Option<Box<ServedLifecycle>> {
    let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
    let l = json!({"state": text("lifecycle")?, "since": text("lifecycleSince").unwrap_or_default(),
        "message": text("lifecycleMessage"), "sunset": text("sunset"), "successor": text("successor"),
        "successorUrl": text("successorUrl"), "goneUntil": text("goneUntil")});
    lifecycle_of(Some(&l))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ArdPage {
    items: Vec<ArdEntry>,
    #[serde(default)]
    page_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ArdEntry {
    identifier: String,
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    data: Option<Box<RawValue>>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    metadata: serde_json::Map<String, Value>,
}

impl ArdEntry {
    /// What the entry says besides its card, the card at `url`.
    fn said(&self, url: Option<String>) -> Said {
        Said {
            url,
            updated_at: self.updated_at.clone(),
            reachable: reachable_of(self.metadata.get("reachable").and_then(Value::as_str)),
            lifecycle: ard_lifecycle(&self.metadata),
        }
    }
}

/// Page the ARD registry's `GET /agents`; nothing when its first page is unchanged.
pub(super) async fn read_ard(
    http: &reqwest::Client,
    base: &url::Url,
    r: &Refresh<'_>,
    state: &mut State,
) -> Result<(), Error> {
    let up = r.up;
    let root = up.url.trim_end_matches('/');
    let mut token: Option<String> = None;
    let mut held = Held::default();
    let mut listed_urls: HashSet<String> = HashSet::new();
    for page_no in 0..MAX_PAGES {
        let mut url = format!("{root}/agents?pageSize=100");
        if let Some(t) = &token {
            url.push_str("&pageToken=");
            url.push_str(&url::form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>());
        }
        let etag = if page_no == 0 {
            state.first_page.clone()
        } else {
            None
        };
        let got = get(http, &url, etag.as_deref(), MAX_RESPONSE_BYTES).await?;
        if got.status == 304 && page_no == 0 && etag.is_some() {
            return Ok(());
        }
        if got.status != 200 {
            return Err(Error::status(&url, got.status));
        }
        if page_no == 0 {
            state.first_page = got.etag.clone();
        }
        let page: ArdPage = serde_json::from_slice(&got.body)
            .map_err(|e| Error::malformed(&url, "an ARD list response", e))?;
        for e in page.items {
            if !held.admits(&e.identifier, r.max) {
                continue;
            }
            let jwks = state.jwks.as_ref().map(|j| j.1.clone());
            let (read, fetched) =
                ard_entry(http, (base, &url), up, &e, (&state.cards, jwks.as_deref())).await;
            if !held.take(&e.identifier, read, r.include, r.max) {
                continue;
            }
            // Only what is listed keeps its card's ETag and bytes.
            if let Some(u) = e.url.as_ref().filter(|_| e.data.is_none()) {
                listed_urls.insert(u.clone());
                if let Some(got) = fetched {
                    state.cards.insert(u.clone(), got);
                }
            }
        }
        match page.page_token.filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t),
            None => {
                state.held = held;
                state.cards.retain(|u, _| listed_urls.contains(u));
                return Ok(());
            }
        }
    }
    Err(Error::TooManyPages(root.to_string()))
}

/// One ARD entry: its card inline, or read from its URL on the upstream's origin.
/// With a card read from its URL, the ETag and bytes to keep for it if it is listed.
pub(super) async fn ard_entry(
    http: &reqwest::Client,
    (base, page_url): (&url::Url, &str),
    up: &Upstream,
    e: &ArdEntry,
    (cards, jwks): (&HashMap<String, (String, Bytes)>, Option<&Jwks>),
) -> (Read, Option<(String, Bytes)>) {
    if e.kind != TYPE_A2A {
        let why = format!(
            "{}: type {:?} is not an A2A Agent Card",
            e.identifier, e.kind
        );
        return (Read::Refused(why), None);
    }
    let (namespace, name) = card_of(&e.identifier);
    // An ARD registry says nothing of where its entries came from: the path is the upstream.
    let path = vec![up.url.clone()];
    if let Some(data) = &e.data {
        let bytes = Bytes::from(data.get().to_string());
        let read = entry_of(
            up,
            &e.identifier,
            Some(bytes),
            (namespace, name),
            (e.said(None), page_url.to_string()),
            path,
            jwks,
        );
        return (read, None);
    }
    let Some(card_url) = &e.url else {
        let why = format!("{}: neither url nor data", e.identifier);
        return (Read::Refused(why), None);
    };
    let same_origin = url::Url::parse(card_url).is_ok_and(|u| u.origin() == base.origin());
    if !same_origin {
        let why = format!(
            "{}: its card URL {} is not on the upstream's origin",
            e.identifier,
            cut(card_url)
        );
        return (Read::Refused(why), None);
    }
    let held = cards.get(card_url).cloned();
    let got = get(
        http,
        card_url,
        held.as_ref().map(|h| h.0.as_str()),
        MAX_CARD_BYTES,
    )
    .await;
    let (bytes, fetched) = match got {
        Ok(g) if g.status == 304 && held.is_some() => (held.map(|h| h.1), None),
        Ok(g) if g.status == 200 => {
            let keep = g.etag.clone().map(|tag| (tag, g.body.clone()));
            (Some(g.body), keep)
        }
        Ok(g) => {
            let why = format!("{}: {}: HTTP {}", e.identifier, cut(card_url), g.status);
            return (Read::Refused(why), None);
        }
        Err(why) => return (Read::Refused(format!("{}: {why}", e.identifier)), None),
    };
    let read = entry_of(
        up,
        &e.identifier,
        bytes,
        (namespace, name),
        (e.said(Some(card_url.clone())), card_url.clone()),
        path,
        jwks,
    );
    (read, fetched)
}
