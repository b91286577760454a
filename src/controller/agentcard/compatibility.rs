//! Compatibility: an edit of a published card compared with the card served before it, and
//! `spec.publish.compatibility` applied (pure but for [`Verdicts`]; runs between build and
//! apply, so a refused edit writes nothing and the last good card stays served).
//!
//! Data flow: the served ConfigMap's bytes (the last published card) and the built bytes,
//! when they differ, are read back as cards (the same card signed with other keys is only
//! re-signed: nothing to compare) → [`crate::a2a::breaking::findings`] → `Warn`
//! passes them on for the `Compatible` condition, `Block` refuses any, `RequireMajorVersion`
//! refuses them unless `card.version` bumps its semver major. What a comparison found is held
//! in [`Verdicts`] until a status reporting those bytes lands: a pass that wrote the ConfigMap
//! and then failed is retried, and the retry, finding the new bytes served already, compares
//! nothing; it reports the held verdict instead of the condition from before the edit.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::a2a::breaking::{findings, major_bumped, Finding};
use crate::a2a::card::AgentCard as A2aCard;
use crate::contract::KEY_CARD;
use crate::controller::error::Error;
use crate::crd::{AgentCard, Compatibility};
use crate::store::SeenConfigMap;

use super::build::Built;

/// What comparing an edit with the card served before it found, for the `Compatible`
/// condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compared {
    /// Nothing new: no card was served before, or the bytes served are those the status
    /// reports already. The condition stays as it is.
    Unchanged,
    /// The served bytes change (in this pass, or in an earlier one whose status did not land):
    /// what that breaks for callers, nothing when the edit is compatible.
    Changed(Vec<Finding>),
    /// The served bytes change only in their signatures (the signing keys changed): nothing
    /// a caller sees changes, so the condition stays and no approval is voided.
    Resigned,
    /// The bytes served were published by an earlier pass whose status did not land, and its
    /// comparison is not held here (the operator restarted, or another replica led then):
    /// the card they replaced is gone, so what they broke cannot be said.
    Unknown,
}

/// The comparisons whose status has not landed yet, by card uid: the content hash they
/// published and what it broke. An entry goes when the store shows a status reporting its
/// bytes or the card is deleted; a card holds at most one (the next comparison replaces it).
#[derive(Default)]
pub struct Verdicts {
    pending: Mutex<HashMap<String, (String, Vec<Finding>)>>,
}

impl Verdicts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Vec<Finding>)>> {
        crate::locks::lock(&self.pending)
    }

    /// Hold what publishing `hash` for the card `uid` breaks, until its status lands.
    fn record(&self, uid: &str, hash: &str, found: &[Finding]) {
        self.lock()
            .insert(uid.to_string(), (hash.to_string(), found.to_vec()));
    }

    /// What publishing `hash` broke for the card `uid`, if that comparison is held.
    fn held(&self, uid: &str, hash: &str) -> Option<Vec<Finding>> {
        self.lock()
            .get(uid)
            .filter(|(h, _)| h == hash)
            .map(|(_, found)| found.clone())
    }

    /// The store shows a status reporting `reported` for the card `uid`: its held comparison,
    /// if it is of those bytes, has been said.
    pub fn settle(&self, uid: &str, reported: Option<&str>) {
        let mut pending = self.lock();
        if pending
            .get(uid)
            .is_some_and(|(h, _)| Some(h.as_str()) == reported)
        {
            pending.remove(uid);
        }
    }

    /// The card `uid` is gone.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }
}

/// The breaking changes of `built` against the card `previous` serves, or an error when the
/// card's policy refuses them. A comparison made is held in `verdicts` (see [`Verdicts`]).
pub fn check(
    card: &AgentCard,
    previous: Option<&SeenConfigMap>,
    built: &Built,
    verdicts: &Verdicts,
) -> Result<Compared, Error> {
    let Some(old_bytes) = previous.and_then(|cm| cm.bytes(KEY_CARD)) else {
        return Ok(Compared::Unchanged);
    };
    let uid = || card.uid().unwrap_or_default();
    let hash = &built.content_hash;
    if crate::contract::content_hash(old_bytes) == *hash {
        return Ok(served_already(card, hash, || verdicts.held(&uid(), hash)));
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
        return Ok(Compared::Unchanged);
    };
    let unsigned = |c: &A2aCard| A2aCard {
        signatures: Vec::new(),
        ..c.clone()
    };
    if unsigned(&old) == unsigned(&new) {
        // Held as an edit that broke nothing, should the status not land.
        verdicts.record(&uid(), hash, &[]);
        return Ok(Compared::Resigned);
    }
    let found = findings(&old, &new);
    let list = || found.iter().map(ToString::to_string).collect();
    match card.spec.publish.compatibility.unwrap_or_default() {
        _ if found.is_empty() => {}
        Compatibility::Warn => {}
        Compatibility::Block => {
            return Err(Error::Incompatible {
                policy: "Block",
                hint: "",
                findings: list(),
            })
        }
        Compatibility::RequireMajorVersion if major_bumped(&old.version, &new.version) => {}
        Compatibility::RequireMajorVersion => {
            return Err(Error::Incompatible {
                policy: "RequireMajorVersion",
                hint: " and spec.card.version does not bump its major version",
                findings: list(),
            })
        }
    }
    verdicts.record(&uid(), hash, &found);
    Ok(Compared::Changed(found))
}

/// The built bytes (`hash`) are served already: what the `Compatible` condition should say of
/// them. `held` (the comparison held for them) is asked only when the status does not report
/// them, so the resync of an unchanged card never looks it up.
fn served_already(
    card: &AgentCard,
    hash: &str,
    held: impl FnOnce() -> Option<Vec<Finding>>,
) -> Compared {
    let reported = card.status.as_ref().and_then(|s| s.content_hash.as_deref());
    if reported == Some(hash) {
        return Compared::Unchanged;
    }
    match (reported, held()) {
        (_, Some(found)) => Compared::Changed(found),
        (Some(_), None) => Compared::Unknown,
        (None, None) => Compared::Unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::{Algorithm, SigningKey};
    use crate::controller::agentcard::build::build;
    use crate::controller::agentcard::build::tests::settings;
    use crate::crd::AgentCardStatus;
    use serde_json::json;

    /// The card with `skills`, whose status reports the served bytes `reported`.
    fn card(skills: &[&str], reported: Option<&str>) -> AgentCard {
        let skills: Vec<_> = skills
            .iter()
            .map(|id| json!({"id": id, "name": id, "description": "d", "tags": ["t"]}))
            .collect();
        let mut c: AgentCard = serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": "weather", "namespace": "agents", "uid": "u-1", "generation": 2},
            "spec": {"publish": {"host": "weather.example.com"}, "card": {
                "name": "W", "description": "D", "version": "1",
                "supportedInterfaces": [{"url": "https://weather.example.com/a2a",
                    "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {}, "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"], "skills": skills}}
        }))
        .unwrap();
        c.status = reported.map(|h| AgentCardStatus {
            content_hash: Some(h.to_string()),
            ..Default::default()
        });
        c
    }

    /// `card` built against the ConfigMap `previous` (always with the same key), and that
    /// build as its ConfigMap.
    fn built(card: &AgentCard, previous: Option<&SeenConfigMap>) -> (Built, SeenConfigMap) {
        static KEY: std::sync::OnceLock<SigningKey> = std::sync::OnceLock::new();
        let key = KEY.get_or_init(|| SigningKey::generate(Algorithm::EdDSA, Some("k1")).unwrap());
        let now = "2026-01-01T00:00:00Z".parse().unwrap();
        let b = build(
            card,
            std::slice::from_ref(key),
            &settings(),
            previous,
            now,
            now,
        )
        .unwrap();
        let cm = SeenConfigMap::from(b.configmap.clone());
        (b, cm)
    }

    #[test]
    fn an_edit_is_compared_with_the_card_served_before_it() {
        let verdicts = Verdicts::default();
        let (first, served) = built(&card(&["a", "b"], None), None);
        let first_card = card(&["a", "b"], Some(&first.content_hash));
        // Nothing served yet: nothing to compare.
        assert_eq!(
            check(&first_card, None, &first, &verdicts).unwrap(),
            Compared::Unchanged
        );
        // The same bytes the status reports: nothing new.
        assert_eq!(
            check(&first_card, Some(&served), &first, &verdicts).unwrap(),
            Compared::Unchanged
        );
        // A skill removed breaks callers; one added does not.
        let removed = card(&["a"], Some(&first.content_hash));
        let (b, _) = built(&removed, Some(&served));
        let Compared::Changed(found) = check(&removed, Some(&served), &b, &verdicts).unwrap()
        else {
            panic!("not compared");
        };
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, "$.skills[1]");
        let added = card(&["a", "b", "c"], Some(&first.content_hash));
        let (b, _) = built(&added, Some(&served));
        assert_eq!(
            check(&added, Some(&served), &b, &verdicts).unwrap(),
            Compared::Changed(Vec::new())
        );
        // Block refuses the breaking edit, and holds nothing for it.
        let mut blocked = removed.clone();
        blocked.spec.publish.compatibility = Some(Compatibility::Block);
        let (b, _) = built(&blocked, Some(&served));
        verdicts.forget("u-1");
        assert!(matches!(
            check(&blocked, Some(&served), &b, &verdicts),
            Err(Error::Incompatible {
                policy: "Block",
                ..
            })
        ));
        assert!(verdicts.lock().is_empty());
    }

    #[test]
    fn the_same_card_signed_with_other_keys_is_only_resigned() {
        let verdicts = Verdicts::default();
        let (first, served) = built(&card(&["a"], None), None);
        let same = card(&["a"], Some(&first.content_hash));
        let other = SigningKey::generate(Algorithm::EdDSA, Some("k2")).unwrap();
        let now = "2026-01-01T00:00:00Z".parse().unwrap();
        let resigned = build(&same, &[other], &settings(), Some(&served), now, now).unwrap();
        assert_ne!(resigned.content_hash, first.content_hash);
        assert_eq!(
            check(&same, Some(&served), &resigned, &verdicts).unwrap(),
            Compared::Resigned
        );
    }

    #[test]
    fn a_retry_after_the_status_was_lost_reports_what_the_written_edit_broke() {
        let verdicts = Verdicts::default();
        let (first, served) = built(&card(&["a", "b"], None), None);
        let h1 = first.content_hash.clone();
        // The edit is compared and its ConfigMap written; then the pass fails before its
        // status lands: the status still reports the first card's bytes.
        let edit = card(&["a"], Some(&h1));
        let (b, now_served) = built(&edit, Some(&served));
        let compared = check(&edit, Some(&served), &b, &verdicts).unwrap();
        assert!(matches!(&compared, Compared::Changed(f) if f.len() == 1));
        // The retry finds the new bytes served already, and reports the same comparison.
        let (again, _) = built(&edit, Some(&now_served));
        assert_eq!(again.content_hash, b.content_hash, "the bytes are reused");
        assert_eq!(
            check(&edit, Some(&now_served), &again, &verdicts).unwrap(),
            compared
        );
        // A status that does not report these bytes settles nothing.
        verdicts.settle("u-1", Some(&h1));
        assert_eq!(
            check(&edit, Some(&now_served), &again, &verdicts).unwrap(),
            compared
        );
        // Once the status reporting them lands, the condition it wrote stands.
        verdicts.settle("u-1", Some(&b.content_hash));
        assert!(verdicts.lock().is_empty());
        let reported = card(&["a"], Some(&b.content_hash));
        assert_eq!(
            check(&reported, Some(&now_served), &again, &verdicts).unwrap(),
            Compared::Unchanged
        );
        // A process that never held the comparison (restarted between the ConfigMap and the
        // status) cannot say what the edit broke, and says so.
        assert_eq!(
            check(&edit, Some(&now_served), &again, &Verdicts::default()).unwrap(),
            Compared::Unknown
        );
        // A card whose status reports no bytes at all has nothing to contradict.
        let unreported = card(&["a"], None);
        assert_eq!(
            check(&unreported, Some(&now_served), &again, &Verdicts::default()).unwrap(),
            Compared::Unchanged
        );
    }
}
