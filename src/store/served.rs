//! What a serving-only replica (`serve --from-cluster`) keeps of an AgentCard: the status the
//! lease holder wrote about where and what the card serves, its labels and approvals (what
//! directories select it by), and who may read its extended card. About half of what the
//! store of a full `AgentCard` holds per card.
//!
//! Data flow: the card watch deserialises each AgentCard straight into a [`ServedCard`]: serde
//! skips every field it does not declare (the card as written, the rest of the spec, the
//! status fields only kubectl and the controllers read), so they are never allocated, and
//! its metadata is read by [`super::lean_meta`] (no `managedFields` trees) →
//! [`ServedCard::compact`] drops the conditions the card server does not show and the metadata
//! nobody here reads → the reflector store → the card server reads it through [`CardFields`],
//! as it reads the full `AgentCard` the operator's store holds (one view, two stored forms).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::crd::{
    AgentCard, ApprovalStatus, CardCondition, ExtendedAuth, ExtendedCardStatus, ServedRoute,
};

/// The conditions a serving replica keeps: the ones directories list (reachability, drift).
pub const SERVED_CONDITIONS: [&str; 2] = ["BackendReady", "Drifted"];

/// What the card server reads of an AgentCard, whichever form the store keeps it in: the full
/// `AgentCard` (the operator, whose controllers read the rest) or a [`ServedCard`].
pub trait CardFields: Send + Sync {
    /// Name, namespace, uid, labels and deletion time.
    fn meta(&self) -> &ObjectMeta;
    /// `status.served`: where the lease holder routes the card.
    fn served(&self) -> Option<&ServedRoute>;
    /// `status.contentHash`: the hash of the bytes the status confirms.
    fn content_hash(&self) -> Option<&String>;
    /// `status.configMap`: the ConfigMap holding those bytes.
    fn config_map(&self) -> Option<&str>;
    /// `status.url`.
    fn url(&self) -> Option<&str>;
    /// `status.keyId`.
    fn key_id(&self) -> Option<&str>;
    /// `status.conditions` (a [`ServedCard`] keeps [`SERVED_CONDITIONS`] only).
    fn conditions(&self) -> &[CardCondition];
    /// `status.revision`.
    fn revision(&self) -> Option<i64>;
    /// `status.approvals`: directories' verdicts.
    fn approvals(&self) -> &[ApprovalStatus];
    /// `status.extendedCard`: the extended card's ConfigMap and hash.
    fn extended_card(&self) -> Option<&ExtendedCardStatus>;
    /// `spec.extendedCard.auth`: who may read the extended card.
    fn extended_auth(&self) -> Option<&ExtendedAuth>;
}

/// The `CardFields` answers read from `metadata` and `status`, which both stored forms name
/// and type alike (the spec differs: see each `extended_auth`).
macro_rules! status_fields {
    () => {
        fn meta(&self) -> &ObjectMeta {
            &self.metadata
        }

        fn served(&self) -> Option<&ServedRoute> {
            self.status.as_ref()?.served.as_ref()
        }

        fn content_hash(&self) -> Option<&String> {
            self.status.as_ref()?.content_hash.as_ref()
        }

        fn config_map(&self) -> Option<&str> {
            self.status.as_ref()?.config_map.as_deref()
        }

        fn url(&self) -> Option<&str> {
            self.status.as_ref()?.url.as_deref()
        }

        fn key_id(&self) -> Option<&str> {
            self.status.as_ref()?.key_id.as_deref()
        }

        fn conditions(&self) -> &[CardCondition] {
            self.status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default()
        }

        fn revision(&self) -> Option<i64> {
            self.status.as_ref()?.revision
        }

        fn approvals(&self) -> &[ApprovalStatus] {
            self.status
                .as_ref()
                .map(|s| s.approvals.as_slice())
                .unwrap_or_default()
        }

        fn extended_card(&self) -> Option<&ExtendedCardStatus> {
            self.status.as_ref()?.extended_card.as_deref()
        }
    };
}

impl CardFields for AgentCard {
    status_fields!();

    fn extended_auth(&self) -> Option<&ExtendedAuth> {
        self.spec.extended_card.as_ref()?.auth.as_ref()
    }
}

/// An AgentCard as a serving-only replica stores it (see the module doc). Deserialised from
/// an AgentCard's JSON: the fields it does not declare are skipped.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct ServedCard {
    /// Name, namespace, uid, labels and deletion time (the rest goes in [`ServedCard::compact`]).
    #[serde(deserialize_with = "super::lean_meta")]
    pub metadata: ObjectMeta,
    /// `spec.extendedCard.auth` alone.
    #[serde(default)]
    spec: ServedSpec,
    /// The status fields the card server reads.
    #[serde(default)]
    status: Option<ServedStatus>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServedSpec {
    #[serde(default)]
    extended_card: Option<ServedExtended>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
struct ServedExtended {
    // Boxed: most cards have no extended card, and an `ExtendedAuth` is large inline.
    #[serde(default)]
    auth: Option<Box<ExtendedAuth>>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServedStatus {
    #[serde(default)]
    conditions: Vec<CardCondition>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    content_hash: Option<String>,
    #[serde(default)]
    key_id: Option<String>,
    #[serde(default)]
    config_map: Option<String>,
    #[serde(default)]
    served: Option<ServedRoute>,
    #[serde(default)]
    revision: Option<i64>,
    #[serde(default)]
    approvals: Vec<ApprovalStatus>,
    #[serde(default)]
    extended_card: Option<Box<ExtendedCardStatus>>,
}

impl ServedCard {
    /// Trim before the store holds it: of the conditions only [`SERVED_CONDITIONS`], each
    /// without the time and generation nobody here reads; of the metadata what identifies the
    /// card, its labels and its deletion time.
    pub fn compact(&mut self) {
        let meta = &mut self.metadata;
        (meta.annotations, meta.finalizers, meta.managed_fields) = (None, None, None);
        (meta.owner_references, meta.generate_name) = (None, None);
        if let Some(status) = self.status.as_mut() {
            status
                .conditions
                .retain(|c| SERVED_CONDITIONS.contains(&c.type_.as_str()));
            status.conditions.shrink_to_fit();
        }
    }
}

impl CardFields for ServedCard {
    status_fields!();

    fn extended_auth(&self) -> Option<&ExtendedAuth> {
        self.spec.extended_card.as_ref()?.auth.as_deref()
    }
}

// Watched and stored as an AgentCard (same API coordinates).
super::resource_as!(ServedCard, AgentCard);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A card as the lease holder leaves it: every kind of field the card server reads, and
    /// the ones it does not.
    fn full_card() -> serde_json::Value {
        let cond = |t: &str, s: &str, m: &str| {
            json!({"type": t, "status": s, "reason": "R", "message": m,
                   "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": 2})
        };
        json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": "c", "namespace": "n", "uid": "u1", "generation": 2,
                         "labels": {"team": "a"}, "annotations": {"note": "x"},
                         "finalizers": ["agentcard.dev/f"],
                         "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"publish": {"host": "c.example.com"},
                     "card": {"name": "C", "description": "a long description", "skills": [{"id": "s"}]},
                     "extendedCard": {"description": "more", "auth": {"serviceAccount": {"audiences": ["x"]}}}},
            "status": {"contentHash": "h", "configMap": "agentcard-c", "warnings": ["w"],
                       "url": "https://c.example.com/.well-known/agent-card.json", "keyId": "k1",
                       "revision": 3, "skills": "s", "approval": "d=approved", "operator": "op",
                       "routeKind": "Ingress",
                       "extendedCard": {"configMap": "agentcard-c-extended", "contentHash": "e"},
                       "approvals": [{"directory": "d", "state": "Approved", "contentHash": "h"}],
                       "conditions": [cond("Ready", "True", "served at …"),
                                      cond("BackendReady", "False", "no ready endpoint"),
                                      cond("Drifted", "True", "skills differ"),
                                      cond("Signed", "True", "signed with k1")],
                       "served": {"host": "c.example.com", "since": "2026-12-01T00:00:00Z",
                                  "maxAgeSeconds": 300, "publishedAt": "2026-12-01T00:00:00Z",
                                  "extendedPath": "/a2a/extendedAgentCard"}}
        })
    }

    #[test]
    fn a_served_card_answers_what_the_full_card_answers() {
        let full: AgentCard = serde_json::from_value(full_card()).unwrap();
        let mut served: ServedCard = serde_json::from_value(full_card()).unwrap();
        served.compact();
        let (a, b): (&dyn CardFields, &dyn CardFields) = (&full, &served);
        assert_eq!(a.served(), b.served());
        assert!(b.served().is_some_and(|r| r.extended_path.is_some()));
        assert_eq!(a.content_hash(), b.content_hash());
        assert_eq!(a.config_map(), b.config_map());
        assert_eq!(a.url(), b.url());
        assert_eq!(a.key_id(), b.key_id());
        assert_eq!((a.revision(), b.revision()), (Some(3), Some(3)));
        assert_eq!(a.approvals(), b.approvals());
        assert_eq!(b.approvals().len(), 1);
        assert_eq!(a.extended_card(), b.extended_card());
        assert!(b.extended_card().is_some());
        assert_eq!(a.extended_auth(), b.extended_auth());
        assert!(b.extended_auth().is_some());
        let kinds: Vec<&str> = b.conditions().iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(kinds, SERVED_CONDITIONS);
        for c in b.conditions() {
            let same = a.conditions().iter().find(|f| f.type_ == c.type_);
            assert_eq!(same, Some(c), "a kept condition is kept whole");
        }
        let meta = b.meta();
        assert_eq!(
            (&meta.name, &meta.namespace, &meta.uid, &meta.labels),
            (
                &full.metadata.name,
                &full.metadata.namespace,
                &full.metadata.uid,
                &full.metadata.labels
            )
        );
        assert_eq!(
            (&meta.annotations, &meta.finalizers, &meta.managed_fields),
            (&None, &None, &None)
        );
    }

    #[test]
    fn a_served_card_is_half_the_size_of_the_full_card_inline() {
        // The store holds each card as an `Arc`: the inline size is what every card costs
        // before any of its strings.
        let (full, served) = (
            std::mem::size_of::<AgentCard>(),
            std::mem::size_of::<ServedCard>(),
        );
        assert!(2 * served <= full + 64, "{served} bytes against {full}");
    }

    #[test]
    fn a_card_without_status_or_spec_is_stored_empty() {
        let served: ServedCard = serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": "c", "namespace": "n"}, "spec": {"publish": {"host": "h"}}
        }))
        .unwrap();
        assert!(served.served().is_none() && served.extended_auth().is_none());
        assert!(served.conditions().is_empty() && served.approvals().is_empty());
    }
}
