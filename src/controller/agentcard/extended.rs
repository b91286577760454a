//! The extended card stage (pure, after [`super::build`]): with `spec.extendedCard`, the
//! extended card ([`super::card::extended_card`]: the effective public card with the additions
//! over it) signed by the same keys as the public card, and the ConfigMap
//! `extended-agentcard-<name>` holding its exact bytes, owned by the card, for the agent to
//! mount.
//!
//! Why a ConfigMap of the card's namespace, not a Secret: everything in the extended card is
//! in the AgentCard's `spec.extendedCard` already, which whoever may read the AgentCard reads
//! (the `view` role of the namespace); a Secret would hide nothing more, and would need the
//! operator to write (and so, through the responses of its writes, read) Secrets in every
//! namespace. A ConfigMap needs no permission the operator does not hold for the public card.
//! Like the public card's, it is written before anything that advertises it: [`super::apply`]
//! writes it before the public ConfigMap, so no public card is ever newer than its extended
//! card.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use serde_json::json;

use super::build::{data_len, sign_published, Marks};
use super::card::{effective_card, extended_card};
use crate::a2a::SigningKey;
use crate::contract::{
    extended_configmap_name, ANN_CARD, ANN_CONTENT_HASH, ANN_KEY_ID, CONTENT_EXTENDED,
    KEY_EXTENDED, LABEL_CONTENT,
};
use crate::controller::error::Error;
use crate::crd::AgentCard;
use crate::store::SeenConfigMap;

/// The extended card as written.
#[derive(Clone, Debug)]
pub struct BuiltExtended {
    /// The ConfigMap with its bytes.
    pub configmap: ConfigMap,
    /// Hash of the bytes.
    pub content_hash: String,
}

impl BuiltExtended {
    /// The size of the signed extended card, in bytes.
    pub fn served_len(&self) -> usize {
        data_len(&self.configmap, KEY_EXTENDED)
    }
}

/// The extended card of `card` signed by `signers` (reusing the signatures of `previous`, its
/// ConfigMap as it is now, where they hold, so an unchanged card keeps its bytes), or `None`
/// without `spec.extendedCard`. The card passed validation, which checked the extended card.
pub fn build(
    card: &AgentCard,
    signers: &[SigningKey],
    previous: Option<&SeenConfigMap>,
) -> Result<Option<BuiltExtended>, Error> {
    let Some(extended) = extended_card(card, &effective_card(card)) else {
        return Ok(None);
    };
    let extended = extended.map_err(Error::InvalidSpec)?;
    let previous = previous
        .and_then(|cm| cm.bytes(KEY_EXTENDED))
        .map(|b| &b[..]);
    let signed = sign_published(card, &extended, signers, previous)?;
    let marks = Marks::of(card);
    let mut labels = marks.labels.clone();
    labels[LABEL_CONTENT] = json!(CONTENT_EXTENDED);
    let configmap = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": extended_configmap_name(&card.name_any()),
            "namespace": card.namespace().unwrap_or_default(),
            "labels": labels,
            "annotations": {
                ANN_CARD: marks.card_ref,
                ANN_CONTENT_HASH: signed.hash,
                ANN_KEY_ID: signed.key_id,
            },
            "ownerReferences": marks.owner,
        },
        "data": {KEY_EXTENDED: signed.body},
    }))
    .map_err(|e| Error::Internal(format!("ConfigMap: {e}")))?;
    Ok(Some(BuiltExtended {
        configmap,
        content_hash: signed.hash,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::card::AgentCard as A2aCard;
    use crate::a2a::jws::verify_card;
    use crate::a2a::{Algorithm, Jwks};
    use crate::contract::{content_hash, KEY_CARD};
    use crate::controller::agentcard::build::tests::{self as build_tests, now, settings};

    fn card(extended: serde_json::Value) -> AgentCard {
        build_tests::card(json!({"spec": {"extendedCard": extended}}))
    }

    #[test]
    fn the_extended_card_is_the_signed_public_card_and_more_and_keeps_its_bytes() {
        let keys = vec![SigningKey::generate(Algorithm::ES256, Some("es")).unwrap()];
        let c = card(json!({
            "description": "D, at length",
            "skills": [{"id": "archive", "name": "Archive", "description": "a", "tags": ["t"]}]
        }));
        let public =
            crate::controller::agentcard::build::build(&c, &keys, &settings(), None, now(), now())
                .unwrap();
        let built = build(&c, &keys, None).unwrap().unwrap();
        let cm = &built.configmap;
        assert_eq!(
            cm.metadata.name.as_deref(),
            Some("extended-agentcard-weather")
        );
        assert_eq!(cm.metadata.namespace.as_deref(), Some("agents"));
        assert_eq!(
            cm.metadata.labels.as_ref().unwrap()[LABEL_CONTENT],
            CONTENT_EXTENDED
        );
        let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("u-1", Some(true)));
        let body = &cm.data.as_ref().unwrap()[KEY_EXTENDED];
        assert_eq!(built.content_hash, content_hash(body.as_bytes()));
        assert_eq!(
            cm.metadata.annotations.as_ref().unwrap()[ANN_CONTENT_HASH],
            built.content_hash
        );

        // Both cards advertise the extended card; the extended one holds the public skills
        // and the added one; both verify with the same keys.
        let jwks = Jwks::from_signing_keys(&keys);
        let ext = A2aCard::from_json_lenient(body.as_bytes()).unwrap();
        let pub_body = &public.configmap.data.as_ref().unwrap()[KEY_CARD];
        let pubcard = A2aCard::from_json_lenient(pub_body.as_bytes()).unwrap();
        assert_eq!(pubcard.capabilities.extended_agent_card, Some(true));
        assert_eq!(ext.capabilities.extended_agent_card, Some(true));
        assert_eq!(ext.description, "D, at length");
        let ids: Vec<&str> = ext.skills.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["f", "archive"]);
        verify_card(&ext, &jwks).unwrap();
        verify_card(&pubcard, &jwks).unwrap();
        assert!(crate::a2a::extended::missing(&pubcard, &ext).is_empty());

        // Rebuilt over its own ConfigMap: the same (randomised ECDSA) bytes.
        let again = build(&c, &keys, Some(&SeenConfigMap::from(cm.clone())))
            .unwrap()
            .unwrap();
        assert_eq!(again.configmap.data, cm.data);
        // Without spec.extendedCard: nothing, and the public card no longer advertises it.
        let mut plain = c.clone();
        plain.spec.extended_card = None;
        assert!(build(&plain, &keys, None).unwrap().is_none());
        let public = crate::controller::agentcard::build::build(
            &plain,
            &keys,
            &settings(),
            None,
            now(),
            now(),
        )
        .unwrap();
        let pub_body = &public.configmap.data.as_ref().unwrap()[KEY_CARD];
        assert!(!pub_body.contains("extendedAgentCard"), "{pub_body}");
    }
}
