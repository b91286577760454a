//! The official SDKs' test vectors judge the A2A core: canonical bytes, deterministic
//! signatures reproduced exactly, every SDK signature verified, every tampered card rejected.

mod support;

use agentcard_operator::a2a::canonical::canonical_bytes;
use agentcard_operator::a2a::jws::{sign_card, verify_card};
use agentcard_operator::a2a::{AgentCard, Jwks, SigningKey};
use serde_json::Value;

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(support::vectors().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn card(rel: &str) -> AgentCard {
    AgentCard::from_json_lenient(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn jwks() -> Jwks {
    Jwks::from_slice(&read("keys/jwks.json")).unwrap()
}

fn entries() -> Vec<Value> {
    let m = support::manifest();
    let cards = m["cards"].as_array().unwrap().clone();
    assert!(cards.len() >= 4, "the manifest lists the vector cards");
    cards
}

#[test]
fn canonical_bytes_match_the_sdks_exactly() {
    for e in entries() {
        let input = e["input"].as_str().unwrap();
        let expected = read(e["canonical_payload"].as_str().unwrap());
        let ours = canonical_bytes(&card(input));
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&expected),
            "canonical form of {input}"
        );
        // Signed variants canonicalise to the same bytes (signatures are not signed).
        for signed in ["signed", "signed_by_js"] {
            let rel = e[signed].as_str().unwrap();
            assert_eq!(
                canonical_bytes(&card(rel)),
                expected,
                "canonical form of {rel}"
            );
        }
    }
}

#[test]
fn deterministic_signatures_are_reproduced_byte_for_byte() {
    let jku = support::manifest()["jku"].as_str().unwrap().to_string();
    for kid in ["test-ed25519-1", "test-rs256-1"] {
        let key =
            SigningKey::from_bytes(&read(&format!("keys/{kid}.private.jwk.json")), None, None)
                .unwrap();
        assert_eq!(key.kid(), kid);
        for e in entries() {
            let ours = sign_card(
                &card(e["input"].as_str().unwrap()),
                std::slice::from_ref(&key),
                Some(&jku),
            )
            .unwrap();
            let theirs = card(e["signed"].as_str().unwrap());
            let expected = theirs
                .signatures
                .iter()
                .find(|s| s.protected == ours.signatures[0].protected)
                .unwrap_or_else(|| panic!("{kid}: no SDK signature with our protected header"));
            assert_eq!(
                ours.signatures[0].signature, expected.signature,
                "{kid} over {}",
                e["name"]
            );
        }
    }
}

#[test]
fn every_sdk_signature_verifies_with_the_expected_key() {
    let jwks = jwks();
    for e in entries() {
        for (file_key, expect_key) in [
            ("signed", "signed_expect"),
            ("signed_by_js", "signed_by_js_expect"),
        ] {
            let rel = e[file_key].as_str().unwrap();
            let c = card(rel);
            let v = verify_card(&c, &jwks).unwrap_or_else(|err| panic!("{rel}: {err}"));
            assert!(
                e[expect_key].get(&v.kid).is_some(),
                "{rel} verified by unexpected {}",
                v.kid
            );
            // Each signature alone verifies too, so no key is carried by another.
            for (i, sig) in c.signatures.iter().enumerate() {
                let mut one = c.clone();
                one.signatures = vec![sig.clone()];
                let v = verify_card(&one, &jwks)
                    .unwrap_or_else(|err| panic!("{rel} signature {i}: {err}"));
                assert_eq!(e[expect_key][&v.kid], "valid", "{rel} signature {i}");
            }
        }
    }
}

#[test]
fn every_tampered_card_is_rejected() {
    let jwks = jwks();
    for e in entries() {
        let rel = e["tampered"].as_str().unwrap();
        let err = verify_card(&card(rel), &jwks).expect_err(rel);
        assert!(err.to_string().contains("does not match"), "{rel}: {err}");
    }
}

#[test]
fn the_sdk_known_gaps_behave_as_the_sdks_do() {
    // Scope-less requirements are dropped before signing by both SDKs, so removing one does not
    // break the signature: we must agree, or our cards would not verify in their clients.
    verify_card(&card("cards/v1-full.gap-unsigned-edits.json"), &jwks()).unwrap();
    // The Python SDK's dual-format output (v0.3 fields beside v1.0) verifies once the unknown
    // fields are dropped, as lenient readers do.
    verify_card(
        &card("cards/v1-full.served-dual-format-by-a2a-sdk.json"),
        &jwks(),
    )
    .unwrap();
}

#[test]
fn a_card_without_signatures_is_reported_unsigned() {
    let err = verify_card(&card("cards/v1-minimal.card.json"), &jwks()).unwrap_err();
    assert_eq!(err.to_string(), "the card has no signatures");
}

#[test]
fn a_key_missing_from_the_jwks_is_named() {
    let mut jwks = jwks();
    jwks.keys.retain(|k| k["kid"] != "test-es256-1");
    let mut c = card("cards/v1-minimal.signed.json");
    c.signatures.truncate(1);
    let err = verify_card(&c, &jwks).unwrap_err().to_string();
    assert!(
        err.contains("key \"test-es256-1\" is not in the JWKS"),
        "{err}"
    );
}
