//! The bytes a signed card is published as.
//!
//! Published bytes are the signed card in its ProtoJSON form (fields at their default left out,
//! as the typed card's serde attributes say; the REQUIRED `capabilities` object kept even when
//! empty), serialised with JCS: deterministic, so the same card and signatures always give the
//! same bytes and the same ETag on every replica, and a reader's canonicalisation of them
//! reproduces the signed payload. Values the canonical form drops stay published, as the SDKs
//! serve them: an empty string among a list's entries (`tags: [""]` is a present REQUIRED list
//! to the SDKs' checks), a security requirement naming a scheme without scopes, a scheme whose
//! message is empty (`mtlsSecurityScheme: {}`), a scope with an empty description.

use serde_json::Value;

use super::canonical::{jcs, to_value};
use super::card::AgentCard;
use super::compat::{add_v03_fields, CompatError};

/// Options for what is published beside the v1.0 card.
#[derive(Clone, Copy, Debug, Default)]
pub struct PublishOptions {
    /// Add the v0.3 fields for older clients (see [`super::compat`]).
    pub v03_compat: bool,
}

/// The published JSON value of a signed card.
pub fn published_value(signed: &AgentCard, opts: PublishOptions) -> Result<Value, CompatError> {
    let mut value = to_value(signed);
    if let Value::Object(map) = &mut value {
        // REQUIRED even when it says nothing: clients reject a card without it.
        map.entry("capabilities")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    if opts.v03_compat {
        if let Value::Object(map) = &mut value {
            add_v03_fields(signed, map)?;
        }
    }
    Ok(value)
}

/// The published bytes of a signed card (JCS, no trailing newline).
pub fn published_bytes(signed: &AgentCard, opts: PublishOptions) -> Result<Vec<u8>, CompatError> {
    published_value(signed, opts).map(|v| jcs(&v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::signed_value;
    use serde_json::json;

    /// What the canonical form drops still reaches clients: a scope-less requirement (bearer
    /// auth) must not vanish from the card, nor an mTLS scheme, nor a list of empty tags.
    #[test]
    fn values_the_canonical_form_drops_stay_published() {
        let card: AgentCard = serde_json::from_value(json!({
            "name": "A", "description": "D", "version": "1",
            "supportedInterfaces": [{"url": "https://a.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}, "mtls": {"mtlsSecurityScheme": {}}},
            "securityRequirements": [{"schemes": {"bearer": {}}}],
            "skills": [{"id": "s", "name": "S", "description": "d", "tags": [""], "examples": ["", "x"]}]
        }))
        .unwrap();
        let published = published_value(&card, PublishOptions::default()).unwrap();
        assert_eq!(
            published["securityRequirements"],
            json!([{"schemes": {"bearer": {}}}])
        );
        assert_eq!(
            published["securitySchemes"]["mtls"],
            json!({"mtlsSecurityScheme": {}})
        );
        assert_eq!(published["skills"][0]["tags"], json!([""]));
        assert_eq!(published["skills"][0]["examples"], json!(["", "x"]));
        assert_eq!(published["capabilities"], json!({}));
        // The signature covers the canonical form, which drops them (as the SDKs do).
        let signed = signed_value(&card);
        assert!(signed.get("securityRequirements").is_none());
        assert_eq!(signed["skills"][0]["examples"], json!(["x"]));
    }
}
