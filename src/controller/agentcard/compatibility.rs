//! Compatibility: an edit of a published card compared with the card served before it, and
//! `spec.publish.compatibility` applied (pure; runs between build and apply, so a refused
//! edit writes nothing and the last good card stays served).
//!
//! Data flow: the served ConfigMap's bytes (the last published card) and the built bytes,
//! when they differ, are read back as cards → [`crate::a2a::breaking::findings`] → `Warn`
//! passes them on for the `Compatible` condition, `Block` refuses any, `RequireMajorVersion`
//! refuses them unless `card.version` bumps its semver major.

use crate::a2a::breaking::{findings, major_bumped, Finding};
use crate::a2a::card::AgentCard as A2aCard;
use crate::contract::KEY_CARD;
use crate::controller::error::Error;
use crate::crd::{AgentCard, Compatibility};
use crate::store::SeenConfigMap;

use super::build::Built;

/// The breaking changes of `built` against the card `previous` serves: `None` when nothing
/// was compared (no card served yet, or the same bytes), an error when the card's policy
/// refuses them.
pub fn check(
    card: &AgentCard,
    previous: Option<&SeenConfigMap>,
    built: &Built,
) -> Result<Option<Vec<Finding>>, Error> {
    let Some(old_bytes) = previous.and_then(|cm| cm.bytes(KEY_CARD)) else {
        return Ok(None);
    };
    if crate::contract::content_hash(old_bytes) == built.content_hash {
        return Ok(None);
    }
    let new_bytes = built
        .configmap
        .data
        .as_ref()
        .and_then(|d| d.get(KEY_CARD))
        .map(String::as_bytes);
    let (Some(old), Some(new)) = (
        A2aCard::from_json_lenient(old_bytes).ok(),
        new_bytes.and_then(|b| A2aCard::from_json_lenient(b).ok()),
    ) else {
        return Ok(None);
    };
    let found = findings(&old, &new);
    if found.is_empty() {
        return Ok(Some(found));
    }
    let list = || found.iter().map(ToString::to_string).collect();
    match card.spec.publish.compatibility.unwrap_or_default() {
        Compatibility::Warn => Ok(Some(found)),
        Compatibility::Block => Err(Error::Incompatible {
            policy: "Block",
            hint: "",
            findings: list(),
        }),
        Compatibility::RequireMajorVersion if major_bumped(&old.version, &new.version) => {
            Ok(Some(found))
        }
        Compatibility::RequireMajorVersion => Err(Error::Incompatible {
            policy: "RequireMajorVersion",
            hint: " and spec.card.version does not bump its major version",
            findings: list(),
        }),
    }
}
