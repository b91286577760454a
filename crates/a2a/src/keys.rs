//! Signing keys: loading (private JWK or PKCS#8 PEM), generating, key ids, JWKS.
//!
//! Every key ends up as a private JWK held by a [`SigningKey`], whatever form it came in, so
//! the public half published in the JWKS is derived one way only. The key id is, in order of
//! preference: the one the caller names, the JWK's own `kid`, the RFC 7638 thumbprint (stable
//! across formats, so the same PEM and JWK get the same id).

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use josekit::jwk::alg::ec::{EcCurve, EcKeyPair};
use josekit::jwk::alg::ed::{EdCurve, EdKeyPair};
use josekit::jwk::alg::rsa::RsaKeyPair;
use josekit::jwk::alg::rsapss::RsaPssKeyPair;
use josekit::jwk::{Jwk, KeyAlg, KeyInfo, KeyPair};
use josekit::jws::{EdDSA, JwsSigner, JwsVerifier, ES256, ES384, PS256, RS256};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Why a key could not be loaded, generated or used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The input is neither a JWK nor a PKCS#8 PEM private key.
    #[error("not a private JWK or PKCS#8 PEM private key: {0}")]
    Format(String),
    /// The key's type or curve is not one we sign with.
    #[error("unsupported key: {0}")]
    Unsupported(String),
    /// The requested algorithm does not fit the key.
    #[error("algorithm {alg} does not fit a {kty} key")]
    AlgMismatch {
        /// Requested algorithm.
        alg: String,
        /// The key's type and curve.
        kty: String,
    },
    /// The crypto library refused the key or the operation.
    #[error("{0}")]
    Crypto(#[from] josekit::JoseError),
    /// The key is held by an HSM or a key service, which failed or refused to sign.
    #[error("{backend}: {reason}")]
    Backend {
        /// Which backend (`pkcs11`, `hashivault`).
        backend: &'static str,
        /// What it said.
        reason: String,
    },
    /// The private key is held elsewhere (an HSM, a key service) and cannot be exported.
    #[error("the private key of {0:?} is held by its backend and cannot be exported")]
    NotExportable(String),
}

/// A private key held where it cannot be read (an HSM through PKCS#11, Vault's transit
/// engine): it only signs. Implemented by the operator's signer backends.
pub trait HeldKey: fmt::Debug + Send + Sync {
    /// Sign `message` with the key's algorithm: the raw JWS signature (ECDSA as `r || s`,
    /// see [`ecdsa_der_to_jose`] for backends that answer in DER).
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError>;
}

/// An ECDSA signature in ASN.1 DER (`SEQUENCE { r INTEGER, s INTEGER }`, as PKCS#11 modules,
/// cloud KMSs and OpenSSL return it) in the fixed-width `r || s` form JWS uses (RFC 7518
/// §3.4): each integer left-padded to the curve's size. Other algorithms pass unchanged.
pub fn ecdsa_der_to_jose(alg: Algorithm, der: &[u8]) -> Result<Vec<u8>, KeyError> {
    let width = match alg {
        Algorithm::ES256 => 32,
        Algorithm::ES384 => 48,
        _ => return Ok(der.to_vec()),
    };
    let sig = openssl::ecdsa::EcdsaSig::from_der(der)
        .map_err(|e| KeyError::Format(format!("not a DER ECDSA signature: {e}")))?;
    let mut out = Vec::with_capacity(2 * width);
    for n in [sig.r(), sig.s()] {
        let bytes = n.to_vec_padded(width as i32).map_err(|_| {
            KeyError::Format(format!("an ECDSA integer is longer than {width} bytes"))
        })?;
        out.extend_from_slice(&bytes);
    }
    Ok(out)
}

/// How a [`SigningKey`] signs.
#[derive(Clone)]
enum Signer {
    /// With the private key in memory.
    Local {
        private: Jwk,
        signer: Box<dyn JwsSigner>,
    },
    /// Through the backend that holds it.
    Held(std::sync::Arc<dyn HeldKey>),
}

/// The JWS algorithms cards are signed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// ECDSA P-256 with SHA-256: the default, compact and supported by every SDK.
    ES256,
    /// ECDSA P-384 with SHA-384.
    ES384,
    /// Ed25519.
    EdDSA,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PSS with SHA-256.
    PS256,
}

impl Algorithm {
    /// Every supported algorithm.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::ES256,
        Algorithm::ES384,
        Algorithm::EdDSA,
        Algorithm::RS256,
        Algorithm::PS256,
    ];

    /// The JOSE name (`alg` header value).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::ES256 => "ES256",
            Algorithm::ES384 => "ES384",
            Algorithm::EdDSA => "EdDSA",
            Algorithm::RS256 => "RS256",
            Algorithm::PS256 => "PS256",
        }
    }

    fn signer(self, jwk: &Jwk) -> Result<Box<dyn JwsSigner>, KeyError> {
        Ok(match self {
            Algorithm::ES256 => Box::new(ES256.signer_from_jwk(jwk)?),
            Algorithm::ES384 => Box::new(ES384.signer_from_jwk(jwk)?),
            Algorithm::EdDSA => Box::new(EdDSA.signer_from_jwk(jwk)?),
            Algorithm::RS256 => Box::new(RS256.signer_from_jwk(jwk)?),
            Algorithm::PS256 => Box::new(PS256.signer_from_jwk(jwk)?),
        })
    }

    /// A verifier for this algorithm from a public JWK.
    pub fn verifier(self, jwk: &Jwk) -> Result<Box<dyn JwsVerifier>, KeyError> {
        Ok(match self {
            Algorithm::ES256 => Box::new(ES256.verifier_from_jwk(jwk)?),
            Algorithm::ES384 => Box::new(ES384.verifier_from_jwk(jwk)?),
            Algorithm::EdDSA => Box::new(EdDSA.verifier_from_jwk(jwk)?),
            Algorithm::RS256 => Box::new(RS256.verifier_from_jwk(jwk)?),
            Algorithm::PS256 => Box::new(PS256.verifier_from_jwk(jwk)?),
        })
    }

    /// Whether this algorithm can use a key of type `kty` on curve `crv`.
    pub fn fits(self, kty: &str, crv: Option<&str>) -> bool {
        matches!(
            (self, kty, crv),
            (Algorithm::ES256, "EC", Some("P-256"))
                | (Algorithm::ES384, "EC", Some("P-384"))
                | (Algorithm::EdDSA, "OKP", Some("Ed25519"))
                | (Algorithm::RS256 | Algorithm::PS256, "RSA", _)
        )
    }

    /// The algorithm a key is used with when nothing says otherwise.
    fn default_for(kty: &str, crv: Option<&str>) -> Result<Algorithm, KeyError> {
        match (kty, crv) {
            ("EC", Some("P-256")) => Ok(Algorithm::ES256),
            ("EC", Some("P-384")) => Ok(Algorithm::ES384),
            ("OKP", Some("Ed25519")) => Ok(Algorithm::EdDSA),
            ("RSA", _) => Ok(Algorithm::RS256),
            (kty, crv) => Err(KeyError::Unsupported(describe(kty, crv))),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                KeyError::Unsupported(format!(
                    "algorithm {s:?} (supported: ES256, ES384, EdDSA, RS256, PS256)"
                ))
            })
    }
}

fn describe(kty: &str, crv: Option<&str>) -> String {
    match crv {
        Some(c) => format!("{kty}/{c}"),
        None => kty.to_string(),
    }
}

/// A private key ready to sign, with its algorithm, key id and public JWK.
#[derive(Clone)]
pub struct SigningKey {
    alg: Algorithm,
    kid: String,
    public: Map<String, Value>,
    signer: Signer,
    /// The certificate chain (base64 DER, leaf first) written as `x5c` into each signature's
    /// protected header and the public JWK; empty for a bare key.
    x5c: Vec<String>,
    /// Built once from the public JWK: re-signing checks each card's previous signature with
    /// it, and building a verifier (OpenSSL decoding the key) costs more than the check.
    verifier: Box<dyn JwsVerifier>,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print private material.
        f.debug_struct("SigningKey")
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .finish()
    }
}

impl SigningKey {
    /// Load a private key from JWK JSON or PKCS#8 PEM bytes (detected from the content).
    /// `kid` and `alg` override what the key says.
    pub fn from_bytes(
        bytes: &[u8],
        kid: Option<&str>,
        alg: Option<Algorithm>,
    ) -> Result<Self, KeyError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| KeyError::Format("the key is not UTF-8 text".into()))?
            .trim_start();
        if text.starts_with("-----BEGIN") {
            Self::from_pem(text.as_bytes(), kid, alg)
        } else {
            Self::from_jwk_json(text.as_bytes(), kid, alg)
        }
    }

    /// Load a private JWK (JSON).
    pub fn from_jwk_json(
        bytes: &[u8],
        kid: Option<&str>,
        alg: Option<Algorithm>,
    ) -> Result<Self, KeyError> {
        let jwk = Jwk::from_bytes(bytes).map_err(|e| KeyError::Format(e.to_string()))?;
        Self::from_jwk(jwk, kid, alg)
    }

    /// Load a PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`).
    pub fn from_pem(
        bytes: &[u8],
        kid: Option<&str>,
        alg: Option<Algorithm>,
    ) -> Result<Self, KeyError> {
        let info = KeyInfo::detect(&bytes).ok_or_else(|| {
            KeyError::Format("unreadable PEM (expected a PKCS#8 PRIVATE KEY)".into())
        })?;
        if info.is_public_key() {
            return Err(KeyError::Format(
                "this is a public key; signing needs the private key".into(),
            ));
        }
        let mut jwk = match info.alg() {
            Some(KeyAlg::Ec { .. }) => EcKeyPair::from_pem(bytes, None)?.to_jwk_key_pair(),
            Some(KeyAlg::Ed { .. }) => EdKeyPair::from_pem(bytes)?.to_jwk_key_pair(),
            Some(KeyAlg::Rsa) => RsaKeyPair::from_pem(bytes)?.to_jwk_key_pair(),
            Some(KeyAlg::RsaPss { .. }) => {
                let pair = RsaPssKeyPair::from_pem(bytes, None, None, None)?;
                let mut jwk = pair.to_jwk_key_pair();
                if alg.is_none() {
                    jwk.set_algorithm("PS256");
                }
                jwk
            }
            _ => return Err(KeyError::Unsupported("PEM key type".into())),
        };
        // A PEM carries no metadata: alg and use come from the caller or the defaults.
        jwk.set_key_use("sig");
        Self::from_jwk(jwk, kid, alg)
    }

    /// Build from a parsed private JWK.
    pub fn from_jwk(
        mut jwk: Jwk,
        kid: Option<&str>,
        alg: Option<Algorithm>,
    ) -> Result<Self, KeyError> {
        let kty = jwk.key_type().to_string();
        let crv = jwk.curve().map(str::to_string);
        if jwk.parameter("d").is_none() {
            return Err(KeyError::Format(
                "the JWK has no private part (\"d\"); signing needs the private key".into(),
            ));
        }
        let alg = match (alg, jwk.algorithm()) {
            (Some(a), _) => a,
            (None, Some(name)) => name.parse()?,
            (None, None) => Algorithm::default_for(&kty, crv.as_deref())?,
        };
        if !alg.fits(&kty, crv.as_deref()) {
            return Err(KeyError::AlgMismatch {
                alg: alg.name().into(),
                kty: describe(&kty, crv.as_deref()),
            });
        }
        jwk.set_algorithm(alg.name());
        let kid = match (kid, jwk.key_id()) {
            (Some(k), _) => k.to_string(),
            (None, Some(k)) => k.to_string(),
            (None, None) => thumbprint(jwk.as_ref())?,
        };
        jwk.set_key_id(kid.clone());
        let signer = alg.signer(&jwk)?;
        let public = public_members(&jwk, alg, &kid);
        let verifier = alg.verifier(&Jwk::from_map(public.clone())?)?;
        Ok(SigningKey {
            alg,
            kid,
            public,
            signer: Signer::Local {
                private: jwk,
                signer,
            },
            x5c: Vec::new(),
            verifier,
        })
    }

    /// A key held by a backend that only signs (an HSM, a key service): `public` is its public
    /// JWK (its `kid` and `alg` members are set here); the key id is `kid` or the thumbprint.
    pub fn held(
        alg: Algorithm,
        kid: Option<&str>,
        public: &Map<String, Value>,
        key: std::sync::Arc<dyn HeldKey>,
    ) -> Result<Self, KeyError> {
        let kty = public
            .get("kty")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let crv = public.get("crv").and_then(Value::as_str);
        if !alg.fits(kty, crv) {
            return Err(KeyError::AlgMismatch {
                alg: alg.name().into(),
                kty: describe(kty, crv),
            });
        }
        let kid = match kid {
            Some(k) => k.to_string(),
            None => thumbprint(public)?,
        };
        let jwk = Jwk::from_map(public.clone())?;
        let public = public_members(&jwk, alg, &kid);
        let verifier = alg.verifier(&Jwk::from_map(public.clone())?)?;
        Ok(SigningKey {
            alg,
            kid,
            public,
            signer: Signer::Held(key),
            x5c: Vec::new(),
            verifier,
        })
    }

    /// This key with its certificate chain (base64 DER, leaf first): signatures carry it as
    /// `x5c` in their protected header, and the published JWK carries it too.
    pub fn with_x5c(mut self, chain: Vec<String>) -> Self {
        if chain.is_empty() {
            self.public.remove("x5c");
        } else {
            self.public.insert(
                "x5c".into(),
                Value::Array(chain.iter().cloned().map(Value::String).collect()),
            );
        }
        self.x5c = chain;
        self
    }

    /// The certificate chain signatures carry (`x5c`), leaf first; empty for a bare key.
    pub fn x5c(&self) -> &[String] {
        &self.x5c
    }

    /// Whether the private key is held by a backend rather than in memory.
    pub fn is_held(&self) -> bool {
        matches!(self.signer, Signer::Held(_))
    }

    /// A fresh key for `alg` (RSA keys are 2048 bits).
    pub fn generate(alg: Algorithm, kid: Option<&str>) -> Result<Self, KeyError> {
        let jwk = match alg {
            Algorithm::ES256 => EcKeyPair::generate(EcCurve::P256)?.to_jwk_key_pair(),
            Algorithm::ES384 => EcKeyPair::generate(EcCurve::P384)?.to_jwk_key_pair(),
            Algorithm::EdDSA => EdKeyPair::generate(EdCurve::Ed25519)?.to_jwk_key_pair(),
            Algorithm::RS256 | Algorithm::PS256 => RsaKeyPair::generate(2048)?.to_jwk_key_pair(),
        };
        let mut jwk = jwk;
        jwk.set_key_use("sig");
        Self::from_jwk(jwk, kid, Some(alg))
    }

    /// The JWS algorithm this key signs with.
    pub fn alg(&self) -> Algorithm {
        self.alg
    }

    /// The key id written into signatures and the JWKS.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public JWK (`kty`, curve or modulus members, `kid`, `alg`, `use: sig`).
    pub fn public_jwk(&self) -> &Map<String, Value> {
        &self.public
    }

    fn private(&self) -> Result<&Jwk, KeyError> {
        match &self.signer {
            Signer::Local { private, .. } => Ok(private),
            Signer::Held(_) => Err(KeyError::NotExportable(self.kid.clone())),
        }
    }

    /// The private JWK as JSON text (for `keygen` and Secrets); refused for a held key.
    pub fn private_jwk_json(&self) -> Result<String, KeyError> {
        Ok(self.private()?.to_string())
    }

    /// The private key as PKCS#8 PEM; refused for a held key.
    pub fn private_pem(&self) -> Result<String, KeyError> {
        let private = self.private()?;
        let pem = match private.key_type() {
            "EC" => EcKeyPair::from_jwk(private)?.to_pem_private_key(),
            "OKP" => EdKeyPair::from_jwk(private)?.to_pem_private_key(),
            _ => RsaKeyPair::from_jwk(private)?.to_pem_private_key(),
        };
        String::from_utf8(pem).map_err(|e| KeyError::Format(e.to_string()))
    }

    /// Sign `message`, returning the raw JWS signature bytes.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        match &self.signer {
            Signer::Local { signer, .. } => Ok(signer.sign(message)?),
            Signer::Held(key) => key.sign(message),
        }
    }

    /// Whether `signature` (raw JWS signature bytes) is this key's over `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        self.verifier.verify(message, signature).is_ok()
    }
}

/// The public members of a JWK, by key type.
fn public_members(jwk: &Jwk, alg: Algorithm, kid: &str) -> Map<String, Value> {
    // `x5c` is set by [`SigningKey::with_x5c`] only.
    let wanted: &[&str] = match jwk.key_type() {
        "EC" => &["kty", "crv", "x", "y"],
        "OKP" => &["kty", "crv", "x"],
        _ => &["kty", "n", "e"],
    };
    let mut out = Map::new();
    for name in wanted {
        if let Some(v) = jwk.parameter(name) {
            out.insert((*name).to_string(), v.clone());
        }
    }
    out.insert("kid".into(), Value::String(kid.to_string()));
    out.insert("alg".into(), Value::String(alg.name().to_string()));
    out.insert("use".into(), Value::String("sig".into()));
    out
}

/// RFC 7638 JWK thumbprint (SHA-256, base64url): a key id derived from the key itself.
pub fn thumbprint(jwk: &Map<String, Value>) -> Result<String, KeyError> {
    let kty = jwk.get("kty").and_then(Value::as_str).unwrap_or_default();
    let required: &[&str] = match kty {
        "EC" => &["crv", "kty", "x", "y"],
        "OKP" => &["crv", "kty", "x"],
        "RSA" => &["e", "kty", "n"],
        other => return Err(KeyError::Unsupported(format!("key type {other:?}"))),
    };
    let mut members = Map::new();
    for name in required {
        let v = jwk
            .get(*name)
            .ok_or_else(|| KeyError::Format(format!("the JWK lacks {name:?}")))?;
        members.insert((*name).to_string(), v.clone());
    }
    let digest = Sha256::digest(super::canonical::jcs(&Value::Object(members)));
    Ok(URL_SAFE_NO_PAD.encode(digest))
}

/// A JSON Web Key Set of public keys, as served at `/.well-known/jwks.json`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Jwks {
    /// The keys, each a JWK object.
    pub keys: Vec<Map<String, Value>>,
}

impl Jwks {
    /// The public keys of `keys`, in order.
    pub fn from_signing_keys<'a>(keys: impl IntoIterator<Item = &'a SigningKey>) -> Self {
        Jwks {
            keys: keys.into_iter().map(|k| k.public.clone()).collect(),
        }
    }

    /// Parse a JWKS document (`{"keys": [...]}`) or a single JWK.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| KeyError::Format(format!("JWKS: {e}")))?;
        match value {
            Value::Object(mut map) => match map.remove("keys") {
                Some(Value::Array(keys)) => Ok(Jwks {
                    keys: keys
                        .into_iter()
                        .filter_map(|k| match k {
                            Value::Object(m) => Some(m),
                            _ => None,
                        })
                        .collect(),
                }),
                Some(_) => Err(KeyError::Format("JWKS: \"keys\" must be an array".into())),
                None if map.contains_key("kty") => Ok(Jwks { keys: vec![map] }),
                None => Err(KeyError::Format("JWKS: no \"keys\" member".into())),
            },
            _ => Err(KeyError::Format("JWKS: not a JSON object".into())),
        }
    }

    /// The JWKS as a JSON value.
    pub fn to_value(&self) -> Value {
        Value::Object(Map::from_iter([(
            "keys".to_string(),
            Value::Array(self.keys.iter().cloned().map(Value::Object).collect()),
        )]))
    }

    /// The key with id `kid`.
    pub fn find(&self, kid: &str) -> Option<&Map<String, Value>> {
        self.keys
            .iter()
            .find(|k| k.get("kid").and_then(Value::as_str) == Some(kid))
    }
}
