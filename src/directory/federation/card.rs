//! One card as an upstream gives it, made an entry or refused: it must be a card as an import
//! takes one (v1.0, or v0.3 converted, then validated), at most [`MAX_CARD_BYTES`], and with
//! trusted keys signed by one of them; its [`Origin`] says where the operator read it. What
//! the upstream says besides the card ([`Said`]: reachability, lifecycle) is kept as said.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::client::{cut, MAX_CARD_BYTES};
use super::state::Read;
use super::Origin;
use crate::a2a::jws::verify_card;
use crate::a2a::{AgentCard as A2aCard, Jwks};
use crate::contract::content_hash;
use crate::crd::agentdirectory::Upstream;
use crate::crd::{LifecycleState, ServedLifecycle};
use crate::directory::entry::{Entry, Placement};

/// What an upstream says of an entry besides its card: where the card is, when it changed,
/// whether its agent is reachable, its lifecycle (shown as the upstream says, with its origin).
#[derive(Default)]
pub(super) struct Said {
    pub(super) url: Option<String>,
    pub(super) updated_at: Option<String>,
    pub(super) reachable: Option<bool>,
    pub(super) lifecycle: Option<Box<ServedLifecycle>>,
}

/// `"true"` / `"false"` (anything else: not known).
pub(super) fn reachable_of(v: Option<&str>) -> Option<bool> {
    match v {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    }
}

/// A deprecated or retired lifecycle as the native API and the feed write it.
pub(super) fn lifecycle_of(v: Option<&Value>) -> Option<Box<ServedLifecycle>> {
    let l: ServedLifecycle = serde_json::from_value(v?.clone()).ok()?;
    (l.state != LifecycleState::Active).then(|| Box::new(l))
}

/// The entry of a card read from `up` (`card`: its AgentCard's namespace and name), or why it
/// is refused: not a card, too large, or (with trusted keys) signed by none of them.
pub(super) fn entry_of(
    up: &Upstream,
    identifier: &str,
    bytes: Option<Bytes>,
    (namespace, name): (&str, &str),
    (said, read_from): (Said, String),
    path: Vec<String>,
    jwks: Option<&Jwks>,
) -> Read {
    let Some(bytes) = bytes else {
        return Read::Refused(format!("{identifier}: the upsert carries no card"));
    };
    if bytes.len() > MAX_CARD_BYTES {
        return Read::Refused(format!(
            "{identifier}: the card is larger than {MAX_CARD_BYTES} bytes"
        ));
    }
    let card = match A2aCard::from_json_lenient(&bytes) {
        Ok(c) => c,
        Err(e) => return Read::Refused(format!("{identifier}: not an Agent Card: {e}")),
    };
    // A card, as an import takes one: read as v1.0 (a v0.3 card converted), then validated.
    // (Every field of the lenient form has a default: any JSON object would do otherwise.)
    let checked = serde_json::from_slice::<Value>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|v| crate::a2a::import::import(&v).map_err(|p| p.to_string()))
        .and_then(
            |imported| match crate::a2a::validate::validate(&imported.card).first() {
                None => Ok(()),
                Some(p) => Err(format!("{}: {}", p.path, p.message)),
            },
        );
    if let Err(why) = checked {
        return Read::Refused(format!("{identifier}: not an Agent Card: {}", cut(&why)));
    }
    let verified = match jwks {
        Some(jwks) => match verify_card(&card, jwks) {
            Ok(_) => true,
            Err(e) => {
                let keys = up.trust.jwks_url.clone().unwrap_or_else(|| {
                    let name = up.trust.jwks.as_ref().map_or("", |r| r.name.as_str());
                    format!("Secret {name}")
                });
                return Read::Refused(format!(
                    "{identifier}: no signature verifies with the trusted keys ({keys}): {e}"
                ));
            }
        },
        None => false,
    };
    let host = identifier.split(':').nth(2).unwrap_or_default().to_string();
    let card_url = said.url.unwrap_or_else(|| read_from.clone());
    let placement = Placement {
        namespace: namespace.to_string(),
        name: name.to_string(),
        host,
        url: card_url.clone(),
        content_hash: content_hash(&bytes),
        key_id: String::new(),
        updated_at: said.updated_at.unwrap_or_default(),
        reachable: said.reachable,
        lifecycle: said.lifecycle,
        // Drift is the upstream operator's finding about its own agents: not carried over.
        drift: None,
        revision: None,
    };
    let Some(entry) = Entry::build(placement, bytes) else {
        return Read::Refused(format!("{identifier}: not a JSON object"));
    };
    // Where the operator read the card, not where the upstream says it is; `via` is the
    // upstream as the spec names it, `path` what the upstreams claim (to cut loops only).
    let origin = Origin {
        upstream: up.name.clone(),
        url: read_from,
        fetched_at: jiff::Timestamp::now().to_string(),
        verified,
        via: up.url.clone(),
        path,
    };
    Read::Entry(Arc::new(
        entry
            .with_identifier(identifier.to_string())
            .with_origin(origin),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::ard::ard_lifecycle;
    use super::*;
    use serde_json::json;

    #[test]
    fn what_an_upstream_says_of_reachability_and_lifecycle_is_kept() {
        assert_eq!(reachable_of(Some("true")), Some(true));
        assert_eq!(reachable_of(Some("false")), Some(false));
        assert_eq!(reachable_of(Some("unknown")), None);
        let native = json!({"state": "Retired", "since": "2026-12-01T00:00:00Z",
            "successor": "urn:air:b.example:x:b", "goneUntil": "2026-12-31T00:00:00Z"});
        let l = lifecycle_of(Some(&native)).unwrap();
        assert_eq!(l.state, LifecycleState::Retired);
        assert_eq!(l.gone_until.as_deref(), Some("2026-12-31T00:00:00Z"));
        assert!(lifecycle_of(Some(&json!({"state": "Active"}))).is_none());
        assert!(lifecycle_of(Some(&json!({"state": "Sideways"}))).is_none());
        let meta = json!({"lifecycle": "Deprecated", "lifecycleSince": "2026-11-01T00:00:00Z",
            "lifecycleMessage": "use b", "successor": "urn:air:b.example:x:b"});
        let l = ard_lifecycle(meta.as_object().unwrap()).unwrap();
        assert_eq!(l.state, LifecycleState::Deprecated);
        assert_eq!(l.message.as_deref(), Some("use b"));
        assert!(ard_lifecycle(json!({"lifecycle": "Active"}).as_object().unwrap()).is_none());
    }
}
