//! An AgentCard's status conditions as the stores hold them: the same JSON and schema as
//! Kubernetes' `Condition`, with `type`, `status` and `reason` kept as [`Word`]s.
//!
//! Every replica holds every card, and with it three or more conditions: four strings each,
//! of which three come from a small fixed vocabulary (`Ready`, `True`, `Published`...). A
//! [`Word`] of that vocabulary points at the static string instead of a heap copy; with the
//! status's route kind and origin, about 110 bytes a card less (11 MB at 100,000 cards). Any
//! other word is kept as it came.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// The words conditions are made of, and the values of `status.routeKind` and `status.origin`:
/// the statuses, the types and the common reasons the operator writes (a test of the controller checks that every condition type it names is
/// here). A word not here still works; it takes a heap copy.
pub const VOCABULARY: &[&str] = &[
    // Statuses.
    "True",
    "False",
    "Unknown",
    // Types.
    "Ready",
    "Signed",
    "Published",
    "Routed",
    "Drifted",
    "Conflict",
    "Successor",
    "SourceReachable",
    "Compatible",
    "BackendReady",
    // Reasons besides the types above.
    "InvalidSpec",
    "HostNotAllowed",
    "HostConflict",
    "NameInUse",
    "NamespaceCardLimit",
    "NamespaceByteBudget",
    "CardTooLarge",
    "KeyUnavailable",
    "JwksPending",
    "SourceUnavailable",
    "SigningFailed",
    "InternalError",
    "BreakingChange",
    "Retired",
    "WriteFailed",
    "EndpointsReady",
    "Fetched",
    "InSync",
    "NotCompared",
    "SuccessorFound",
    "Unreachable",
    // `status.routeKind` and `status.origin`.
    "Ingress",
    "HTTPRoute",
    "None",
    "Declared",
    "Discovered",
    "Claimed",
];

/// The vocabulary's own string for `word`, if it has it.
fn known(word: &str) -> Option<&'static str> {
    VOCABULARY.iter().copied().find(|w| *w == word)
}

/// A condition's `type`, `status` or `reason` (or a card's route kind or origin): a static
/// string of [`VOCABULARY`], or a word of its own.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Word(Cow<'static, str>);

impl Word {
    /// `word`, as the vocabulary's own string when it has it.
    pub fn new(word: &str) -> Word {
        match known(word) {
            Some(known) => Word(Cow::Borrowed(known)),
            None => Word(Cow::Owned(word.to_owned())),
        }
    }

    /// The word.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the word is the vocabulary's (no heap copy).
    pub fn is_known(&self) -> bool {
        matches!(self.0, Cow::Borrowed(_))
    }
}

impl std::ops::Deref for Word {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Word {
    fn from(word: &str) -> Word {
        Word::new(word)
    }
}

impl From<String> for Word {
    fn from(word: String) -> Word {
        match known(&word) {
            Some(known) => Word(Cow::Borrowed(known)),
            None => Word(Cow::Owned(word)),
        }
    }
}

impl PartialEq<str> for Word {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Word {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Word {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Word> for &str {
    fn eq(&self, other: &Word) -> bool {
        *self == other.as_str()
    }
}

impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl fmt::Debug for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Word {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Word, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Word;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            // A word of the vocabulary is never copied.
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Word, E> {
                Ok(Word::new(v))
            }

            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Word, E> {
                Ok(Word::from(v))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// One condition of an AgentCard's status: Kubernetes' `Condition` (same fields, JSON and
/// schema), its `type`, `status` and `reason` held as [`Word`]s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CardCondition {
    /// When the condition last changed its status.
    pub last_transition_time: Time,
    /// Details for people (may be empty).
    #[serde(default)]
    pub message: String,
    /// The `metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Why, in CamelCase.
    #[serde(default)]
    pub reason: Word,
    /// `True`, `False` or `Unknown`.
    pub status: Word,
    /// The condition's type (CamelCase).
    #[serde(rename = "type")]
    pub type_: Word,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_of_the_vocabulary_takes_no_copy_and_any_other_is_kept() {
        let known: Word = serde_json::from_str("\"Ready\"").unwrap();
        assert!(known.is_known());
        assert_eq!(known, "Ready");
        let other: Word = serde_json::from_str("\"SomethingElse\"").unwrap();
        assert!(!other.is_known());
        assert_eq!(other.as_str(), "SomethingElse");
        // An escaped string reaches the visitor as an owned String.
        let escaped: Word = serde_json::from_str("\"Tru\\u0065\"").unwrap();
        assert!(escaped.is_known());
        assert_eq!(serde_json::to_string(&escaped).unwrap(), "\"True\"");
    }

    #[test]
    fn a_card_condition_reads_and_writes_what_kubernetes_condition_does() {
        let json = serde_json::json!({
            "type": "Ready", "status": "True", "reason": "Published", "message": "served",
            "observedGeneration": 3, "lastTransitionTime": "2026-12-07T03:41:37Z"
        });
        let ours: CardCondition = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(ours.message, "served");
        assert_eq!(ours.observed_generation, Some(3));
        let theirs: k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition =
            serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&ours).unwrap(), json);
        assert_eq!(serde_json::to_value(&theirs).unwrap(), json);
        assert!(ours.type_.is_known() && ours.status.is_known() && ours.reason.is_known());
    }
}
