//! Properties of signing: sign → verify round-trips for any card and key, and changing any
//! signed value breaks verification.

mod support;

use std::sync::LazyLock;

use agentcard_operator::a2a::canonical::signed_value;
use agentcard_operator::a2a::jws::{sign_card, verify_card};
use agentcard_operator::a2a::parse::{card_from_value, Strictness};
use agentcard_operator::a2a::publish::{published_value, PublishOptions};
use agentcard_operator::a2a::{AgentCard, Algorithm, Jwks, SigningKey};
use proptest::prelude::*;
use serde_json::{json, Value};

static KEYS: LazyLock<Vec<SigningKey>> = LazyLock::new(|| {
    Algorithm::ALL
        .into_iter()
        .map(|alg| SigningKey::generate(alg, None).unwrap())
        .collect()
});

/// JSON pointers of every leaf that the signature covers (non-empty values).
fn signed_leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| {
            signed_leaves(
                v,
                format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                out,
            )
        }),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| signed_leaves(v, format!("{at}/{i}"), out)),
        _ => out.push(at),
    }
}

fn mutate(v: &mut Value) {
    *v = match v {
        Value::String(s) => json!(format!("{s}x")),
        Value::Bool(b) => json!(!*b),
        Value::Number(n) if n.as_f64() == Some(1.0) => json!(2),
        Value::Number(_) => json!(1),
        other => panic!("not a signed leaf: {other}"),
    };
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn sign_then_verify_round_trips_and_any_change_breaks_it(
        card in support::cards::card(),
        key in 0..Algorithm::ALL.len(),
        pick in any::<prop::sample::Index>(),
    ) {
        let key = &KEYS[key];
        let jwks = Jwks::from_signing_keys([key]);
        let card: AgentCard = card_from_value(&card, Strictness::Strict).unwrap().card;
        let signed = sign_card(&card, std::slice::from_ref(key), Some("https://x.example/jwks.json")).unwrap();
        let v = verify_card(&signed, &jwks).unwrap();
        prop_assert_eq!(&v.kid, key.kid());

        // What a client receives, re-read, still verifies.
        let published = published_value(&signed, PublishOptions::default()).unwrap();
        let reread = AgentCard::from_json_lenient(&serde_json::to_vec(&published).unwrap()).unwrap();
        prop_assert!(verify_card(&reread, &jwks).is_ok());

        // Any value the signature covers, changed in what the client received, breaks it. (The
        // published form may also carry values the canonical form drops, such as an empty
        // string among a list's entries; the client canonicalises them away before verifying.)
        let mut leaves = Vec::new();
        signed_leaves(&signed_value(&reread), String::new(), &mut leaves);
        prop_assume!(!leaves.is_empty());
        let pointer = &leaves[pick.index(leaves.len())];
        let mut tampered = signed_value(&reread);
        mutate(tampered.pointer_mut(pointer).unwrap());
        tampered["signatures"] = published["signatures"].clone();
        let tampered = AgentCard::from_json_lenient(&serde_json::to_vec(&tampered).unwrap()).unwrap();
        prop_assert!(verify_card(&tampered, &jwks).is_err(), "changing {} did not break the signature", pointer);
    }
}
