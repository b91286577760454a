//! Detached JWS signatures over the canonical card (A2A v1.0 §8.4).
//!
//! Signing: canonical bytes of the card → for each key, protected header
//! `{"alg","jku"?,"kid","typ":"JOSE"}` serialised with sorted keys and no whitespace (the
//! bytes the Python SDK writes, so deterministic algorithms reproduce its signatures exactly)
//! → signing input `b64url(header) "." b64url(payload)` → one `signatures[]` entry per key.
//!
//! Verification: the card is parsed leniently (unknown fields dropped, as the SDKs do), its
//! canonical bytes recomputed, and each signature checked against the key its `kid` names in a
//! JWKS; one valid signature suffices and the result says which key made it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use josekit::jwk::Jwk;
use serde_json::{Map, Value};

use super::canonical::{canonical_bytes, jcs};
use super::card::{AgentCard, AgentCardSignature};
use super::keys::{Algorithm, Jwks, KeyError, SigningKey};

/// The `typ` every A2A card signature carries (the JS SDK rejects signatures without it).
pub const TYP: &str = "JOSE";

/// What verification found when it succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Index of the signature that verified.
    pub index: usize,
    /// Key id that verified it.
    pub kid: String,
    /// Its algorithm.
    pub alg: Algorithm,
}

/// Why a card did not verify.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The card carries no signature at all.
    #[error("the card has no signatures")]
    Unsigned,
    /// Every signature failed; one reason per signature.
    #[error("no signature verifies: {}", .0.join("; "))]
    NoValidSignature(Vec<String>),
}

/// The protected header of a signature, base64url encoded; `x5c` (the signing key's
/// certificate chain, base64 DER, leaf first) only when the key has one.
pub fn protected_header(alg: Algorithm, kid: &str, jku: Option<&str>, x5c: &[String]) -> String {
    let mut header = Map::new();
    header.insert("alg".into(), Value::String(alg.name().into()));
    if let Some(jku) = jku {
        header.insert("jku".into(), Value::String(jku.into()));
    }
    header.insert("kid".into(), Value::String(kid.into()));
    header.insert("typ".into(), Value::String(TYP.into()));
    if !x5c.is_empty() {
        header.insert(
            "x5c".into(),
            Value::Array(x5c.iter().cloned().map(Value::String).collect()),
        );
    }
    // JCS sorts keys and drops whitespace: for ASCII values this is exactly what PyJWT writes.
    URL_SAFE_NO_PAD.encode(jcs(&Value::Object(header)))
}

pub(crate) fn signing_input(protected: &str, payload_b64: &str) -> Vec<u8> {
    let mut input = Vec::with_capacity(protected.len() + 1 + payload_b64.len());
    input.extend_from_slice(protected.as_bytes());
    input.push(b'.');
    input.extend_from_slice(payload_b64.as_bytes());
    input
}

/// Sign `card` with every key: returns the card with `signatures` replaced, one per key.
pub fn sign_card(
    card: &AgentCard,
    keys: &[SigningKey],
    jku: Option<&str>,
) -> Result<AgentCard, KeyError> {
    sign_card_reusing(card, keys, jku, &[])
}

/// Like [`sign_card`], but keeps a signature from `previous` when it was made by the same
/// key with the same header over the same canonical bytes. ECDSA signatures are randomised:
/// reusing a still-valid one keeps the published bytes (and so the ETag) stable when an
/// unchanged card is signed again, on every replica and across restarts.
pub fn sign_card_reusing(
    card: &AgentCard,
    keys: &[SigningKey],
    jku: Option<&str>,
    previous: &[AgentCardSignature],
) -> Result<AgentCard, KeyError> {
    let payload_b64 = URL_SAFE_NO_PAD.encode(canonical_bytes(card));
    let mut signatures = Vec::with_capacity(keys.len());
    for key in keys {
        let protected = protected_header(key.alg(), key.kid(), jku, key.x5c());
        let input = signing_input(&protected, &payload_b64);
        let reused = previous.iter().find(|s| {
            s.protected == protected
                && s.header.is_none()
                && signature_bytes(&s.signature).is_some_and(|sig| key.verifies(&input, &sig))
        });
        let signature = match reused {
            Some(s) => s.signature.clone(),
            None => URL_SAFE_NO_PAD.encode(key.sign(&input)?),
        };
        signatures.push(AgentCardSignature {
            protected,
            signature,
            header: None,
        });
    }
    let mut signed = card.clone();
    signed.signatures = signatures;
    Ok(signed)
}

fn jwk_of(map: &Map<String, Value>) -> Option<Jwk> {
    Jwk::from_map(map.clone()).ok()
}

/// The raw bytes of a JWS signature in base64url (padding tolerated), if it is that.
fn signature_bytes(signature_b64: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD
        .decode(signature_b64.trim_end_matches('='))
        .ok()
}

/// Why one signature does not verify (each is said as `signatures[i]: ...`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureProblem {
    /// The protected header is not base64url.
    #[error("protected header is not base64url")]
    HeaderNotBase64,
    /// The protected header is not a JSON object.
    #[error("protected header is not a JSON object")]
    HeaderNotObject,
    /// The protected header names no algorithm.
    #[error("protected header has no alg")]
    NoAlg,
    /// An algorithm not accepted.
    #[error("algorithm {0:?} is not accepted")]
    Alg(String),
    /// The key id is not in the JWKS.
    #[error("key {0:?} is not in the JWKS")]
    UnknownKid(String),
    /// The JWKS is empty.
    #[error("the JWKS has no keys")]
    EmptyJwks,
    /// No key fits the algorithm.
    #[error("no key of the JWKS fits the algorithm")]
    NoFittingKey,
    /// A key of the JWKS is malformed.
    #[error("the JWKS key is malformed")]
    MalformedKey,
    /// The signature is not base64url.
    #[error("signature is not base64url")]
    SignatureNotBase64,
    /// The key cannot verify.
    #[error("unusable key: {0}")]
    UnusableKey(String),
    /// The signature is not the card's.
    #[error("signature does not match the card")]
    Mismatch,
    /// What the key its header names made of it.
    #[error("key {kid:?} ({alg}): {problem}")]
    WithKey {
        /// The key id.
        kid: String,
        /// The algorithm.
        alg: Algorithm,
        /// What went wrong.
        problem: Box<SignatureProblem>,
    },
}

fn verify_one(
    alg: Algorithm,
    jwk: &Option<Jwk>,
    input: &[u8],
    signature_b64: &str,
) -> Result<(), SignatureProblem> {
    let jwk = jwk.as_ref().ok_or(SignatureProblem::MalformedKey)?;
    let sig = signature_bytes(signature_b64).ok_or(SignatureProblem::SignatureNotBase64)?;
    let verifier = alg
        .verifier(jwk)
        .map_err(|e| SignatureProblem::UnusableKey(e.to_string()))?;
    verifier
        .verify(input, &sig)
        .map_err(|_| SignatureProblem::Mismatch)
}

/// Verify `card` against the keys of `jwks`: Ok with the first signature that verifies.
pub fn verify_card(card: &AgentCard, jwks: &Jwks) -> Result<Verified, VerifyError> {
    if card.signatures.is_empty() {
        return Err(VerifyError::Unsigned);
    }
    let payload_b64 = URL_SAFE_NO_PAD.encode(canonical_bytes(card));
    let mut reasons = Vec::new();
    for (index, sig) in card.signatures.iter().enumerate() {
        match verify_signature(sig, &payload_b64, jwks) {
            Ok((kid, alg)) => return Ok(Verified { index, kid, alg }),
            Err(reason) => reasons.push(format!("signatures[{index}]: {reason}")),
        }
    }
    Err(VerifyError::NoValidSignature(reasons))
}

fn verify_signature(
    sig: &AgentCardSignature,
    payload_b64: &str,
    jwks: &Jwks,
) -> Result<(String, Algorithm), SignatureProblem> {
    let header_bytes = URL_SAFE_NO_PAD
        .decode(sig.protected.trim_end_matches('='))
        .map_err(|_| SignatureProblem::HeaderNotBase64)?;
    let header: Map<String, Value> =
        serde_json::from_slice(&header_bytes).map_err(|_| SignatureProblem::HeaderNotObject)?;
    let alg_name = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or(SignatureProblem::NoAlg)?;
    let alg: Algorithm = alg_name
        .parse()
        .map_err(|_| SignatureProblem::Alg(alg_name.to_string()))?;
    let kid = header
        .get("kid")
        .or_else(|| sig.header.as_ref().and_then(|h| h.get("kid")))
        .and_then(Value::as_str);
    let input = signing_input(&sig.protected, payload_b64);
    let candidates: Vec<&Map<String, Value>> = match kid {
        Some(kid) => jwks.find(kid).into_iter().collect(),
        None => jwks.keys.iter().collect(),
    };
    if candidates.is_empty() {
        return Err(match kid {
            Some(kid) => SignatureProblem::UnknownKid(kid.to_string()),
            None => SignatureProblem::EmptyJwks,
        });
    }
    let mut last = SignatureProblem::NoFittingKey;
    for key in candidates {
        let kty = key.get("kty").and_then(Value::as_str).unwrap_or_default();
        let crv = key.get("crv").and_then(Value::as_str);
        let key_alg = key.get("alg").and_then(Value::as_str);
        if !alg.fits(kty, crv) || key_alg.is_some_and(|a| a != alg.name()) {
            continue;
        }
        match verify_one(alg, &jwk_of(key), &input, &sig.signature) {
            Ok(()) => {
                let kid = key
                    .get("kid")
                    .and_then(Value::as_str)
                    .or(kid)
                    .unwrap_or_default()
                    .to_string();
                return Ok((kid, alg));
            }
            Err(e) => last = e,
        }
    }
    Err(match kid {
        Some(kid) => SignatureProblem::WithKey {
            kid: kid.to_string(),
            alg,
            problem: Box::new(last),
        },
        None => last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(description: &str) -> AgentCard {
        serde_json::from_value(serde_json::json!({
            "name": "A", "description": description, "version": "1",
            "supportedInterfaces": [{"url": "https://a.test/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]
        }))
        .unwrap()
    }

    fn raw(signature: &AgentCardSignature) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(&signature.signature).unwrap()
    }

    #[test]
    fn a_previous_signature_is_reused_only_when_the_key_verifies_it_over_this_card() {
        let key = SigningKey::generate(Algorithm::ES256, Some("k")).unwrap();
        let keys = [key.clone()];
        let first = sign_card(&card("one"), &keys, Some("https://a.test/jwks")).unwrap();
        // ECDSA signatures are randomised: an equal one was reused, not made again.
        let again = sign_card_reusing(
            &card("one"),
            &keys,
            Some("https://a.test/jwks"),
            &first.signatures,
        )
        .unwrap();
        assert_eq!(again.signatures, first.signatures);

        // The same header over another card's payload does not verify here: signed afresh.
        let other = sign_card(&card("two"), &keys, Some("https://a.test/jwks")).unwrap();
        let forged = vec![AgentCardSignature {
            protected: first.signatures[0].protected.clone(),
            ..other.signatures[0].clone()
        }];
        let fresh =
            sign_card_reusing(&card("one"), &keys, Some("https://a.test/jwks"), &forged).unwrap();
        assert_ne!(fresh.signatures[0].signature, forged[0].signature);
        let payload = URL_SAFE_NO_PAD.encode(canonical_bytes(&card("one")));
        let input = signing_input(&fresh.signatures[0].protected, &payload);
        assert!(key.verifies(&input, &raw(&fresh.signatures[0])));
        assert!(!key.verifies(&input, &raw(&forged[0])));

        // Another key's signature, even under this key's header, is not this key's.
        let stranger = SigningKey::generate(Algorithm::ES256, Some("k")).unwrap();
        let theirs = sign_card(&card("one"), &[stranger], Some("https://a.test/jwks")).unwrap();
        assert_eq!(
            theirs.signatures[0].protected,
            first.signatures[0].protected
        );
        let mine = sign_card_reusing(
            &card("one"),
            &keys,
            Some("https://a.test/jwks"),
            &theirs.signatures,
        )
        .unwrap();
        assert_ne!(mine.signatures, theirs.signatures);
        assert!(key.verifies(&input, &raw(&mine.signatures[0])));
    }
}
