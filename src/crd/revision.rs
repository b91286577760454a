//! The data of a card's revision (a `ControllerRevision` in the card's namespace, owned by the
//! card): what the lease holder writes ([`crate::controller::agentcard::revisions`]) and the
//! directory and the CLI read.

use k8s_openapi::api::apps::v1::ControllerRevision;
use serde::{Deserialize, Serialize};

use super::AgentCardSpec;

/// Label naming the card (by uid) a revision belongs to.
pub const LABEL_CARD_UID: &str = "agentcard.dev/card-uid";
/// Label naming the card (by name, when it fits a label value) a revision belongs to.
pub const LABEL_CARD: &str = "agentcard.dev/card";
/// Annotation holding a revision's content hash.
pub const ANN_CONTENT_HASH: &str = "agentcard.dev/content-hash";

/// What a revision's `data` holds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionData {
    /// The content hash (the served bytes' ETag).
    pub content_hash: String,
    /// When the bytes were first published (RFC 3339).
    pub published_at: String,
    /// The exact bytes served, signatures included.
    pub document: String,
    /// The AgentCard spec that made them (applying it again rolls back).
    pub spec: AgentCardSpec,
    /// The content hash of the revision before, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// What broke for callers against the revision before (empty: nothing, or not compared).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// Whether the edit from the revision before was compared.
    #[serde(default)]
    pub compared: bool,
}

impl RevisionData {
    /// The data of `rev`, if it is one of ours.
    pub fn of(rev: &ControllerRevision) -> Option<RevisionData> {
        serde_json::from_value(rev.data.as_ref()?.0.clone()).ok()
    }
}
