//! The signer backends on the real control plane, each ending with both official SDKs
//! verifying a served card by the published JWKS:
//!
//! - `tls-secret:` — a `kubernetes.io/tls` Secret of the exact shape cert-manager writes for a
//!   Certificate issued by a CA Issuer (`tls.crt`, `tls.key` in SEC1, `ca.crt`, its
//!   annotations), made here with OpenSSL: the served card's signature carries the chain as
//!   `x5c`, `agentcard-operator verify --trust-root` verifies it by the CA and refuses another
//!   root, a renewal with a new key re-signs, and an expired certificate or an RSA-1024 key is
//!   a `Signed=False` condition naming the entry while the last good card stays served.
//! - `pkcs11:` — a SoftHSM2 token initialised here with `softhsm2-util` and a key generated
//!   in it with `pkcs11-tool` (the private key never leaves the token); a wrong PIN and a URI
//!   naming no key are conditions naming the backend, and nothing served changes.
//!
//! Cert-manager itself is not run: the Secrets have the shape its CA Issuer writes, which is
//! what the operator reads; running it would add a controller build to CI for no extra read.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentcard_operator::crd::AgentCard;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::x509::extension::BasicConstraints;
use openssl::x509::{X509NameBuilder, X509};
use serde_json::{json, Value};
use support::cluster::*;
use support::condition;
use support::operator::Operator;

/// Where the JWKS of the cards at path prefix `/a` is served (beside the card).
const PATH_JWKS: &str = "/a/.well-known/jwks.json";

fn ec_key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// A certificate for `key` named `cn`, issued by `issuer` (self-signed when None), valid
/// from `from` to `to` days from now.
fn certificate(
    cn: &str,
    key: &PKey<Private>,
    issuer: Option<(&X509, &PKey<Private>)>,
    from: i64,
    to: i64,
) -> X509 {
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_text("CN", cn).unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    let serial = BigNum::from_u32(support::plane::rand_u32()).unwrap();
    b.set_serial_number(&serial.to_asn1_integer().unwrap())
        .unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_pubkey(key).unwrap();
    b.set_not_before(&Asn1Time::from_unix(now() + from * 86_400).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::from_unix(now() + to * 86_400).unwrap())
        .unwrap();
    match issuer {
        Some((ca, ca_key)) => {
            b.set_issuer_name(ca.subject_name()).unwrap();
            b.sign(ca_key, MessageDigest::sha256()).unwrap();
        }
        None => {
            b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                .unwrap();
            b.set_issuer_name(&name).unwrap();
            b.sign(key, MessageDigest::sha256()).unwrap();
        }
    }
    b.build()
}

/// The Secret cert-manager's CA Issuer writes for Certificate `name`: `tls.crt` (the leaf),
/// `tls.key` (SEC1 for ECDSA, cert-manager's default PKCS1 encoding; PKCS#8 otherwise),
/// `ca.crt`, and its annotations.
fn tls_secret(name: &str, leaf: &X509, key: &PKey<Private>, ca: &X509) -> Value {
    let key_pem = match key.ec_key() {
        Ok(ec) => ec.private_key_to_pem().unwrap(),
        Err(_) => key.private_key_to_pem_pkcs8().unwrap(),
    };
    let b64 = |b: Vec<u8>| STANDARD.encode(b);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "annotations": {
            "cert-manager.io/certificate-name": name,
            "cert-manager.io/issuer-name": "company-ca",
            "cert-manager.io/issuer-kind": "Issuer",
            "cert-manager.io/issuer-group": "cert-manager.io",
            "cert-manager.io/common-name": "cards.open.test",
            "cert-manager.io/alt-names": "",
            "cert-manager.io/ip-sans": "",
            "cert-manager.io/uri-sans": ""
        }},
        "data": {
            "tls.crt": b64(leaf.to_pem().unwrap()),
            "tls.key": b64(key_pem),
            "ca.crt": b64(ca.to_pem().unwrap())
        }
    })
}

async fn put_secret(p: &Platform, manifest: &Value) {
    let name = manifest["metadata"]["name"].as_str().unwrap();
    Api::<Secret>::namespaced(p.admin.clone(), &p.opns)
        .patch(
            name,
            &PatchParams::apply("cert-manager-certificates-issuing").force(),
            &Patch::Apply(manifest),
        )
        .await
        .unwrap();
}

/// The decoded protected header of the served card's first signature.
fn header(card: &[u8]) -> Value {
    let card: Value = serde_json::from_slice(card).unwrap();
    let protected = card["signatures"][0]["protected"].as_str().unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(protected).unwrap()).unwrap()
}

/// Both official SDKs verify `card` by `jwks`, and name `kid`.
fn both_sdks_verify(card: &[u8], jwks: &[u8], kid: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (card_file, jwks_file) = (dir.path().join("card.json"), dir.path().join("jwks.json"));
    std::fs::write(&card_file, card).unwrap();
    std::fs::write(&jwks_file, jwks).unwrap();
    for sdk in [support::Sdk::Python, support::Sdk::Js] {
        let v = &support::sdk_verify(sdk, &jwks_file, std::slice::from_ref(&card_file))[0];
        assert!(
            v.valid,
            "{sdk:?} SDK rejects the served card: {:?}",
            v.error
        );
        if let Some(k) = &v.kid {
            assert_eq!(k, kid, "{sdk:?} SDK verified with another key");
        }
    }
}

/// `agentcard-operator verify` of `card` (file) with `args`: (exit success, stdout).
fn cli_verify(card: &Path, args: &[&str]) -> (bool, String) {
    let out = support::bin()
        .arg("verify")
        .arg(card)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The `Signed` condition of a card: (status, reason, message).
fn signed(c: &AgentCard) -> Option<(String, String, String)> {
    condition(c, "Signed")
}

/// Apply card `a` at `host` + `/a` as tenant `t`, wait until it is Ready and served: the card
/// and the served bytes.
async fn publish_first(p: &Platform, t: &Tenant, host: &str) -> (AgentCard, Vec<u8>) {
    t.apply(&card("a", host, "/a")).await.unwrap();
    let c = wait_card(p, &t.ns, "a", "Ready", |c| {
        condition(c, "Ready").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    wait_served(p, host, &card_path("/a"), hash_of(&c).as_deref()).await;
    let served = p.get(host, &card_path("/a")).body;
    (c, served)
}

/// Wait until card `name` (served at `/<name>`) is Ready with a content hash other than
/// `not`, and served with it.
async fn wait_signed_again(
    p: &Platform,
    t: &Tenant,
    host: &str,
    not: &str,
    name: &str,
) -> AgentCard {
    let c = wait_card(p, &t.ns, name, "signed again", |c| {
        condition(c, "Ready").is_some_and(|(s, _, _)| s == "True")
            && hash_of(c).is_some_and(|h| h != not)
    })
    .await;
    wait_served(
        p,
        host,
        &card_path(&format!("/{name}")),
        hash_of(&c).as_deref(),
    )
    .await;
    c
}

#[tokio::test]
async fn cards_signed_with_a_cert_manager_certificate_carry_its_chain_and_verify_by_its_ca() {
    // A JWKS max-age of 3 s: a renewal's staged rotation takes 3 s here.
    let p = Platform::start(&["--signer", "tls-secret:card-signer", "--jwks-max-age", "3"]).await;
    let ca_key = ec_key();
    let ca = certificate("Company CA", &ca_key, None, -1, 3650);
    let leaf_key = ec_key();
    let leaf = certificate("cards.open.test", &leaf_key, Some((&ca, &ca_key)), -1, 90);
    put_secret(&p, &tls_secret("card-signer", &leaf, &leaf_key, &ca)).await;

    let t = Tenant::new(&p, &format!("tls-{}", rand_tag())).await;
    let host = format!("tls-{}.open.test", rand_tag());
    let (c, served) = publish_first(&p, &t, &host).await;
    let jwks = p.get(&host, PATH_JWKS).body;
    let h = header(&served);
    let kid = h["kid"].as_str().unwrap().to_string();
    assert_eq!(
        h["x5c"],
        json!([STANDARD.encode(leaf.to_der().unwrap())]),
        "the signature carries the certificate as x5c"
    );
    let published: Value = serde_json::from_slice(&jwks).unwrap();
    assert_eq!(published["keys"].as_array().unwrap().len(), 1);
    assert_eq!(published["keys"][0]["kid"], kid.as_str());
    assert_eq!(published["keys"][0]["x5c"], h["x5c"]);
    both_sdks_verify(&served, &jwks, &kid);
    // The host's did:web document lists the ES256 key as an assertion method.
    let did = p.get(&host, "/.well-known/did.json");
    assert_eq!(did.status, 200);
    assert_eq!(
        support::assert_did_document(&did.body, &host, &jwks),
        std::slice::from_ref(&kid)
    );

    // Verified by the CA alone, by the CA and the JWKS, and refused by another root.
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| -> PathBuf {
        let f = dir.path().join(name);
        std::fs::write(&f, bytes).unwrap();
        f
    };
    let card_file = file("card.json", &served);
    let ca_file = file("ca.pem", &ca.to_pem().unwrap());
    let jwks_file = file("jwks.json", &jwks);
    let stranger = certificate("Stranger CA", &ec_key(), None, -1, 3650);
    let stranger_file = file("stranger.pem", &stranger.to_pem().unwrap());
    let (ok, out) = cli_verify(&card_file, &["--trust-root", ca_file.to_str().unwrap()]);
    assert!(ok && out.contains("cards.open.test"), "{out}");
    let (ok, out) = cli_verify(
        &card_file,
        &[
            "--trust-root",
            ca_file.to_str().unwrap(),
            "--jwks",
            jwks_file.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}");
    let (ok, out) = cli_verify(
        &card_file,
        &["--trust-root", stranger_file.to_str().unwrap()],
    );
    assert!(!ok && out.contains("does not verify"), "{out}");

    // Renewal with a new key (cert-manager's rotationPolicy: Always): the new key id is
    // published first, beside the old key, which keeps signing for one JWKS max-age (the
    // staged rotation, though the Secret holds the new key only); then the new key signs.
    let before = hash_of(&c).unwrap();
    let next_key = ec_key();
    let next = certificate("cards.open.test", &next_key, Some((&ca, &ca_key)), -1, 90);
    put_secret(&p, &tls_secret("card-signer", &next, &next_key, &ca)).await;
    let c2 = wait_signed_again(&p, &t, &host, &before, "a").await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(p.admin.clone(), &p.opns);
    let scheduled = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("KeyActivationScheduled"))
        .expect("the renewal's new key was scheduled, not signing at once");
    let note = scheduled.message.unwrap_or_default();
    let at: jiff::Timestamp = note
        .split("signs from ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no activation time in {note:?}"));
    let published_at: jiff::Timestamp = c2
        .status
        .as_ref()
        .unwrap()
        .served
        .as_ref()
        .unwrap()
        .published_at
        .parse()
        .unwrap();
    assert!(
        published_at >= at,
        "re-signed at {published_at}, before the new key's activation at {at}"
    );
    let renewed = p.get(&host, &card_path("/a")).body;
    let h2 = header(&renewed);
    assert_ne!(h2["kid"], h["kid"], "a new key is a new key id");
    assert_eq!(h2["x5c"], json!([STANDARD.encode(next.to_der().unwrap())]));
    let jwks2 = p.get(&host, PATH_JWKS).body;
    both_sdks_verify(&renewed, &jwks2, h2["kid"].as_str().unwrap());
    let card2 = file("renewed.json", &renewed);
    let (ok, out) = cli_verify(&card2, &["--trust-root", ca_file.to_str().unwrap()]);
    assert!(ok, "{out}");

    // An expired certificate, then an RSA-1024 key: the condition names the entry and why;
    // the last good card stays served, byte for byte.
    let served_hash = hash_of(&c2).unwrap();
    let expired_key = ec_key();
    let expired = certificate(
        "cards.open.test",
        &expired_key,
        Some((&ca, &ca_key)),
        -30,
        -1,
    );
    put_secret(&p, &tls_secret("card-signer", &expired, &expired_key, &ca)).await;
    let mut edit = card("a", &host, "/a");
    edit["spec"]["card"]["description"] = json!("Edited while the certificate is expired.");
    t.apply(&edit).await.unwrap();
    let refused = wait_card(&p, &t.ns, "a", "Signed=False (expired)", |c| {
        signed(c)
            .is_some_and(|(s, _, m)| s == "False" && m.contains("tls.crt") && m.contains("expired"))
    })
    .await;
    assert_eq!(signed(&refused).unwrap().1, "KeyUnavailable");
    assert_eq!(hash_of(&refused).as_deref(), Some(served_hash.as_str()));
    wait_served(&p, &host, &card_path("/a"), Some(&served_hash)).await;
    assert_eq!(p.get(&host, &card_path("/a")).body, renewed);

    let rsa = PKey::from_rsa(openssl::rsa::Rsa::generate(1024).unwrap()).unwrap();
    let weak = certificate("cards.open.test", &rsa, Some((&ca, &ca_key)), -1, 90);
    put_secret(&p, &tls_secret("card-signer", &weak, &rsa, &ca)).await;
    wait_card(&p, &t.ns, "a", "Signed=False (RSA-1024)", |c| {
        signed(c).is_some_and(|(s, _, m)| {
            s == "False" && m.contains("tls.key") && m.contains("1024 bits")
        })
    })
    .await;
    assert_eq!(p.get(&host, &card_path("/a")).body, renewed);

    // Renewed properly: the edit is published, signed with the new certificate's key.
    let good_key = ec_key();
    let good = certificate("cards.open.test", &good_key, Some((&ca, &ca_key)), -1, 90);
    put_secret(&p, &tls_secret("card-signer", &good, &good_key, &ca)).await;
    wait_signed_again(&p, &t, &host, &served_hash, "a").await;
    let last = p.get(&host, &card_path("/a")).body;
    assert!(String::from_utf8_lossy(&last).contains("certificate is expired"));
    both_sdks_verify(
        &last,
        &p.get(&host, PATH_JWKS).body,
        header(&last)["kid"].as_str().unwrap(),
    );
}

const SOFTHSM_MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";

/// A SoftHSM2 token `label` with user PIN `pin` and an EC P-256 key pair `key` in it, in a
/// token directory of its own (the returned guard); `SOFTHSM2_CONF` points at it.
fn softhsm_token(label: &str, pin: &str, key: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::create_dir(&tokens).unwrap();
    let conf = dir.path().join("softhsm2.conf");
    std::fs::write(
        &conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
            tokens.display()
        ),
    )
    .unwrap();
    // The operator this test starts inherits it.
    std::env::set_var("SOFTHSM2_CONF", &conf);
    let run = |cmd: &mut Command| {
        let out = cmd.env("SOFTHSM2_CONF", &conf).output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(Command::new("softhsm2-util").args([
        "--init-token",
        "--free",
        "--label",
        label,
        "--pin",
        pin,
        "--so-pin",
        "so-secret",
    ]));
    run(Command::new("pkcs11-tool").args([
        "--module",
        SOFTHSM_MODULE,
        "--token-label",
        label,
        "--login",
        "--pin",
        pin,
        "--keypairgen",
        "--key-type",
        "EC:prime256v1",
        "--label",
        key,
        "--id",
        "01",
    ]));
    dir
}

#[tokio::test]
async fn cards_signed_by_a_key_in_a_softhsm2_token_verify_and_token_failures_are_conditions() {
    let mut p = Platform::start(&[]).await;
    // The token is made once this test holds the plane: the other tests of this binary wait in
    // `Platform::start`, so setting SOFTHSM2_CONF for the operators started here races nobody.
    let token = softhsm_token("cards", "1234", "card-key");
    let pin = token.path().join("pin");
    std::fs::write(&pin, "1234\n").unwrap();
    let uri = format!(
        "pkcs11:token=cards;object=card-key?pin-source={}",
        pin.display()
    );
    let restart = |opns: &str, signer: String| {
        let mut flags: Vec<String> = OPERATOR_FLAGS.iter().map(|s| s.to_string()).collect();
        flags.extend([
            "--signer".into(),
            signer,
            "--pkcs11-module".into(),
            SOFTHSM_MODULE.into(),
        ]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        Operator::start_on(kubeconfig(), opns, None, &flags)
    };
    p.op.kill();
    p.op = restart(&p.opns, uri.clone());
    let t = Tenant::new(&p, &format!("hsm-{}", rand_tag())).await;
    let host = format!("hsm-{}.open.test", rand_tag());
    let (c, served) = publish_first(&p, &t, &host).await;
    let jwks = p.get(&host, PATH_JWKS).body;
    let kid = header(&served)["kid"].as_str().unwrap().to_string();
    assert_eq!(
        c.status.as_ref().unwrap().key_id.as_deref(),
        Some(kid.as_str())
    );
    both_sdks_verify(&served, &jwks, &kid);
    // The published key is the token's public key, read back with pkcs11-tool.
    let out = Command::new("pkcs11-tool")
        .args([
            "--module",
            SOFTHSM_MODULE,
            "--token-label",
            "cards",
            "--read-object",
        ])
        .args(["--type", "pubkey", "--label", "card-key"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = PKey::public_key_from_der(&out.stdout).unwrap();
    let point = public
        .ec_key()
        .unwrap()
        .public_key()
        .to_bytes(
            &EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap(),
            openssl::ec::PointConversionForm::UNCOMPRESSED,
            &mut openssl::bn::BigNumContext::new().unwrap(),
        )
        .unwrap();
    let jwk = &serde_json::from_slice::<Value>(&jwks).unwrap()["keys"][0];
    assert_eq!(jwk["x"], URL_SAFE_NO_PAD.encode(&point[1..33]));
    assert_eq!(jwk["y"], URL_SAFE_NO_PAD.encode(&point[33..]));

    // A wrong PIN, then a URI that names no key: the operator restarts on each; the card says
    // why it is not signed (naming the backend), and the last good card stays served.
    let served_hash = hash_of(&c).unwrap();
    std::fs::write(&pin, "9999\n").unwrap();
    p.op.kill();
    p.op = restart(&p.opns, uri.clone());
    let mut edit = card("a", &host, "/a");
    edit["spec"]["card"]["description"] = json!("Edited while the token refuses.");
    t.apply(&edit).await.unwrap();
    let refused = wait_card(&p, &t.ns, "a", "Signed=False (wrong PIN)", |c| {
        signed(c).is_some_and(|(s, _, m)| {
            s == "False"
                && m.contains("pkcs11:")
                && m.contains("login refused")
                && m.contains("CKR_PIN_INCORRECT")
        })
    })
    .await;
    assert!(!signed(&refused).unwrap().2.contains("1234"));
    assert_eq!(p.get(&host, &card_path("/a")).body, served);

    std::fs::write(&pin, "1234\n").unwrap();
    p.op.kill();
    p.op = restart(
        &p.opns,
        format!(
            "pkcs11:token=cards;object=no-such-key?pin-source={}",
            pin.display()
        ),
    );
    wait_card(&p, &t.ns, "a", "Signed=False (no key)", |c| {
        signed(c).is_some_and(|(s, _, m)| {
            s == "False" && m.contains("no private key with label \"no-such-key\"")
        })
    })
    .await;
    assert_eq!(p.get(&host, &card_path("/a")).body, served);
    wait_served(&p, &host, &card_path("/a"), Some(&served_hash)).await;

    // The right key again: the edit is published, signed by the token.
    p.op.kill();
    p.op = restart(&p.opns, uri);
    wait_signed_again(&p, &t, &host, &served_hash, "a").await;
    let last = p.get(&host, &card_path("/a")).body;
    assert!(String::from_utf8_lossy(&last).contains("the token refuses"));
    both_sdks_verify(&last, &p.get(&host, PATH_JWKS).body, &kid);
    drop(token);
}

/// `agentcard-operator keys ARGS` against the test plane: (success, stdout + stderr).
fn keys_cli(args: &[&str]) -> (bool, String) {
    let out = support::bin()
        .arg("keys")
        .args(args)
        .env("KUBECONFIG", kubeconfig())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn a_revoked_key_leaves_the_jwks_at_once_and_every_card_it_signed_is_signed_again() {
    let p = Platform::start(&[]).await;
    let t = Tenant::new(&p, &format!("rev-{}", rand_tag())).await;
    let host = format!("rev-{}.open.test", rand_tag());
    let names = ["a", "b", "c"];
    for n in names {
        t.apply(&card(n, &host, &format!("/{n}"))).await.unwrap();
    }
    let mut before = Vec::new();
    for n in names {
        let c = wait_card(&p, &t.ns, n, "Ready", |c| {
            condition(c, "Ready").is_some_and(|(s, _, _)| s == "True")
        })
        .await;
        wait_served(
            &p,
            &host,
            &card_path(&format!("/{n}")),
            hash_of(&c).as_deref(),
        )
        .await;
        before.push(c);
    }
    let leaked = before[0].status.as_ref().unwrap().key_id.clone().unwrap();
    let old_card = p.get(&host, &card_path("/a")).body;

    // A spare key beside the active one (not active: it would wait a JWKS max-age).
    let spare = agentcard_operator::a2a::SigningKey::generate(
        agentcard_operator::a2a::Algorithm::ES256,
        Some("spare-1"),
    )
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(p.admin.clone(), &p.opns);
    secrets
        .patch(
            "agentcard-signing-keys",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"stringData": {"spare-1.jwk.json": spare.private_jwk_json().unwrap()}}),
            ),
        )
        .await
        .unwrap();
    let jwks_path = "/a/.well-known/jwks.json";
    support::plane::wait_for(std::time::Duration::from_secs(20), || {
        let j = p.get(&host, jwks_path).body;
        std::future::ready(String::from_utf8_lossy(&j).contains("spare-1"))
    })
    .await
    .expect("the spare key is published");

    // A kid the Secret does not hold is refused, naming the keys there.
    let (ok, out) = keys_cli(&["revoke", "nope", "-n", &p.opns]);
    assert!(!ok && out.contains("holds no key \"nope\""), "{out}");
    let (ok, out) = keys_cli(&["revoke", "-n", &p.opns, "--", &leaked]);
    assert!(ok, "{out}");
    assert!(out.contains("spare-1"), "{out}");

    // Out of the JWKS at once (no stage), every card signed again with the spare key.
    support::plane::wait_for(std::time::Duration::from_secs(20), || {
        let j = p.get(&host, jwks_path).body;
        std::future::ready(!String::from_utf8_lossy(&j).contains(&leaked))
    })
    .await
    .expect("the revoked key leaves the JWKS");
    let jwks = p.get(&host, jwks_path).body;
    for (n, c) in names.iter().zip(&before) {
        let again = wait_signed_again(&p, &t, &host, &hash_of(c).unwrap(), n).await;
        let status = again.status.as_ref().unwrap();
        assert_eq!(status.key_id.as_deref(), Some("spare-1"));
        let (_, _, message) = signed(&again).unwrap();
        assert!(
            message.contains(&format!("not with revoked key {leaked}")),
            "{message}"
        );
        let served = p.get(&host, &card_path(&format!("/{n}"))).body;
        both_sdks_verify(&served, &jwks, "spare-1");
    }
    // The card signed with the revoked key no longer verifies with the published keys.
    let v = support::python_sdk_verdict(&old_card, &jwks);
    assert!(
        !v.valid,
        "a card signed with the revoked key still verifies"
    );
    // The Secret says so in an Event; `keys list` too.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(p.admin.clone(), &p.opns);
    let revoked_event = support::plane::wait_for(std::time::Duration::from_secs(20), || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("KeyRevoked")
                    && e.message.as_deref().is_some_and(|m| m.contains(&leaked))
            })
    })
    .await;
    assert!(revoked_event.is_ok(), "no KeyRevoked Event");
    let (ok, out) = keys_cli(&["list", "-n", &p.opns]);
    assert!(ok, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with(&leaked) && l.ends_with("revoked")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("spare-1") && l.ends_with("active")),
        "{out}"
    );
}

/// A Vault dev server (`server -dev`, in memory, root token `root`), killed with its process
/// group when dropped.
struct DevVault {
    child: std::process::Child,
    addr: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Drop for DevVault {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

impl DevVault {
    async fn start() -> DevVault {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.path().join("vault.log")).unwrap();
        let child = Command::new(support::tools::Tool::Vault.path())
            .args(["server", "-dev", "-dev-root-token-id=root"])
            .arg(format!("-dev-listen-address=127.0.0.1:{port}"))
            .env("HOME", dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("starting vault");
        let vault = DevVault {
            child,
            addr: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            _dir: dir,
        };
        let up = support::plane::wait_for(std::time::Duration::from_secs(60), || async {
            vault.call("GET", "sys/health", None).await.is_ok()
        })
        .await;
        assert!(up.is_ok(), "vault did not start: {}", vault.log());
        vault
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("vault.log")).unwrap_or_default()
    }

    /// One request with the root token: its JSON answer, or the status and body.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .http
            .request(method, format!("{}/v1/{path}", self.addr))
            .header("X-Vault-Token", "root");
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {text}"));
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn must(&self, method: &str, path: &str, body: Value) -> Value {
        self.call(method, path, Some(body))
            .await
            .unwrap_or_else(|e| panic!("vault {method} {path}: {e}"))
    }
}

/// The policy the operator's Vault role holds: read the key, sign with it (or, `sign: false`,
/// only read).
fn vault_policy(sign: bool) -> Value {
    let mut hcl = String::from("path \"transit/keys/cards\" { capabilities = [\"read\"] }\n");
    if sign {
        hcl.push_str("path \"transit/sign/cards\" { capabilities = [\"update\"] }\n");
    }
    json!({"policy": hcl})
}

#[tokio::test]
async fn cards_signed_by_vault_transit_with_kubernetes_auth_verify_and_a_vault_that_refuses_is_a_condition(
) {
    let mut p = Platform::start(&[]).await;
    let vault = DevVault::start().await;
    vault
        .must("POST", "sys/mounts/transit", json!({"type": "transit"}))
        .await;
    vault
        .must("POST", "transit/keys/cards", json!({"type": "ecdsa-p256"}))
        .await;
    vault
        .must("PUT", "sys/policies/acl/cards-sign", vault_policy(true))
        .await;

    // Vault's Kubernetes auth against this plane: a reviewer ServiceAccount allowed to review
    // tokens, and the operator's own ServiceAccount, whose token the operator logs in with.
    let kc = kube::config::Kubeconfig::read_from(kubeconfig()).unwrap();
    let cluster = kc.clusters[0].cluster.as_ref().unwrap();
    let ca = cluster
        .certificate_authority_data
        .clone()
        .map(|d| String::from_utf8(STANDARD.decode(d).unwrap()).unwrap());
    let ca = ca.unwrap_or_else(|| {
        std::fs::read_to_string(cluster.certificate_authority.as_ref().unwrap()).unwrap()
    });
    let kubectl = |args: &[&str]| support::kubectl(kubeconfig(), args);
    for sa in ["vault-reviewer", "agentcard-operator"] {
        kubectl(&["create", "serviceaccount", sa, "-n", &p.opns]);
    }
    let binding = format!("vault-reviewer-{}", p.opns);
    kubectl(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=system:auth-delegator",
        &format!("--serviceaccount={}:vault-reviewer", p.opns),
    ]);
    let reviewer = kubectl(&[
        "create",
        "token",
        "vault-reviewer",
        "-n",
        &p.opns,
        "--duration=1h",
    ]);
    vault
        .must("POST", "sys/auth/kubernetes", json!({"type": "kubernetes"}))
        .await;
    vault
        .must(
            "POST",
            "auth/kubernetes/config",
            json!({"kubernetes_host": cluster.server.clone().unwrap(), "kubernetes_ca_cert": ca,
                   "token_reviewer_jwt": reviewer.trim(), "disable_local_ca_jwt": true}),
        )
        .await;
    vault
        .must(
            "POST",
            "auth/kubernetes/role/agentcard",
            json!({"bound_service_account_names": ["agentcard-operator"],
                   "bound_service_account_namespaces": [p.opns], "token_policies": ["cards-sign"],
                   "token_ttl": "1h"}),
        )
        .await;
    let token_dir = tempfile::tempdir().unwrap();
    let sa_token = token_dir.path().join("token");
    std::fs::write(
        &sa_token,
        kubectl(&[
            "create",
            "token",
            "agentcard-operator",
            "-n",
            &p.opns,
            "--duration=1h",
        ]),
    )
    .unwrap();

    // The operator signs with the transit key, logged in as its ServiceAccount.
    p.op.kill();
    let sa_token_path = sa_token.display().to_string();
    let mut flags: Vec<String> = OPERATOR_FLAGS.iter().map(|s| s.to_string()).collect();
    flags.extend(
        [
            "--signer",
            "hashivault://cards",
            "--vault-addr",
            &vault.addr,
            "--vault-k8s-role",
            "agentcard",
            "--vault-k8s-token-file",
            &sa_token_path,
            "--vault-refresh-seconds",
            "2",
            "--jwks-max-age",
            "3",
        ]
        .map(str::to_string),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    p.op = Operator::start_on(kubeconfig(), &p.opns, None, &flags);
    let t = Tenant::new(&p, &format!("vault-{}", rand_tag())).await;
    let host = format!("vault-{}.open.test", rand_tag());
    let (c, served) = publish_first(&p, &t, &host).await;
    assert_eq!(header(&served)["kid"], "cards-v1");
    both_sdks_verify(&served, &p.get(&host, PATH_JWKS).body, "cards-v1");

    // A rotation in Vault is a new key version: published first, then signing.
    vault
        .must("POST", "transit/keys/cards/rotate", json!({}))
        .await;
    let rotated = wait_signed_again(&p, &t, &host, &hash_of(&c).unwrap(), "a").await;
    let resigned = p.get(&host, &card_path("/a")).body;
    assert_eq!(header(&resigned)["kid"], "cards-v2");
    let jwks = p.get(&host, PATH_JWKS).body;
    assert!(
        String::from_utf8_lossy(&jwks).contains("cards-v1"),
        "v1 stays published"
    );
    both_sdks_verify(&resigned, &jwks, "cards-v2");

    // A Vault that refuses to sign (the role's policy no longer allows it): the edit is not
    // published, the condition names the backend and Vault's answer, and the last good card
    // stays served.
    vault
        .must("PUT", "sys/policies/acl/cards-sign", vault_policy(false))
        .await;
    let mut edit = card("a", &host, "/a");
    edit["spec"]["card"]["description"] = json!("Edited while Vault refuses.");
    t.apply(&edit).await.unwrap();
    wait_card(&p, &t.ns, "a", "Signed=False (Vault refuses)", |c| {
        signed(c).is_some_and(|(s, _, m)| {
            s == "False" && m.contains("hashivault") && m.contains("permission denied")
        })
    })
    .await;
    assert_eq!(p.get(&host, &card_path("/a")).body, resigned);

    // Allowed again: the edit is published.
    vault
        .must("PUT", "sys/policies/acl/cards-sign", vault_policy(true))
        .await;
    wait_signed_again(&p, &t, &host, &hash_of(&rotated).unwrap(), "a").await;
    let last = p.get(&host, &card_path("/a")).body;
    assert!(String::from_utf8_lossy(&last).contains("Vault refuses"));
    both_sdks_verify(&last, &p.get(&host, PATH_JWKS).body, "cards-v2");
    kubectl(&["delete", "clusterrolebinding", &binding]);
}
