//! Cards signed by `render`, with every algorithm and with JWK and PEM keys, verify with the
//! official Python SDK (strict parse, required fields, signature) and @a2a-js/sdk.

mod support;

use std::path::PathBuf;

use agentcard_operator::a2a::{Algorithm, Jwks, SigningKey};
use support::{bin, run, sdk_verify, Sdk};

struct Rendered {
    dir: tempfile::TempDir,
    cards: Vec<(String, PathBuf)>,
    jwks: PathBuf,
}

/// Render every vector card with a fresh key per algorithm and key format.
fn render_all() -> Rendered {
    let dir = tempfile::tempdir().unwrap();
    let mut keys = Vec::new();
    let mut cards = Vec::new();
    for alg in Algorithm::ALL {
        for format in ["jwk", "pem"] {
            let kid = format!("k-{alg}-{format}");
            let key = SigningKey::generate(alg, Some(&kid)).unwrap();
            let path = dir.path().join(format!("{kid}.{format}"));
            let body = match format {
                "jwk" => key.private_jwk_json().unwrap(),
                _ => key.private_pem().unwrap(),
            };
            std::fs::write(&path, body).unwrap();
            for card in [
                "v1-minimal",
                "v1-full",
                "v1-edge-defaults",
                "spec-8.5-sample",
            ] {
                let input = support::vectors().join(format!("cards/{card}.card.json"));
                let mut cmd = bin();
                cmd.arg("render")
                    .arg(&input)
                    .arg("--key")
                    .arg(&path)
                    .arg("--jku")
                    .arg("https://agents.example.com/.well-known/jwks.json");
                // A PEM key has no kid or alg of its own: name them on the command line.
                if format == "pem" {
                    cmd.arg("--kid").arg(&kid).arg("--alg").arg(alg.name());
                }
                let out = run(cmd, None);
                assert!(
                    out.status.success(),
                    "render {card} with {kid}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let signed = dir.path().join(format!("{card}.{kid}.json"));
                std::fs::write(&signed, &out.stdout).unwrap();
                cards.push((kid.clone(), signed));
            }
            keys.push(key);
        }
    }
    let jwks = dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        serde_json::to_vec(&Jwks::from_signing_keys(&keys).to_value()).unwrap(),
    )
    .unwrap();
    Rendered { dir, cards, jwks }
}

fn check(sdk: Sdk) {
    let r = render_all();
    let files: Vec<PathBuf> = r.cards.iter().map(|(_, p)| p.clone()).collect();
    let verdicts = sdk_verify(sdk, &r.jwks, &files);
    for ((kid, path), v) in r.cards.iter().zip(&verdicts) {
        assert!(v.valid, "{sdk:?} rejects {}: {:?}", path.display(), v.error);
        assert_eq!(v.kid.as_deref(), Some(kid.as_str()), "{sdk:?}: {}", v.file);
    }
    assert_eq!(verdicts.len(), Algorithm::ALL.len() * 2 * 4);

    // And the SDK is a real judge: the same cards with one signed value changed fail.
    let tampered: Vec<PathBuf> = files
        .iter()
        .take(10)
        .map(|p| {
            let mut v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            v["skills"][0]["name"] = serde_json::json!("Changed after signing");
            let out = r.dir.path().join(format!(
                "tampered-{}",
                p.file_name().unwrap().to_string_lossy()
            ));
            std::fs::write(&out, serde_json::to_vec(&v).unwrap()).unwrap();
            out
        })
        .collect();
    for v in sdk_verify(sdk, &r.jwks, &tampered) {
        assert!(!v.valid, "{sdk:?} accepted a tampered card {}", v.file);
    }
}

#[test]
fn rendered_cards_verify_with_the_python_sdk() {
    check(Sdk::Python);
}

#[test]
fn rendered_cards_verify_with_the_js_sdk() {
    check(Sdk::Js);
}

#[test]
fn v03_compat_cards_still_verify_with_both_sdks() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::generate(Algorithm::ES256, Some("compat")).unwrap();
    let key_path = dir.path().join("k.jwk");
    std::fs::write(&key_path, key.private_jwk_json().unwrap()).unwrap();
    let mut cmd = bin();
    cmd.arg("render")
        .arg(support::vectors().join("cards/v1-full.card.json"))
        .arg("--key")
        .arg(&key_path)
        .arg("--v03-compat");
    let out = run(cmd, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let card: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(card["url"], "https://agents.example.com/a2a/v03");
    assert_eq!(card["preferredTransport"], "JSONRPC");
    assert_eq!(card["protocolVersion"], "0.3");
    assert_eq!(card["securitySchemes"]["apiKey"]["type"], "apiKey");
    assert_eq!(card["securitySchemes"]["apiKey"]["in"], "header");
    let path = dir.path().join("compat.json");
    std::fs::write(&path, &out.stdout).unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        serde_json::to_vec(&Jwks::from_signing_keys([&key]).to_value()).unwrap(),
    )
    .unwrap();
    // JS reads leniently and verifies the v1.0 form.
    let v = &sdk_verify(Sdk::Js, &jwks, std::slice::from_ref(&path))[0];
    assert!(v.valid, "{:?}", v.error);
    // Our own verifier agrees.
    let mut cmd = bin();
    cmd.arg("verify").arg(&path).arg("--jwks").arg(&jwks);
    assert!(run(cmd, None).status.success());
}

/// The property of the import issue: cards the Python SDK makes over the whole v1.0 schema
/// (empty strings and lists where the proto allows them) and signs are read by ours, are valid
/// (warnings at most), verify with ours, and, signed again by ours, verify with both SDKs.
/// The seed is printed; `AGENTCARD_SDK_CARDS_SEED` replays a run.
#[test]
fn cards_made_and_signed_by_the_python_sdk_import_verify_and_render() {
    use agentcard_operator::a2a::import::import;
    use agentcard_operator::a2a::jws::{sign_card, verify_card};
    use agentcard_operator::a2a::publish::{published_bytes, PublishOptions};
    use agentcard_operator::a2a::validate::validate;

    let seed: u64 = std::env::var("AGENTCARD_SDK_CARDS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(support::plane::rand_u32()));
    eprintln!("AGENTCARD_SDK_CARDS_SEED={seed}");
    let count = 300;
    let key_file = support::vectors().join("keys/test-es256-1.private.jwk.json");
    let mut cmd = std::process::Command::new(support::oracle().join("venv/bin/python"));
    cmd.arg(support::root().join("tests/oracle/py_gen_cards.py"))
        .args(["--count", &count.to_string(), "--seed", &seed.to_string()])
        .arg("--key")
        .arg(&key_file)
        .args(["--kid", "test-es256-1"]);
    let out = run(cmd, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs =
        Jwks::from_slice(&std::fs::read(support::vectors().join("keys/jwks.json")).unwrap())
            .unwrap();
    let ours = SigningKey::generate(Algorithm::ES256, Some("ours")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut rendered = Vec::new();
    for (i, line) in String::from_utf8_lossy(&out.stdout).lines().enumerate() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let imported =
            import(&value).unwrap_or_else(|e| panic!("card {i} (seed {seed}): {e}\n{line}"));
        verify_card(&imported_signed(&value), &theirs).unwrap_or_else(|e| {
            panic!("ours rejects the SDK's signature on card {i} (seed {seed}): {e}\n{line}")
        });
        let errors = validate(&imported.card);
        assert!(
            errors.is_empty(),
            "card {i} (seed {seed}) is refused: {errors:?}\n{line}"
        );
        let signed = sign_card(&imported.card, std::slice::from_ref(&ours), None).unwrap();
        let path = dir.path().join(format!("card-{i}.json"));
        std::fs::write(
            &path,
            published_bytes(&signed, PublishOptions::default()).unwrap(),
        )
        .unwrap();
        rendered.push(path);
    }
    assert_eq!(rendered.len(), count);
    let jwks = dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        serde_json::to_vec(&Jwks::from_signing_keys([&ours]).to_value()).unwrap(),
    )
    .unwrap();
    for sdk in [Sdk::Python, Sdk::Js] {
        for v in sdk_verify(sdk, &jwks, &rendered) {
            assert!(
                v.valid,
                "{sdk:?} rejects {} (seed {seed}): {:?}",
                v.file, v.error
            );
        }
    }
}

/// The card as a verifier reads it (lenient: the SDK's v0.3 fields dropped), signatures kept.
fn imported_signed(value: &serde_json::Value) -> agentcard_operator::a2a::AgentCard {
    use agentcard_operator::a2a::parse::{card_from_value, Strictness};
    card_from_value(value, Strictness::Lenient).unwrap().card
}

/// A key that signs the way PKCS#11 modules and cloud KMSs answer: ECDSA in ASN.1 DER, which
/// the backend converts with `ecdsa_der_to_jose` (as ours do).
#[derive(Debug)]
struct DerSigner(openssl::pkey::PKey<openssl::pkey::Private>, Algorithm);

impl agentcard_operator::a2a::keys::HeldKey for DerSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, agentcard_operator::a2a::keys::KeyError> {
        let digest = match self.1 {
            Algorithm::ES384 => openssl::hash::MessageDigest::sha384(),
            _ => openssl::hash::MessageDigest::sha256(),
        };
        let mut signer = openssl::sign::Signer::new(digest, &self.0).unwrap();
        signer.update(message).unwrap();
        let der = signer.sign_to_vec().unwrap();
        agentcard_operator::a2a::keys::ecdsa_der_to_jose(self.1, &der)
    }
}

#[test]
fn der_ecdsa_signatures_converted_to_jose_verify_with_both_sdks() {
    let dir = tempfile::tempdir().unwrap();
    let mut keys = Vec::new();
    let mut cards = Vec::new();
    for (alg, curve) in [
        (Algorithm::ES256, openssl::nid::Nid::X9_62_PRIME256V1),
        (Algorithm::ES384, openssl::nid::Nid::SECP384R1),
    ] {
        let group = openssl::ec::EcGroup::from_curve_name(curve).unwrap();
        let pkey = openssl::pkey::PKey::from_ec_key(openssl::ec::EcKey::generate(&group).unwrap())
            .unwrap();
        // The public JWK, from the same key loaded in memory.
        let local =
            SigningKey::from_pem(&pkey.private_key_to_pem_pkcs8().unwrap(), None, Some(alg))
                .unwrap();
        let held = SigningKey::held(
            alg,
            Some(&format!("der-{alg}")),
            local.public_jwk(),
            std::sync::Arc::new(DerSigner(pkey, alg)),
        )
        .unwrap();
        // Many cards: r or s shorter than the curve's size (padded by the conversion) among them.
        let base = std::fs::read(support::vectors().join("cards/v1-minimal.card.json")).unwrap();
        for i in 0..20 {
            let mut card = agentcard_operator::a2a::AgentCard::from_json_lenient(&base).unwrap();
            card.name = format!("DER {i}");
            let signed =
                agentcard_operator::a2a::jws::sign_card(&card, std::slice::from_ref(&held), None)
                    .unwrap();
            let path = dir.path().join(format!("{alg}-{i}.json"));
            std::fs::write(&path, serde_json::to_vec(&signed).unwrap()).unwrap();
            cards.push(path);
        }
        keys.push(held);
    }
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, Jwks::from_signing_keys(&keys).to_value().to_string()).unwrap();
    for sdk in [Sdk::Python, Sdk::Js] {
        for v in sdk_verify(sdk, &jwks, &cards) {
            assert!(v.valid, "{sdk:?} rejects {}: {:?}", v.file, v.error);
        }
    }
}
