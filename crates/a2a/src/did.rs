//! `did:web` documents for the hosts cards and directories are served on, so AI Catalog
//! signers (its `did-web-v1` profile) and DID-aware verifiers resolve the signing keys from
//! `https://<host>/.well-known/did.json` (W3C DID Core, the did:web method).
//!
//! Data flow: the host and the published JWKS → the ES256 keys only (the profile accepts no
//! other algorithm) → one `JsonWebKey2020` verification method per key, id
//! `did:web:<host>#<kid>`, each listed under `assertionMethod` → the document, or none when
//! no ES256 key is published.

use serde_json::{json, Map, Value};

use super::keys::Jwks;

/// The DID of `host` under did:web: lower case, a port's `:` percent-encoded.
pub fn did_web(host: &str) -> String {
    format!("did:web:{}", host.to_ascii_lowercase().replace(':', "%3A"))
}

/// Whether a published JWK is an ES256 key (EC P-256, `alg` ES256 or absent).
fn is_es256(jwk: &Map<String, Value>) -> bool {
    let s = |k: &str| jwk.get(k).and_then(Value::as_str);
    s("kty") == Some("EC") && s("crv") == Some("P-256") && s("alg").is_none_or(|a| a == "ES256")
}

/// The DID document of `host` listing the ES256 keys of `jwks`, or `None` when it has none.
pub fn did_document(host: &str, jwks: &Jwks) -> Option<Value> {
    let did = did_web(host);
    let methods: Vec<Value> = jwks
        .keys
        .iter()
        .filter(|k| is_es256(k))
        .filter_map(|k| {
            let kid = k.get("kid")?.as_str()?;
            let mut public = Map::new();
            for member in ["kty", "crv", "x", "y"] {
                public.insert(member.into(), k.get(member)?.clone());
            }
            Some(json!({
                "id": format!("{did}#{kid}"),
                "type": "JsonWebKey2020",
                "controller": did,
                "publicKeyJwk": public,
            }))
        })
        .collect();
    if methods.is_empty() {
        return None;
    }
    let ids: Vec<Value> = methods.iter().map(|m| m["id"].clone()).collect();
    Some(json!({
        "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/jws-2020/v1"],
        "id": did,
        "verificationMethod": methods,
        "assertionMethod": ids,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{Algorithm, SigningKey};

    #[test]
    fn only_es256_keys_are_listed_each_as_an_assertion_method_of_the_hosts_did() {
        let es = SigningKey::generate(Algorithm::ES256, Some("es")).unwrap();
        let ed = SigningKey::generate(Algorithm::EdDSA, Some("ed")).unwrap();
        let doc = did_document("Cards.Example.com", &Jwks::from_signing_keys([&es, &ed])).unwrap();
        assert_eq!(doc["id"], "did:web:cards.example.com");
        let methods = doc["verificationMethod"].as_array().unwrap();
        assert_eq!(methods.len(), 1);
        assert_eq!(methods[0]["id"], "did:web:cards.example.com#es");
        assert_eq!(methods[0]["publicKeyJwk"]["x"], es.public_jwk()["x"]);
        assert!(methods[0]["publicKeyJwk"].get("d").is_none());
        assert_eq!(
            doc["assertionMethod"],
            json!(["did:web:cards.example.com#es"])
        );
        assert!(did_document("h", &Jwks::from_signing_keys([&ed])).is_none());
        assert_eq!(did_web("localhost:8443"), "did:web:localhost%3A8443");
    }
}
