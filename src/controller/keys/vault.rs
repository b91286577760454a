//! Signing with a key of Vault's transit engine (`--signer hashivault://<key>`, as cosign names
//! it): Vault holds the private key and signs; the operator reads the public keys and asks.
//!
//! Data flow: `--vault-addr` and the auth (a token from `--vault-token-file` / `VAULT_TOKEN`, or
//! Vault's Kubernetes auth: the operator's ServiceAccount token exchanged at
//! `auth/<mount>/login` for a role) → [`open`] reads `GET /v1/<mount>/keys/<key>` → one
//! [`SigningKey`] per key version still available, key id `<key>-v<version>`, the latest
//! version active (a rotation in Vault is a new key id, published first by the staged rotation)
//! → signing posts `POST /v1/<mount>/sign/<key>` with that version and JWS marshaling (ECDSA
//! answered as `r || s`), from the reconcile's thread without blocking the runtime's other
//! tasks ([`tokio::task::block_in_place`]). A token refused (expired) is renewed by logging in
//! again, once per request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use openssl::bn::BigNumContext;
use openssl::pkey::{Id, PKey};
use serde_json::{json, Map, Value};

use crate::a2a::keys::{HeldKey, KeyError};
use crate::a2a::{Algorithm, Jwks, SigningKey};

use super::Keys;

/// How long one Vault request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A `hashivault://` URI: the transit key and its engine's mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VaultUri {
    /// The transit key's name.
    pub key: String,
    /// The transit engine's mount path (`?mount=`, default `transit`).
    pub mount: String,
}

impl VaultUri {
    /// Parse `hashivault://<key>[?mount=<path>]`.
    pub fn parse(uri: &str) -> Result<VaultUri, String> {
        let rest = uri
            .strip_prefix("hashivault://")
            .ok_or("a Vault URI starts with hashivault://")?;
        let (key, query) = rest.split_once('?').unwrap_or((rest, ""));
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        if !name_ok(key) {
            return Err("name the transit key: hashivault://<key> (letters, digits, - _ .)".into());
        }
        let mut mount = "transit".to_string();
        for attr in query.split('&').filter(|a| !a.is_empty()) {
            match attr.split_once('=') {
                Some(("mount", m)) if m.split('/').all(name_ok) => mount = m.to_string(),
                _ => {
                    return Err(format!(
                        "unknown or invalid query attribute {attr:?} (mount=<path>)"
                    ))
                }
            }
        }
        Ok(VaultUri {
            key: key.to_string(),
            mount,
        })
    }
}

impl std::fmt::Display for VaultUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hashivault://{}", self.key)?;
        if self.mount != "transit" {
            write!(f, "?mount={}", self.mount)?;
        }
        Ok(())
    }
}

/// How the operator authenticates to Vault.
#[derive(Clone, Debug)]
pub enum VaultAuth {
    /// A token, read from a file (a mounted Secret) or given in `VAULT_TOKEN`.
    Token(TokenSource),
    /// Vault's Kubernetes auth: the ServiceAccount token in `jwt_file`, for `role`.
    Kubernetes {
        /// The Vault role.
        role: String,
        /// The auth method's mount (`kubernetes`).
        mount: String,
        /// The ServiceAccount token file (projected; re-read at each login).
        jwt_file: std::path::PathBuf,
    },
}

/// Where a Vault token comes from.
#[derive(Clone)]
pub enum TokenSource {
    /// A file, re-read at each login.
    File(std::path::PathBuf),
    /// The value itself.
    Value(String),
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::File(p) => write!(f, "File({})", p.display()),
            TokenSource::Value(_) => f.write_str("Value(***)"),
        }
    }
}

/// Where Vault is and how to log in (`run --vault-*`).
#[derive(Clone, Debug)]
pub struct VaultConfig {
    /// `https://vault:8200`.
    pub addr: String,
    /// How to authenticate.
    pub auth: VaultAuth,
    /// A CA bundle (PEM) Vault's certificate chains to, beside the system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// How often the key's versions are read again (a rotation in Vault is a new version).
    pub refresh: Duration,
}

/// Why the transit key cannot be used (said in the cards' `Signed` condition).
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// No `--vault-addr`.
    #[error("no Vault address: give --vault-addr (or VAULT_ADDR)")]
    NoAddress,
    /// The HTTP client could not be set up.
    #[error("{0}")]
    Client(String),
    /// Vault could not be reached, or answered with an error.
    #[error("{what}: {reason}")]
    Request {
        /// The request.
        what: String,
        /// What happened.
        reason: String,
    },
    /// The key is not one cards can be signed with.
    #[error("transit key {key:?}: {reason}")]
    Unusable {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
}

/// The connection to Vault: the HTTP client, the auth, and the current token.
pub struct Vault {
    config: VaultConfig,
    http: reqwest::Client,
    token: Mutex<Option<String>>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vault({})", self.config.addr)
    }
}

fn request_error(what: &str, reason: impl std::fmt::Display) -> VaultError {
    VaultError::Request {
        what: what.to_string(),
        reason: reason.to_string(),
    }
}

impl Vault {
    /// How often the key's versions are read again.
    pub fn refresh(&self) -> Duration {
        self.config.refresh
    }

    /// A connection to `config`'s Vault (no request made yet).
    pub fn new(config: VaultConfig) -> Result<Vault, VaultError> {
        if config.addr.is_empty() {
            return Err(VaultError::NoAddress);
        }
        let mut builder = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &config.ca_file {
            let pem = std::fs::read(ca).map_err(|e| {
                VaultError::Client(format!("--vault-ca-file {}: {e}", ca.display()))
            })?;
            let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| {
                VaultError::Client(format!("--vault-ca-file {}: {e}", ca.display()))
            })?;
            builder = builder.add_root_certificate(cert);
        }
        let http = builder
            .build()
            .map_err(|e| VaultError::Client(e.to_string()))?;
        Ok(Vault {
            config,
            http,
            token: Mutex::new(None),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1/{path}", self.config.addr.trim_end_matches('/'))
    }

    /// A token: the configured one, or a fresh login with the ServiceAccount token.
    async fn login(&self) -> Result<String, VaultError> {
        let token = match &self.config.auth {
            VaultAuth::Token(TokenSource::Value(t)) => t.clone(),
            VaultAuth::Token(TokenSource::File(path)) => std::fs::read_to_string(path)
                .map_err(|e| request_error(&format!("token file {}", path.display()), e))?
                .trim()
                .to_string(),
            VaultAuth::Kubernetes {
                role,
                mount,
                jwt_file,
            } => {
                let jwt = std::fs::read_to_string(jwt_file).map_err(|e| {
                    request_error(&format!("ServiceAccount token {}", jwt_file.display()), e)
                })?;
                let what = format!("login at auth/{mount} as role {role:?}");
                let body = self
                    .call(
                        reqwest::Method::POST,
                        &format!("auth/{mount}/login"),
                        None,
                        Some(json!({"role": role, "jwt": jwt.trim()})),
                        &what,
                    )
                    .await?;
                body.pointer("/auth/client_token")
                    .and_then(Value::as_str)
                    .ok_or_else(|| request_error(&what, "no auth.client_token in the answer"))?
                    .to_string()
            }
        };
        *crate::locks::lock(&self.token) = Some(token.clone());
        Ok(token)
    }

    /// One request, its JSON answer; a refusal is an error naming Vault's words.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
        what: &str,
    ) -> Result<Value, VaultError> {
        let mut req = self.http.request(method, self.url(path));
        if let Some(t) = token {
            req = req.header("X-Vault-Token", t);
        }
        if let Some(b) = &body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.map_err(|e| request_error(what, e))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| request_error(what, e))?;
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            let errors = json
                .get("errors")
                .and_then(Value::as_array)
                .map(|e| {
                    e.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| text.chars().take(200).collect());
            return Err(request_error(what, format!("{status}: {errors}")));
        }
        Ok(json)
    }

    /// A request with the current token; refused with 403 once, logs in again and retries.
    async fn authed(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        what: &str,
    ) -> Result<Value, VaultError> {
        let current = crate::locks::lock(&self.token).clone();
        let token = match current {
            Some(t) => t,
            None => self.login().await?,
        };
        match self
            .call(method.clone(), path, Some(&token), body.clone(), what)
            .await
        {
            Err(VaultError::Request { reason, .. }) if reason.starts_with("403") => {
                let token = self.login().await?;
                self.call(method, path, Some(&token), body, what).await
            }
            other => other,
        }
    }
}

/// One version of a transit key: signs through Vault.
#[derive(Debug)]
pub struct TransitKey {
    vault: Arc<Vault>,
    uri: VaultUri,
    version: u64,
    alg: Algorithm,
}

impl TransitKey {
    async fn sign_async(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        let mut body = json!({"input": STANDARD.encode(message), "key_version": self.version});
        match self.alg {
            Algorithm::ES256 => {
                body["hash_algorithm"] = json!("sha2-256");
                body["marshaling_algorithm"] = json!("jws");
            }
            Algorithm::ES384 => {
                body["hash_algorithm"] = json!("sha2-384");
                body["marshaling_algorithm"] = json!("jws");
            }
            Algorithm::RS256 => {
                body["hash_algorithm"] = json!("sha2-256");
                body["signature_algorithm"] = json!("pkcs1v15");
            }
            Algorithm::PS256 => {
                body["hash_algorithm"] = json!("sha2-256");
                body["signature_algorithm"] = json!("pss");
            }
            Algorithm::EdDSA => {}
        }
        let path = format!("{}/sign/{}", self.uri.mount, self.uri.key);
        let what = format!("POST {path} (version {})", self.version);
        let backend = |reason: String| KeyError::Backend {
            backend: "hashivault",
            reason,
        };
        let answer = self
            .vault
            .authed(reqwest::Method::POST, &path, Some(body), &what)
            .await
            .map_err(|e| backend(e.to_string()))?;
        let signature = answer
            .pointer("/data/signature")
            .and_then(Value::as_str)
            .ok_or_else(|| backend(format!("{what}: no data.signature in the answer")))?;
        // `vault:v<version>:<signature>`: base64url with JWS marshaling, else base64.
        let encoded = signature.rsplit(':').next().unwrap_or_default();
        URL_SAFE_NO_PAD
            .decode(encoded.trim_end_matches('='))
            .or_else(|_| STANDARD.decode(encoded))
            .map_err(|_| backend(format!("{what}: the signature is not base64")))
    }
}

impl HeldKey for TransitKey {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| KeyError::Backend {
            backend: "hashivault",
            reason: "signing needs the operator's runtime".into(),
        })?;
        // The reconcile's worker thread waits for Vault; the runtime's other tasks move on.
        tokio::task::block_in_place(|| handle.block_on(self.sign_async(message)))
    }
}

/// The public JWK members of a transit key version's public key, and its algorithm.
fn public_jwk(kind: &str, public: &str) -> Result<(Algorithm, Map<String, Value>), String> {
    let mut jwk = Map::new();
    if kind == "ed25519" {
        // Vault gives Ed25519 public keys as bare base64.
        let raw = STANDARD
            .decode(public.trim())
            .map_err(|_| "the Ed25519 public key is not base64".to_string())?;
        jwk.insert("kty".into(), "OKP".into());
        jwk.insert("crv".into(), "Ed25519".into());
        jwk.insert("x".into(), URL_SAFE_NO_PAD.encode(raw).into());
        return Ok((Algorithm::EdDSA, jwk));
    }
    let key = PKey::public_key_from_pem(public.as_bytes()).map_err(|e| e.to_string())?;
    match key.id() {
        Id::EC => {
            let ec = key.ec_key().map_err(|e| e.to_string())?;
            let (alg, crv, width) = match kind {
                "ecdsa-p256" => (Algorithm::ES256, "P-256", 32),
                "ecdsa-p384" => (Algorithm::ES384, "P-384", 48),
                other => return Err(format!("key type {other} cannot sign cards")),
            };
            let mut ctx = BigNumContext::new().map_err(|e| e.to_string())?;
            let (mut x, mut y) = (
                openssl::bn::BigNum::new().map_err(|e| e.to_string())?,
                openssl::bn::BigNum::new().map_err(|e| e.to_string())?,
            );
            ec.public_key()
                .affine_coordinates(ec.group(), &mut x, &mut y, &mut ctx)
                .map_err(|e| e.to_string())?;
            let pad = |n: &openssl::bn::BigNum| n.to_vec_padded(width).map_err(|e| e.to_string());
            jwk.insert("kty".into(), "EC".into());
            jwk.insert("crv".into(), crv.into());
            jwk.insert("x".into(), URL_SAFE_NO_PAD.encode(pad(&x)?).into());
            jwk.insert("y".into(), URL_SAFE_NO_PAD.encode(pad(&y)?).into());
            Ok((alg, jwk))
        }
        Id::RSA if key.bits() >= 2048 => {
            let rsa = key.rsa().map_err(|e| e.to_string())?;
            jwk.insert("kty".into(), "RSA".into());
            jwk.insert("n".into(), URL_SAFE_NO_PAD.encode(rsa.n().to_vec()).into());
            jwk.insert("e".into(), URL_SAFE_NO_PAD.encode(rsa.e().to_vec()).into());
            Ok((Algorithm::RS256, jwk))
        }
        _ => Err(format!("key type {kind} cannot sign cards")),
    }
}

/// Open the transit key `uri` names: every version still available, the latest active.
pub async fn open(vault: &Arc<Vault>, uri: &VaultUri) -> Result<Keys, VaultError> {
    let path = format!("{}/keys/{}", uri.mount, uri.key);
    let what = format!("GET {path}");
    let answer = vault
        .authed(reqwest::Method::GET, &path, None, &what)
        .await?;
    let unusable = |reason: String| VaultError::Unusable {
        key: uri.key.clone(),
        reason,
    };
    let data = answer
        .get("data")
        .ok_or_else(|| unusable("no data in the answer".into()))?;
    let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
    if data.get("supports_signing").and_then(Value::as_bool) == Some(false) {
        return Err(unusable(format!("a {kind} key cannot sign")));
    }
    let latest = data
        .get("latest_version")
        .and_then(Value::as_u64)
        .ok_or_else(|| unusable("no latest_version".into()))?;
    let mut all = Vec::new();
    let mut latest_key = None;
    let versions = data
        .get("keys")
        .and_then(Value::as_object)
        .ok_or_else(|| unusable("no key versions".into()))?;
    let mut numbered: Vec<(u64, &Value)> = versions
        .iter()
        .filter_map(|(v, k)| Some((v.parse().ok()?, k)))
        .collect();
    numbered.sort_by_key(|(v, _)| std::cmp::Reverse(*v));
    for (version, entry) in numbered {
        let public = entry
            .get("public_key")
            .and_then(Value::as_str)
            .ok_or_else(|| unusable(format!("version {version} has no public_key")))?;
        let (alg, jwk) = public_jwk(kind, public).map_err(unusable)?;
        let held = Arc::new(TransitKey {
            vault: vault.clone(),
            uri: uri.clone(),
            version,
            alg,
        });
        if version == latest {
            latest_key = Some(held.clone());
        }
        let kid = format!("{}-v{version}", uri.key);
        let key =
            SigningKey::held(alg, Some(&kid), &jwk, held).map_err(|e| unusable(e.to_string()))?;
        all.push(key);
    }
    let active = all
        .iter()
        .find(|k| k.kid() == format!("{}-v{latest}", uri.key))
        .cloned()
        .ok_or_else(|| unusable(format!("latest version {latest} is not among the keys")))?;
    // Prove Vault signs with the key it published before publishing it.
    let probe = match &latest_key {
        Some(k) => k.sign_async(b"agentcard-operator").await,
        None => Err(KeyError::Format("no latest version".into())),
    }
    .map_err(|e| unusable(e.to_string()))?;
    if !active.verifies(b"agentcard-operator", &probe) {
        return Err(unusable(
            "Vault's signature does not verify with the key's public key".into(),
        ));
    }
    let kids: Vec<&str> = all.iter().map(SigningKey::kid).collect();
    Ok(Keys {
        jwks: Jwks::from_signing_keys(&all),
        version: format!("hashivault:{}", kids.join(",")),
        active,
        all,
        not_after: None,
        revoked: std::collections::BTreeSet::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vault_uris_name_a_transit_key_and_its_mount() {
        let u = VaultUri::parse("hashivault://cards").unwrap();
        assert_eq!((u.key.as_str(), u.mount.as_str()), ("cards", "transit"));
        assert_eq!(u.to_string(), "hashivault://cards");
        let m = VaultUri::parse("hashivault://cards?mount=team/transit").unwrap();
        assert_eq!(m.mount, "team/transit");
        assert_eq!(m.to_string(), "hashivault://cards?mount=team/transit");
        for bad in [
            "hashivault://",
            "hashivault://a/b",
            "hashivault://k?x=1",
            "vault://k",
        ] {
            assert!(VaultUri::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn transit_public_keys_become_jwks() {
        let group =
            openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap();
        let ec = openssl::ec::EcKey::generate(&group).unwrap();
        let pem = PKey::from_ec_key(ec).unwrap().public_key_to_pem().unwrap();
        let (alg, jwk) = public_jwk("ecdsa-p256", std::str::from_utf8(&pem).unwrap()).unwrap();
        assert_eq!(alg, Algorithm::ES256);
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(jwk["x"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
        let ed = public_jwk("ed25519", &STANDARD.encode([7u8; 32])).unwrap();
        assert_eq!(ed.0, Algorithm::EdDSA);
        assert!(public_jwk("aes256-gcm96", "x").is_err());
    }
}
