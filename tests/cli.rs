//! The offline CLI as users run it: render, verify, keygen, jwks.

mod support;

use support::{bin, run, vectors};

fn out_str(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn render_of_an_invalid_card_lists_every_problem_and_prints_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("card.yaml");
    std::fs::write(
        &manifest,
        r#"apiVersion: agentcard.dev/v1alpha1
kind: AgentCard
metadata: {name: broken}
spec:
  publish: {host: agents.example.com}
  card:
    name: ""
    description: An agent
    version: "1.0"
    supportedInterfaces:
    - {url: "http://agents.example.com/a2a", protocolBinding: JSONRPC, protocolVersion: "1.0"}
    capabilities: {}
    defaultInputModes: [text/plain]
    defaultOutputModes: [text]
    skills:
    - {id: a, name: A, description: d, tags: [x]}
    - {id: a, name: B, description: d, tags: [x]}
    - {name: C, description: d, tags: [x]}
"#,
    )
    .unwrap();
    let mut cmd = bin();
    cmd.arg("render")
        .arg(&manifest)
        .arg("--key")
        .arg(vectors().join("keys/test-es256-1.private.jwk.json"));
    let out = run(cmd, None);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "stdout: {}", out_str(&out.stdout));
    let err = out_str(&out.stderr);
    for expected in [
        "error: spec.card.name: required",
        "error: spec.card.supportedInterfaces[0].url:",
        "error: spec.card.skills[1].id: duplicate of skills[0].id",
        "error: spec.card.skills[2].id: required",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    // `text` is not a media type, but the proto allows it (many v0.3 agents say it): a warning.
    assert!(
        !err.contains("error: spec.card.defaultOutputModes"),
        "{err}"
    );
}

#[test]
fn render_rejects_unknown_fields_with_their_path() {
    let mut cmd = bin();
    cmd.arg("render")
        .arg("-")
        .arg("--key")
        .arg(vectors().join("keys/test-es256-1.private.jwk.json"));
    let out = run(cmd, Some(br#"{"name": "x", "url": "https://old.example.com", "skills": [{"id": "a", "tgas": []}]}"#));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = out_str(&out.stderr);
    assert!(err.contains("error: url: unknown field"), "{err}");
    assert!(
        err.contains("error: skills[0].tgas: unknown field"),
        "{err}"
    );
}

#[test]
fn render_then_verify_with_keygen_keys_and_jwks() {
    let dir = tempfile::tempdir().unwrap();
    let mut keys = Vec::new();
    for (alg, format) in [
        ("ES256", "jwk"),
        ("EdDSA", "pem"),
        ("PS256", "jwk"),
        ("ES384", "pem"),
    ] {
        let mut cmd = bin();
        cmd.args([
            "keygen",
            "--alg",
            alg,
            "--format",
            format,
            "--kid",
            &format!("kid-{alg}"),
        ]);
        let out = run(cmd, None);
        assert!(out.status.success(), "{}", out_str(&out.stderr));
        let path = dir.path().join(format!("{alg}.{format}"));
        std::fs::write(&path, &out.stdout).unwrap();
        keys.push(path);
    }
    let mut cmd = bin();
    cmd.arg("jwks").args(&keys);
    let out = run(cmd, None);
    assert!(out.status.success(), "{}", out_str(&out.stderr));
    let jwks: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 4);
    assert!(
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k.get("d").is_none()),
        "JWKS leaks private parts"
    );
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, &out.stdout).unwrap();

    let mut cmd = bin();
    cmd.arg("render")
        .arg(vectors().join("cards/v1-minimal.card.json"));
    // PEM keys carry no kid: name them in --kid, one per key.
    for (k, kid) in keys
        .iter()
        .zip(["kid-ES256", "kid-EdDSA", "kid-PS256", "kid-ES384"])
    {
        cmd.arg("--key").arg(k).arg("--kid").arg(kid);
    }
    let out = run(cmd, None);
    assert!(out.status.success(), "{}", out_str(&out.stderr));
    let card: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(card["signatures"].as_array().unwrap().len(), 4);
    let card_path = dir.path().join("card.json");
    std::fs::write(&card_path, &out.stdout).unwrap();

    let mut cmd = bin();
    cmd.arg("verify")
        .arg(&card_path)
        .arg("--jwks")
        .arg(&jwks_path);
    let out = run(cmd, None);
    assert_eq!(out.status.code(), Some(0), "{}", out_str(&out.stdout));
    assert!(out_str(&out.stdout).contains("kid-ES256"));

    // A JWKS without those keys: exit 1 with the reason.
    let mut cmd = bin();
    cmd.arg("verify")
        .arg(&card_path)
        .arg("--jwks")
        .arg(vectors().join("keys/jwks.json"));
    let out = run(cmd, None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out_str(&out.stdout).contains("is not in the JWKS"),
        "{}",
        out_str(&out.stdout)
    );
}

#[test]
fn verify_reports_tampered_vectors_invalid_and_signed_ones_valid() {
    for (file, code) in [
        ("v1-full.signed.json", 0),
        ("v1-full.signed-by-js.json", 0),
        ("v1-full.tampered.json", 1),
    ] {
        let mut cmd = bin();
        cmd.arg("verify")
            .arg(vectors().join("cards").join(file))
            .arg("--jwks")
            .arg(vectors().join("keys/jwks.json"));
        let out = run(cmd, None);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{file}: {}",
            out_str(&out.stdout)
        );
    }
}

#[test]
fn keygen_kid_defaults_to_the_rfc7638_thumbprint_in_every_format() {
    let mut cmd = bin();
    cmd.args(["keygen", "--alg", "ES256", "--format", "pem"]);
    let pem = run(cmd, None).stdout;
    let dir = tempfile::tempdir().unwrap();
    let pem_path = dir.path().join("k.pem");
    std::fs::write(&pem_path, &pem).unwrap();
    let mut cmd = bin();
    cmd.arg("jwks").arg(&pem_path);
    let jwks: serde_json::Value = serde_json::from_slice(&run(cmd, None).stdout).unwrap();
    let key = &jwks["keys"][0];
    let kid = key["kid"].as_str().unwrap();
    // RFC 7638: SHA-256 over {"crv","kty","x","y"} in that order, base64url.
    let canonical = format!(
        r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
        key["x"].as_str().unwrap(),
        key["y"].as_str().unwrap()
    );
    use base64::Engine;
    use sha2::Digest;
    let expected = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(canonical.as_bytes()));
    assert_eq!(kid, expected);
}

#[test]
fn keygen_secret_is_a_kubernetes_secret_with_the_active_key() {
    let mut cmd = bin();
    cmd.args([
        "keygen",
        "--alg",
        "EdDSA",
        "--kid",
        "k1",
        "--format",
        "secret",
        "--namespace",
        "ops",
    ]);
    let out = run(cmd, None);
    assert!(out.status.success());
    let secret: serde_json::Value =
        agentcard_operator::yaml::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(secret["kind"], "Secret");
    assert_eq!(secret["metadata"]["namespace"], "ops");
    assert_eq!(
        secret["metadata"]["annotations"]["agentcard.dev/active-key"],
        "k1"
    );
    let jwk: serde_json::Value =
        serde_json::from_str(secret["stringData"]["k1.jwk.json"].as_str().unwrap()).unwrap();
    assert_eq!(jwk["crv"], "Ed25519");
    assert!(jwk.get("d").is_some());
}

/// `render --from-url` imports what an agent serves: a v0.3 card comes out as a signed v1.0
/// card that verifies, with the conversion and the proto-allowed oddities as notes.
#[test]
fn render_from_url_converts_a_v03_card_signs_it_and_it_verifies() {
    use std::io::{Read, Write};
    let card = serde_json::json!({
        "protocolVersion": "0.3.0", "name": "Echo", "description": "Echoes", "version": "2.1.0",
        "url": "https://echo.example.com/a2a", "preferredTransport": "JSONRPC",
        "additionalInterfaces": [{"url": "https://echo.example.com/rest", "transport": "HTTP+JSON"}],
        "capabilities": {"streaming": true}, "supportsAuthenticatedExtendedCard": true,
        "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "security": [{"bearer": []}],
        "skills": [{"id": "echo", "name": "Echo", "description": "d", "tags": ["t"], "examples": ["", "hi"]}]
    })
    .to_string();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{card}",
                card.len()
            );
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let key = vectors().join("keys/test-es256-1.private.jwk.json");
    let mut cmd = bin();
    cmd.arg("render")
        .arg("--from-url")
        .arg(format!("http://{addr}/.well-known/agent-card.json"))
        .arg("--key")
        .arg(&key);
    let out = run(cmd, None);
    let err = out_str(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("serves a v0.3 card; converted to v1.0"),
        "{err}"
    );
    assert!(
        err.contains("warning: skills[0].examples[0]: empty"),
        "{err}"
    );
    let signed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        signed["supportedInterfaces"],
        serde_json::json!([
            {"url": "https://echo.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"},
            {"url": "https://echo.example.com/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3.0"}
        ])
    );
    assert_eq!(signed["capabilities"]["extendedAgentCard"], true);
    assert_eq!(
        signed["securityRequirements"],
        serde_json::json!([{"schemes": {"bearer": {}}}]),
        "a scope-less requirement stays published"
    );
    assert!(signed.get("url").is_none() && signed.get("security").is_none());
    let path = dir.path().join("card.json");
    std::fs::write(&path, &out.stdout).unwrap();
    let mut verify = bin();
    verify
        .arg("verify")
        .arg(&path)
        .arg("--jwks")
        .arg(vectors().join("keys/jwks.json"));
    let v = run(verify, None);
    assert_eq!(v.status.code(), Some(0), "{}", out_str(&v.stderr));
}
